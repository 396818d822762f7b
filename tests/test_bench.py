"""The benchmark's parts run and report what they promise (values unchecked: no timed tests)."""

import pytest

from vflkit.ops import bench


def test_bench_methods_reports_samples_per_second_for_every_method_and_model():
    rows = bench.bench_methods(["mlp"], batch=16, steps=2, blocks=1, device="cpu")
    assert [r["method"] for r in rows] == list(bench.METHODS)
    assert all(r["samples_per_s"] > 0 and r["gpu_util_pct"] is None for r in rows)


def test_bench_overhead_reports_the_three_columns():
    r = bench.bench_overhead("mlp", batch=16, repeats=2)
    assert r["plain_samples_per_s"] > 0 and r["vfl_samples_per_s"] > 0 and r["split_samples_per_s"] > 0


def test_bench_on_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device"):
        bench.main(["--device", "cuda"])


def test_bench_packed_reports_alone_and_packed_for_every_packed_method():
    """`python -m vflkit.ops.bench --packed` times every method the packed trainer mirrors, K runs
    alone against the same K runs vmapped and looped, and vmapped with the step captured and
    replayed (on a CPU the tape), with the pack size it was asked for."""
    rows = bench.bench_packed(["mlp"], pack_size=2, batch=16, steps=2, blocks=1, device="cpu")
    assert [r["method"] for r in rows] == list(bench.PACKED_METHODS)
    assert all(r["alone_samples_per_s"] > 0 and r["vmap_samples_per_s"] > 0 and r["loop_samples_per_s"] > 0
               and r["graphs_samples_per_s"] > 0 and r["pack_size"] == 2 for r in rows)
    # the captured and replayed pack trains as the eager one (the tape: exactly), as a second eager pack does
    assert all(r["graphs_max_abs_diff"] == 0.0 == r["eager_max_abs_diff"] for r in rows), rows
    # C-VFL's packs stack its alike parties: timed and counted against the parties apart too
    assert [r["method"] for r in rows if "vmap_apart_samples_per_s" in r] == ["c_vfl"]


def test_bench_multi_vfl_splits_a_quick_round_into_training_and_both_evaluations():
    """A (reduced) quick-profile round's 10 split steps (5 label owners x 2 batches) and its two evaluations are reported."""
    r = bench.bench_multi_vfl(rounds=1, overrides={"samples_per_owner": 16, "batch_size": 8, "n_test": 20})
    assert r["steps_per_round"] == 10 and r["n_test"] == 20
    assert r["round_before_s"] == r["train_s"] + r["eval_whole_s"]
    assert r["round_after_s"] == r["train_s"] + r["eval_chunked_s"]
    assert all(r[k] > 0 for k in ("step_s", "plain_step_s", "eval_whole_s", "eval_chunked_s",
                                  "train_packed_vmap_s", "train_packed_loop_s"))


def test_bench_packed_writes_rows_the_cost_model_reads(tmp_path, capsys):
    """`--packed --json FILE` writes each row with its step's op count and FLOPs (the cost model's
    own counts); a file whose device names a GPU kind gives that kind its seconds per operation
    (pricing.op_seconds), a CPU's gives none."""
    import json
    import shutil

    from vflkit.ops import pricing
    from vflkit.training import counting

    out = tmp_path / "device" / "bench.json"
    out.parent.mkdir()
    bench.main(["--packed", "--device", "cpu", "--methods", "c_vfl", "--models", "mlp", "--pack-size", "2",
                "--steps", "1", "--batch", "16", "--json", str(out)])
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    (row,) = doc["bench_packed"]["rows"]
    setting = counting.bench_setting("c_vfl", "mlp", 16)
    assert row["ops_per_step"] == counting.count_step_ops(setting) > 1000 and row["flops_per_step"] > 0
    assert row["packed_ops_per_step"] == counting.count_step_ops(setting, pack=2) < row["packed_apart_ops_per_step"]
    assert "us/op" in printed and f"{row['ops_per_step']:>7.0f}" in printed
    assert f"{row['packed_ops_per_step']:>10.0f}" in printed
    shutil.copy(pricing.committed_root() / pricing.OP_COUNTS, tmp_path / pricing.OP_COUNTS)
    assert pricing.op_seconds("h100", tmp_path) is None  # measured on a CPU: no GPU kind
    doc["device"] = "NVIDIA H100 80GB HBM3"
    out.write_text(json.dumps(doc))
    pricing.measurements.cache_clear()
    got = pricing.op_seconds("h100", tmp_path)
    assert got == pytest.approx(16 / row["alone_samples_per_s"] / pricing.step_ops(setting))
    pricing.measurements.cache_clear()


def test_bench_matrix_writes_each_cell_as_it_finishes_and_notes_what_a_setting_refuses(tmp_path):
    """`--matrix FILE`, dry-run on the CPU with small settings: one row per case x precision x
    pack size and per Multi-VFL pack size, in that order, each in FILE once measured; bf16
    refuses vmap (autocast does not reach inside it), which is the row's note, not the end."""
    import json

    out = tmp_path / "matrix.json"
    rows = bench.bench_matrix(out, device="cpu", cases=[("c_vfl", "mlp")], pack_sizes=[2], precisions=["fp32", "bf16"],
                              multi_vfl_sizes=[2], batch=16, steps=1,
                              multi_vfl={"profile": "smoke", "overrides": {"samples_per_owner": 16, "batch_size": 8,
                                                                           "n_test": 20}})
    assert [(r["method"], r["precision"], r["pack_size"]) for r in rows] == [
        ("c_vfl", "fp32", 2), ("c_vfl", "bf16", 2), ("multi_vfl", "fp32", 2)]
    fp32, bf16, multi = rows
    assert not any(k.endswith("error") for k in fp32), fp32
    assert all(fp32[f"{s}_samples_per_s"] > 0 for s in ("alone", "loop", "vmap", "grouped", "graphs"))
    assert "vmap_error" in bf16 and "vmap_samples_per_s" not in bf16 and bf16["loop_samples_per_s"] > 0
    assert all(multi[f"{s}_round_s"] > 0 for s in ("loop", "vmap")), multi
    assert json.loads(out.read_text())["matrix"]["rows"] == json.loads(json.dumps(rows))


def test_bench_matrix_starts_no_cell_once_its_budget_is_spent(tmp_path):
    import json

    out = tmp_path / "matrix.json"
    assert bench.bench_matrix(out, device="cpu", cases=[("c_vfl", "mlp")], pack_sizes=[2], budget_s=0.0) == []
    assert "cells not run" in json.loads(out.read_text())["matrix"]["stopped"]
