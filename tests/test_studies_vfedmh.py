"""Tests for vflkit.studies.vfedmh: model assignment, the study's configs, the paper profile
end to end on a tiny slice, and the blinding demonstration."""

import pytest

from vflkit.errors import ConfigError
from vflkit.training.split import run
from vflkit.methods import get_method
from vflkit.studies import vfedmh


def test_assign_models_uses_every_architecture_and_is_seeded():
    """Every architecture of the set appears at least once; the same seed gives the same draw."""
    draws = {vfedmh.assign_models(vfedmh.SMALL_MODELS, seed=s) for s in range(20)}
    for d in draws:
        assert len(d) == 4 and set(d) == set(vfedmh.SMALL_MODELS)
    assert len(draws) > 1
    assert vfedmh.assign_models(vfedmh.RESNETS, seed=3) == vfedmh.assign_models(vfedmh.RESNETS, seed=3)
    with pytest.raises(ConfigError, match="do not fit"):
        vfedmh.assign_models(("mlp", "cnn", "lenet"), n_parties=2, seed=0)


def test_smoke_configs_cover_every_table_and_share_runs():
    """Table II has 4 baselines x 3 models + VFedMH per dataset; Table III reuses VFedMH's run;
    each variant's model mix matches its name; Table IV has one run per optimizer."""
    groups = vfedmh.configs("smoke", seeds=(0, 1))
    assert len(groups["table2"]) == 2 * (4 * 3 + 1)
    t2 = {c.key for c in groups["table2"]}
    assert {c.key for c in groups["table3"] if c.method == "vfedmh"} <= t2
    assert {c.key for c in groups["table3"] if c.method == "agg_vfl"} <= t2
    for c in vfedmh.unique(groups):
        mix = get_method(c.method).model_mix
        if mix is not None:
            assert (len(set(c.models)) == 1) == (mix == "homogeneous"), c
    assert sorted({c.optimizers for c in groups["table4"]}) == sorted(["sgd", "sgd_momentum", "adagrad", "adam"])
    assert all(c.options == {"blinding": False} for c in groups["blinding"])
    with pytest.raises(ConfigError, match=r"unknown overrides \['epoch'\]"):
        vfedmh.configs("smoke", overrides={"epoch": 3})


def test_paper_profile_has_three_seeds_and_every_table_on_every_dataset():
    """Without seeds given, paper runs 3 seeds, both model sets, Tables III-IV on all datasets."""
    groups = vfedmh.configs("paper")
    runs = vfedmh.unique(groups)
    assert {c.seed for c in runs} == {0, 1, 2}
    assert {c.dataset for c in groups["table4"]} == {"mnist", "fashion_mnist", "cifar10"}
    assert set(vfedmh.RESNETS) <= {m for c in groups["table2"] for m in c.models}
    assert {c.seed for c in vfedmh.unique(vfedmh.configs("quick"))} == {0}


def test_overrides_given_as_json_lists_act_like_the_profile_tuples():
    """papermill passes lists: a model set given as a list still gets Tables III-IV."""
    groups = vfedmh.configs("paper", seeds=[0], overrides={"datasets": ["cifar10"],
                                                           "model_sets": [["cnn", "lenet", "mlp"]],
                                                           "all_artefacts_on": ["cifar10"]})
    assert len(groups["table3"]) == 4 * 3 + 1 and len(groups["table4"]) == 4 and groups["blinding"]


def test_paper_profile_runs_end_to_end_on_a_tiny_slice(tmp_path):
    """The paper profile's heterogeneous ResNet run on CIFAR-10 (the PNG tree) trains and
    evaluates every party's model, here on 64 images for one epoch."""
    groups = vfedmh.configs("paper", seeds=[0], overrides={"datasets": ("cifar10",), "n_train": 64, "n_test": 32,
                                                           "epochs": 1, "cvfl_epochs": 1})
    het = [c for c in groups["table2"] if c.method == "vfedmh" and set(c.models) == set(vfedmh.RESNETS)]
    assert len(het) == 1
    record = run(het[0], profile="paper", results=tmp_path, progress=False)
    assert set(record["models"].values()) == set(vfedmh.RESNETS)
    assert all(0 <= m["test_accuracy"] <= 1 for m in record["final"].values())
    assert record["comm"]["total"]["rounds"] == 4  # one batch: VFedMH's four rounds


def test_blinding_demo_shows_the_literal_leak():
    """Per-entry masks leave nothing of the embedding visible; the literal scalar leaks it all;
    both aggregate to the plain mean within the ring's rounding bound."""
    demo = vfedmh.blinding_demo()
    assert abs(demo["corr_per_entry"]) < 0.05
    assert demo["corr_literal"] > 0.999
    assert demo["max_abs_error"] <= demo["error_bound"]
    assert 0.45 < demo["blinded_unit"].mean() < 0.55  # uniform over the ring
