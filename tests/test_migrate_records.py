"""Tests for scripts/migrate_records.py: old records' rounds brought exactly to the protocol-phase count."""

import importlib.util
from pathlib import Path

import pytest
import torch

from vflkit.comm import ROUNDS_COUNTED_AS, Channel, Ledger, Party
from vflkit.data import ImageData
from vflkit.methods import RunConfig, get_method
from vflkit.methods.multi_vfl import MultiVFL, MultiVFLConfig
from vflkit.partition import strips

_spec = importlib.util.spec_from_file_location(
    "migrate_records", Path(__file__).resolve().parents[1] / "scripts" / "migrate_records.py")
migrate_records = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(migrate_records)


def _old_totals(ledger: Ledger, phase: str) -> dict:
    df = ledger.frame(phase=phase)
    return {"bytes": int(df["nbytes"].sum()), "messages": len(df),
            "rounds": len(df.drop_duplicates(["epoch", "step", "kind"]))}


def _old_comm(ledger: Ledger, epoch_name: str = "epoch") -> dict:
    """What the ledger wrote before issue 13: a round per (epoch, step, kind); a party's rounds
    its distinct (step, kind) over the whole run."""
    df = ledger.frame()
    per_epoch = [{epoch_name: int(e), "bytes": int(g["nbytes"].sum()), "messages": len(g),
                  "rounds": len(g.drop_duplicates(["step", "kind"]))} for e, g in df.groupby("epoch")]
    per_party = []
    for party in sorted(set(df["sender"]) | set(df["receiver"])):
        mine = df[(df["sender"] == party) | (df["receiver"] == party)]
        per_party.append({"party": party, "rounds": len(mine.drop_duplicates(["step", "kind"]))})
    return {"total": _old_totals(ledger, "train"), "per_" + ("round" if epoch_name == "round" else "epoch"): per_epoch,
            "per_party": per_party, "eval_total": _old_totals(ledger, "eval"),
            "setup_total": _old_totals(ledger, "setup")}


def _rounds(comm: dict, per: str) -> dict:
    """Every rounds figure of a comm block."""
    return {"total": comm["total"]["rounds"], "per": [r["rounds"] for r in comm[per]],
            "per_party": {r["party"]: r["rounds"] for r in comm["per_party"]},
            "eval": comm["eval_total"]["rounds"], "setup": comm["setup_total"]["rounds"]}


