"""Tests for vflkit.training.tiles (AdptVFedConv's runs as records) and its study's configs.

Runs use a width-1/16 VGG-16 (not the paper's model) on 48 CIFAR-10 training and 16 test images
on the CPU, one thread; records go to a temporary folder.
"""

from __future__ import annotations

import time

import pytest
import torch

from vflkit import records
from vflkit.errors import BudgetExhausted, ConfigError
from vflkit.studies import adptvfedconv as study
from vflkit.training import tiles
from vflkit.training.tiles import TilesRun

TINY = dict(width=1 / 16, n_train=48, n_test=16, pretrain_epochs=2, finetune_epochs=2, classifier_epochs=2,
            centralized_epochs=2, batch_size=16, ae_batch_size=16, eval_batch_size=16)


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _comparable(rec: dict) -> dict:
    """A record without what differs between two runs of the same config (times, environment)."""
    drop = {"environment", "finished", "wall_time_s", "peak_memory_mb", "elapsed_s"}
    return {k: v for k, v in rec.items() if k not in drop}


@pytest.mark.parametrize("variant", ["adptvfedconv", "centralized"])
def test_a_run_stopped_at_every_epoch_resumes_to_the_uninterrupted_record(variant, tmp_path):
    """A deadline already past stops the run after each epoch's checkpoint (every stage); calling
    again until it finishes gives the record an uninterrupted run writes."""
    run = TilesRun.make(variant, **TINY)
    whole = records.run_one(run, train=tiles.train, profile="quick", device="cpu", results=tmp_path / "a",
                            progress=False)
    stops = 0
    while True:
        try:
            resumed = records.run_one(run, train=tiles.train, profile="quick", device="cpu",
                                      results=tmp_path / "b", progress=False, deadline=time.time())
            break
        except BudgetExhausted:
            stops += 1
            assert stops < 20
    # stage 1: 2 epochs, transfer, autoencoder: 2, stage 3: 2 (the last epoch's stop is the end)
    assert stops >= (6 if variant == "adptvfedconv" else 1)
    assert _comparable(resumed) == _comparable(whole)
    folder = records.record_path(run, "quick", tmp_path / "b").parent
    assert not list(folder.glob("*.ckpt.d")), "a finished run leaves no checkpoint folder"


@pytest.mark.parametrize("variant, kinds", [
    ("adptvfedconv", {"model_weights", "feature_map"}), ("no_transfer", {"feature_map"}),
    ("noncooperation", set()), ("centralized", set())])
def test_only_feature_maps_and_the_transferred_extractor_cross_the_channel(variant, kinds, tmp_path):
    """The record's ledger holds the transferred extractor (3 messages, one per client) and
    feature maps, nothing else; No model transfer sends no weights; the one-party rows nothing."""
    rec = tiles.run(TilesRun.make(variant, **TINY), profile="quick", device="cpu", results=tmp_path,
                    progress=False)
    assert set(rec["ledger_per_kind"]) == kinds
    if "model_weights" in kinds:
        assert rec["ledger_per_kind"]["model_weights"]["messages"] == 3
        assert rec["ledger_per_kind"]["model_weights"]["bytes"] == 3 * rec["costs"]["model_transfer_bytes"]
    if kinds:
        # 3 clients x (48 training maps x 2 epochs + 16 test maps x 2 evaluations)
        fmap = rec["costs"]["feature_map_bytes_per_sample"]
        assert rec["ledger_per_kind"]["feature_map"]["bytes"] == 3 * fmap * (48 * 2 + 16 * 2)
    assert len(rec["curve"]) == 2 and 0 <= rec["final_accuracy"] <= 1


def test_runs_sharing_stage_one_share_one_pretraining(tmp_path):
    """Non-cooperation and AdptVFedConv at two cuts agree on stage 1: one pre-training file,
    and the AdptVFedConv records carry Non-cooperation's curve unchanged."""
    noncoop = tiles.run(TilesRun.make("noncooperation", **TINY), profile="quick", device="cpu",
                        results=tmp_path, progress=False)
    recs = [tiles.run(TilesRun.make("adptvfedconv", cut=cut, **TINY), profile="quick", device="cpu",
                      results=tmp_path, progress=False) for cut in ("2C+1M", "4C+2M")]
    shared = list((tmp_path / "quick" / "adptvfedconv" / "_pretrain").glob("*.pt"))
    assert len(shared) == 1
    for r in recs:
        assert r["history"]["pretrain"]["test_accuracy"] == noncoop["curve"]


def test_a_run_round_trips_and_a_variant_fixes_its_fields():
    """from_dict(to_dict()) is the run; a config that contradicts its variant is an error."""
    run = TilesRun.make("zero_padding", seed=3, **TINY)
    assert run.adpt.padding == "zeros"
    assert TilesRun.from_dict(run.to_dict()) == run and TilesRun.from_dict(run.to_dict()).key == run.key
    with pytest.raises(ConfigError, match="padding"):
        TilesRun.from_dict({**run.to_dict(), "variant": "adptvfedconv"})
    with pytest.raises(ConfigError, match="Invalid variant"):
        TilesRun.make("fedavg")
    with pytest.raises(ConfigError, match="unknown TilesRun keys"):
        TilesRun.from_dict({**run.to_dict(), "epochs": 3})


def test_the_quick_profile_has_every_table2_row_three_cuts_and_three_seeds():
    """quick: the five Table 2 rows and three cuts on >= 3 seeds, a reduced model labelled as
    such; paper: the paper's model and all ten cuts."""
    g = study.configs("quick")
    assert {r.variant for r in g["table2"]} == set(study.TABLE2_VARIANTS)
    assert len({r.adpt.cut for r in g["table3"]}) == 3 and len({r.seed for r in g["table3"]}) >= 3
    assert len({r.seed for r in g["table2"]}) >= 3
    assert not any(r.adpt.paper_model for r in study.all_runs(g))
    p = study.configs("paper")
    assert all(r.adpt.paper_model for r in study.all_runs(p)) and len({r.adpt.cut for r in p["table3"]}) == 10
    # Table 3's 2C+1M runs are Table 2's AdptVFedConv runs (one record each)
    keys2 = {r.key for r in g["table2"]}
    assert all(r.key in keys2 for r in g["table3"] if r.adpt.cut == "2C+1M")
    with pytest.raises(ConfigError, match="unknown overrides"):
        study.configs("quick", overrides={"epochs": 3})


def test_paper_scale_communication_sits_between_one_shot_and_per_epoch_maps():
    """Per client at the paper's scale: feature maps are 64x8x8 floats (21x a raw tile); sent
    once they cost less than 60 FedAvg rounds of VGG-16, re-sent every epoch more."""
    com = study.communication([]).set_index("what")["MiB"]
    once = com["AdptVFedConv, maps sent once (Algorithm 1)"]
    every = com["AdptVFedConv, maps re-extracted every epoch (ours, default)"]
    fl = com["parameter-sharing FL of the same VGG-16, one round per epoch"]
    raw = com["raw tiles, sent once"]
    assert raw == pytest.approx(50_000 * 3 * 16 * 16 / 2**20)
    assert once - 50_000 * 64 * 8 * 8 * 4 / 2**20 == pytest.approx(39_234 * 4 / 2**20, rel=0.05)  # + the extractor
    assert raw < once < fl < every