def _split_run(name: str, options: dict) -> Ledger:
    """Two epochs of three steps, evaluated in four batches after each, as the split trainer does."""
    torch.manual_seed(0)
    x = torch.randint(0, 256, (48, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (48,))
    parts = strips(4, image_shape=(1, 28, 28)).split(x)
    ch = Channel()
    parties = [Party("active" if k == 0 else f"passive_{k}", channel=ch,
                     features={"train": parts[k].contiguous(), "test": parts[k].contiguous()},
                     labels={"train": y, "test": y} if k == 0 else None, transform=lambda t: t.float() / 255)
               for k in range(4)]
    models = ("mlp", "lenet", "mlp", "cnn") if name == "vfedmh" else ("mlp",) * 4
    config = RunConfig(paper="vfedmh", dataset="mnist", method=name, models=models, n_parties=4,
                       embedding_dim=8, batch_size=16, options=options)
    method = get_method(name)(config, parties, num_classes=10)
    ch.at(epoch=0, step=0, phase="setup")
    method.setup()
    for epoch in (1, 2):
        for step in range(3):
            ch.at(epoch=epoch, step=step, phase="train")
            method.train_step(torch.arange(16 * step, 16 * step + 16))
        ch.at(epoch=epoch, step=0, phase="eval")
        method.evaluate(batch_size=12)
    return ch.ledger


@pytest.mark.parametrize("name, options", [("local", {}), ("splitnn", {}), ("agg_vfl", {}),
                                           ("c_vfl", {"local_iterations": 2}), ("vfedmh", {}),
                                           ("vfedmh", {"blinding": False})])
def test_split_records_migrate_to_what_the_ledger_now_counts(name, options):
    """An old record's rounds, migrated, equal the new ledger's on the same run; twice is once."""
    ledger = _split_run(name, options)
    config = {"method": name, "n_parties": 4}
    old = {"config": config, "comm": _old_comm(ledger)}
    new = {"total": ledger.totals(), "per_epoch": ledger.per_epoch().reset_index().to_dict(orient="records"),
           "per_party": ledger.per_party().reset_index().to_dict(orient="records"),
           "eval_total": ledger.totals(phase="eval"), "setup_total": ledger.totals(phase="setup")}
    migrated = migrate_records.count_rounds_as_phases(old, paper="vfedmh")
    assert _rounds(migrated["comm"], "per_epoch") == _rounds(new, "per_epoch")
    assert migrated["comm"]["rounds_counted_as"] == ROUNDS_COUNTED_AS
    assert migrate_records.count_rounds_as_phases(migrated, paper="vfedmh") == migrated
    assert "rounds_counted_as" not in old["comm"]  # the input is not changed
    if name == "c_vfl":  # the change this migration exists for: 3 kinds a step were 3 rounds
        assert old["comm"]["total"]["rounds"] == 3 * 6 and migrated["comm"]["total"]["rounds"] == 2 * 6


def test_multi_vfl_records_migrate_to_what_the_ledger_now_counts():
    """Multi-VFL: K - 1 fewer rounds a global round; per-party rounds over every round."""
    g = torch.Generator().manual_seed(0)
    data = ImageData("tiny", torch.randint(0, 256, (400, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(400) % 10, torch.randint(0, 256, (40, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(40) % 10, tuple(str(i) for i in range(10)), (0.5,), (0.25,))
    config = MultiVFLConfig(samples_per_owner=16, batch_size=8, rounds=3, local_lr=0.05, local_steps=None)
    m = MultiVFL(config, data)
    m.setup()
    for r in (1, 2, 3):
        m.round(r)
        m.evaluate(batch_size=16)
    ledger = m.channel.ledger
    old = {"config": {"n_label_owners": config.n_label_owners}, "diverged": None,
           "comm": _old_comm(ledger, epoch_name="round")}
    new = {"total": ledger.totals(),
           "per_round": ledger.per_epoch().reset_index().rename(columns={"epoch": "round"}).to_dict(orient="records"),
           "per_party": ledger.per_party().reset_index().to_dict(orient="records"),
           "eval_total": ledger.totals(phase="eval"), "setup_total": ledger.totals(phase="setup")}
    migrated = migrate_records.count_rounds_as_phases(old, paper="multi_vfl")
    assert _rounds(migrated["comm"], "per_round") == _rounds(new, "per_round")
    assert new["total"]["rounds"] == old["comm"]["total"]["rounds"] - 3 * (config.n_label_owners - 1)
    with pytest.raises(ValueError, match="diverged"):
        migrate_records.count_rounds_as_phases({**old, "diverged": {"round": 2}}, paper="multi_vfl")


def test_records_already_counted_as_phases_are_left_alone():
    """A record new code wrote (marked) is returned unchanged; one the rules do not fit is refused."""
    marked = {"config": {"method": "c_vfl", "n_parties": 4},
              "comm": {"rounds_counted_as": ROUNDS_COUNTED_AS, "total": {"rounds": 12}}}
    assert migrate_records.count_rounds_as_phases(marked, paper="vfedmh") is marked
    odd = {"config": {"method": "c_vfl", "n_parties": 4},
           "comm": {"total": {"rounds": 4}, "per_epoch": [{"epoch": 1, "rounds": 4}], "per_party": [],
                    "eval_total": {}, "setup_total": {}}}
    with pytest.raises(ValueError, match="whole number"):
        migrate_records.count_rounds_as_phases(odd, paper="vfedmh")


def test_per_link_rows_become_columns_and_records_compact(tmp_path, capsys):
    """Third step: a record's comm.per_link as a dict per row becomes columns and rows that read
    back as the same frame (the ledger's column order), a Local run's empty rows what an empty
    ledger writes; the files are rewritten compact, and a second pass rewrites nothing."""
    import json

    from vflkit.network import link_rows
    from vflkit.training.split import comm_summary

    ledger = Ledger()
    for step in range(3):
        ledger.add("passive_1", "active", "embedding", 512, 1, step, "train")
        ledger.add("active", "passive_1", "gradient", 512, 1, step, "train")
    rows = ledger.per_link().to_dict(orient="records")
    folder = tmp_path / "smoke" / "demo"
    folder.mkdir(parents=True)
    written = {}
    for method, links in (("splitnn", rows), ("local", [])):
        config = RunConfig(paper="demo", dataset="mnist", method=method, models=("mlp",) * 2, n_parties=2)
        record = {"key": config.key, "profile": "smoke", "config": config.to_dict(), "environment": {},
                  "finished": None, "wall_time_s": 1.0, "peak_memory_mb": None, "peak_memory_kind": None,
                  "diverged": None, "comm": {"rounds_counted_as": ROUNDS_COUNTED_AS, "per_link": links}}
        (folder / f"{config.key}.json").write_text(json.dumps(record, indent=1, sort_keys=True))
        written[method] = folder / f"{config.key}.json"
    assert migrate_records.main([str(tmp_path)]) == 0
    assert "2 of 2 records rewritten" in capsys.readouterr().out
    split_rec = json.loads(written["splitnn"].read_text())
    assert "\n" not in written["splitnn"].read_text()
    assert split_rec["comm"]["per_link"] == comm_summary(ledger)["per_link"]  # what the trainer writes
    assert link_rows(split_rec["comm"]["per_link"]).equals(link_rows(rows))
    assert json.loads(written["local"].read_text())["comm"]["per_link"] == comm_summary(Ledger())["per_link"]
    assert migrate_records.main([str(tmp_path)]) == 0
    assert "0 of 2 records rewritten" in capsys.readouterr().out
