"""Tests for vflkit.methods.adptvfedconv and its trainer vflkit.training.adptvfedconv:
coordinated augmentation, the messages of the three stages, resume mid-stage, cost accounting
and every variant.

Runs use a width-1/16 VGG-16 (not the paper's model), 64 CIFAR-10 training images and 32 test
images on the CPU, one thread (the test machine shares its cores).
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from vflkit import claims, records
from vflkit.comm import Channel
from vflkit.ops import pricing
from vflkit.data import ImageData, load_dataset
from vflkit.errors import ConfigError
from vflkit.methods import adptvfedconv as A
from vflkit.models import vgg16_bn_centralized, vgg16_bn_split
from vflkit.partition import grid
from vflkit.studies import adptvfedconv as study
from vflkit.training import adptvfedconv as T
from vflkit.training import checkpoint

W = 1 / 16  # conv widths 4, 8, 16, 32, 32; FC 256


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def cifar() -> ImageData:
    """64 training and 32 test images of CIFAR-10."""
    return load_dataset("cifar10", download=False, progress=False).subset(n_train=64, n_test=32, seed=0)


def tiny(**kw) -> A.AdptVFedConvConfig:
    base = dict(width=W, pretrain_epochs=2, finetune_epochs=2, classifier_epochs=2,
                centralized_epochs=2, batch_size=16, ae_batch_size=16, eval_batch_size=16)
    return A.AdptVFedConvConfig(**{**base, **kw})


# --------------------------------------------------------------------------- augmentation


@pytest.mark.parametrize("cut", ["1C", "2C+1M", "4C+2M"])
@pytest.mark.parametrize("padding", ["replicate", "zeros"])
def test_flipped_image_stitched_maps_equal_maps_of_flipped_image_tiles(cut, padding):
    """Each participant flips its tile, the server swaps left and right positions: the stitched
    maps are those of the flipped whole image's tiles (same extractor everywhere)."""
    torch.manual_seed(0)
    part = grid(2, 2, image_shape=(3, 32, 32))
    ext = vgg16_bn_split(num_classes=10, cut=cut, padding_mode=padding, width=W)[0].eval()
    x = torch.randn(6, 3, 32, 32)
    flip = torch.tensor([True, False, True, True, False, True])
    with torch.no_grad():
        protocol = A.stitch(part, [ext(A.flip_images(t, flip)) for t in part.split(x)], flip)
        reference = part.assemble([ext(t) for t in part.split(A.flip_images(x, flip))])
        unswapped = part.assemble([ext(A.flip_images(t, flip)) for t in part.split(x)])
    torch.testing.assert_close(protocol, reference, rtol=0, atol=0)
    assert not torch.allclose(unswapped[flip], reference[flip])  # the swap is what makes it exact
    torch.testing.assert_close(protocol[~flip], unswapped[~flip], rtol=0, atol=0)


def test_the_protocol_round_applies_the_flip_identity(cifar):
    """Inside a run: with the transferred extractor unchanged (finetune="none") every party
    holds W_e^1, so one stage-3 round of flipped tiles gives the maps of the flipped images."""
    cfg = tiny(finetune="none")
    run = T._Run(cfg, device=torch.device("cpu"), data=cifar, channel=Channel(),
                 checkpoint_dir=None, pretrain_dir=None)
    run.transfer(lambda *_: False)
    n = 64
    flip = torch.arange(n) % 3 == 0
    zero = torch.zeros(n, dtype=torch.long)
    ids = torch.arange(0, 24)
    got = run._feature_maps("train", ids, (flip, zero, zero))
    ext = run.server.models["extractor"].eval()
    with torch.no_grad():
        images = A.flip_images(cifar.x_train[ids], flip[ids])
        want = run.part.assemble([ext(cifar.normalize(t)) for t in run.part.split(images)])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert run.channel.pending() == 0


def test_augment_tiles_with_a_flip_and_no_shift_is_the_flip():
    x = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
    flip = torch.tensor([True, False, True, False])
    zero = torch.zeros(4, dtype=torch.long)
    assert torch.equal(A.augment_tiles(x, flip, zero, zero), A.flip_images(x, flip))


@pytest.mark.parametrize("fill,mode", [("zeros", "constant"), ("replicate", "replicate")])
def test_shift_is_a_random_crop_of_the_padded_image(fill, mode):
    """shift by (dy, dx) = pad by p and crop at (p - dy, p - dx), as torchvision's RandomCrop."""
    p = 2
    x = torch.randn(5, 3, 16, 16)
    dy, dx = torch.tensor([-2, -1, 0, 1, 2]), torch.tensor([2, 0, -1, -2, 1])
    padded = F.pad(x, (p, p, p, p), mode=mode)
    expected = torch.stack([padded[b, :, p - dy[b]:p - dy[b] + 16, p - dx[b]:p - dx[b] + 16]
                            for b in range(5)])
    torch.testing.assert_close(A.shift_images(x, dy, dx, fill=fill), expected, rtol=0, atol=0)


def test_augmentation_params_are_a_public_function_of_the_key():
    a = A.augmentation_params(100, 2, 0, "classifier-aug", 3)
    b = A.augmentation_params(100, 2, 0, "classifier-aug", 3)
    c = A.augmentation_params(100, 2, 0, "classifier-aug", 4)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert 30 < int(a[0].sum()) < 70 and a[1].abs().max() == 2


# --------------------------------------------------------------------------- messages


def test_only_feature_maps_and_the_transferred_extractor_cross_the_channel(cifar, monkeypatch):
    received: list[tuple[str, str, str, object]] = []
    recv = Channel.recv

    def spy(self, receiver, sender, kind):
        payload = recv(self, receiver, sender, kind)
        received.append((receiver, sender, kind, payload))
        return payload

    monkeypatch.setattr(Channel, "recv", spy)
    channel = Channel()
    cfg = tiny(classifier_epochs=1)
    out = T.train(cfg, device="cpu", data=cifar, channel=channel)
    df = channel.ledger.frame(phase=None)
    assert set(df["kind"]) == {"model_weights", "feature_map"}
    clients = {"client_2", "client_3", "client_4"}
    mw = df[df["kind"] == "model_weights"]
    assert len(mw) == 3 and set(mw["sender"]) == {"server"} and set(mw["receiver"]) == clients
    assert set(mw["phase"]) == {"setup"}
    fm = df[df["kind"] == "feature_map"]
    assert set(fm["sender"]) == clients and set(fm["receiver"]) == {"server"}
    assert set(fm["phase"]) == {"train", "eval"}
    # What the server receives are 4x8x8 maps (width 1/16, "2C+1M") of batches, nothing else.
    ext_keys = set(vgg16_bn_split(num_classes=10, width=W)[0].state_dict())
    for receiver, sender, kind, payload in received:
        if kind == "feature_map":
            assert receiver == "server" and payload.dtype == torch.float32
            assert payload.shape[1:] == (4, 8, 8) and 1 <= payload.shape[0] <= 16
        else:
            assert receiver in clients and sender == "server" and set(payload) == ext_keys
    n_maps = sum(k == "feature_map" for _, _, k, _ in received)
    assert n_maps == 3 * (64 // 16 + 32 // 16)  # 4 training batches + 2 test batches, per client
    assert out["costs"]["per_client"]["client_2"]["samples_uploaded_train"] == 64
    assert channel.pending() == 0


def test_no_model_transfer_sends_no_weights(cifar):
    channel = Channel()
    T.train(tiny(model_transfer=False, classifier_epochs=1), device="cpu", data=cifar, channel=channel)
    assert set(channel.ledger.frame(phase=None)["kind"]) == {"feature_map"}


# --------------------------------------------------------------------------- resume


def _state(ckpt_dir):
    (path,) = [p for p in ckpt_dir.glob("adptvfedconv-*.pt")
               if "pretrain" not in p.name and not p.name.endswith(".maps.pt")]
    return torch.load(path, weights_only=False)


@pytest.mark.parametrize("stop", [("pretrain", 1), ("finetune", 1), ("classifier", 1)])
def test_resume_mid_stage_gives_the_uninterrupted_result(cifar, tmp_path, stop):
    cfg = tiny()
    whole_channel = Channel()
    whole = T.train(cfg, device="cpu", data=cifar, channel=whole_channel,
                    checkpoint_dir=tmp_path / "whole")
    first = T.train(cfg, device="cpu", data=cifar, checkpoint_dir=tmp_path / "cut", stop_after=stop)
    assert not first["complete"] and first["progress"][stop[0]] == stop[1]
    channel = Channel()
    resumed = T.train(cfg, device="cpu", data=cifar, channel=channel, checkpoint_dir=tmp_path / "cut")
    assert whole["complete"] and resumed["complete"]
    assert resumed["history"] == whole["history"]
    assert resumed["costs"] == whole["costs"]
    assert channel.ledger._rows == whole_channel.ledger._rows
    a, b = _state(tmp_path / "whole"), _state(tmp_path / "cut")
    for party, models in a["models"].items():
        for name, sd in models.items():
            for k, v in sd.items():
                assert torch.equal(v, b["models"][party][name][k]), (party, name, k)
    # A finished run's checkpoint returns its result without training again.
    again = T.train(cfg, device="cpu", data=cifar, checkpoint_dir=tmp_path / "cut")
    assert again["history"] == whole["history"] and again["complete"]


def test_a_checkpoint_from_other_code_or_another_machine_restarts_the_run(cifar, tmp_path, monkeypatch):
    """Stopped after stage 1's first epoch, then resumed by 'other code': the run's checkpoint
    and the shared pre-training are moved aside and the run starts again from stage 1, epoch 1
    (a record names one environment)."""
    cfg = tiny()
    first = T.train(cfg, device="cpu", data=cifar, checkpoint_dir=tmp_path, stop_after=("pretrain", 1))
    assert not first["complete"]
    here = checkpoint.computed_by(torch.device("cpu"))
    monkeypatch.setattr(checkpoint, "computed_by", lambda device: {**here, "vflkit_source": "other"})
    with pytest.warns(UserWarning, match="computed with another vflkit_source"):
        T.train(cfg, device="cpu", data=cifar, checkpoint_dir=tmp_path,
                stop_after=("pretrain", 1))
    assert sorted(p.name.split("-")[0] for p in tmp_path.glob("*.bad")) == ["adptvfedconv"] * 2
    state = _state(tmp_path)
    assert state["computed_by"]["vflkit_source"] == "other" and state["progress"]["pretrain"] == 1


def test_a_shared_pretraining_serves_another_cut_unchanged(cifar, tmp_path):
    """Non-cooperation's stage 1 is reused by a full run with the same stage-1 fields; the run
    equals one that pre-trains itself (every epoch reseeds from (seed, stage, epoch))."""
    cfg = tiny(cut="1C", classifier_epochs=1)
    nonco = T.train_noncooperation(cfg, device="cpu", data=cifar, checkpoint_dir=tmp_path)
    assert nonco["complete"] and len(nonco["curve"]) == 2
    assert nonco["final_accuracy"] == nonco["curve"][-1]
    shared = T.train(cfg, device="cpu", data=cifar, pretrain_dir=tmp_path)
    own = T.train(cfg, device="cpu", data=cifar)
    assert shared["history"]["pretrain"]["test_accuracy"] == nonco["curve"]
    assert shared["history"] == own["history"]


# --------------------------------------------------------------------------- costs


def test_cost_accounting_of_a_tiny_model_by_hand(cifar):
    out = T.train(tiny(classifier_epochs=1), device="cpu", data=cifar)
    c = out["costs"]
    # width 1/16: conv1 3->4, conv2 4->4 on a 3x16x16 tile, then a 2x2 max-pool -> 4x8x8.
    assert c["feature_map_shape"] == [4, 8, 8] and c["stitched_map_shape"] == [4, 16, 16]
    assert c["extractor_macs_per_tile"] == 16 * 16 * 4 * 3 * 9 + 16 * 16 * 4 * 4 * 9  # 64512
    assert c["extractor_params"] == (3 * 4 * 9 + 4) + 2 * 4 + (4 * 4 * 9 + 4) + 2 * 4  # 276
    # transfer: 276 params + 2 BN x (running mean + var) of 4 floats, float32, + 2 int64 counters
    assert c["model_transfer_bytes"] == (276 + 2 * 2 * 4) * 4 + 2 * 8 == 1184
    assert c["model_transfer_bytes_per_client"] == 1184
    assert c["feature_map_bytes_per_sample"] == 4 * 8 * 8 * 4 == 1024
    assert c["upload_bytes_per_sample_per_client"] == 1024  # from the ledger
    assert c["raw_tile_bytes_per_sample"] == 3 * 16 * 16 == 768
    assert c["raw_tiles_bytes_per_client"] == 64 * 768
    for v in c["per_client"].values():
        assert v["upload_bytes_train"] == 64 * 1024 and v["upload_bytes_eval"] == 32 * 1024
    assert c["client_train_bytes_total"] == 1184 + 64 * 1024
    central = vgg16_bn_centralized(num_classes=10, width=W)
    assert c["fl_bytes_per_round_per_client"]["upload"] == sum(
        t.numel() * t.element_size() for t in central.state_dict().values())
    assert c["centralized_params"] == sum(p.numel() for p in central.parameters())


def test_paper_scale_costs_from_the_architecture():
    """Width 1 (the paper's VGG-16-BN), numbers computed by hand (spec Sec. 3.2)."""
    c = A.cost_model(A.AdptVFedConvConfig())
    assert c["paper_model"] and c["feature_map_shape"] == [64, 8, 8]
    assert c["extractor_macs_per_tile"] == 16 * 16 * 64 * 27 + 16 * 16 * 64 * 576 == 9_879_552
    assert c["extractor_params"] == 1792 + 128 + 36928 + 128 == 38_976
    assert c["model_transfer_bytes"] == (38_976 + 256) * 4 + 16 == 156_944
    assert c["feature_map_bytes_per_sample"] == 16_384 and c["raw_tile_bytes_per_sample"] == 768
    convs = 313_196_544  # the 13 convs on 32x32
    fcs = 512 * 4096 + 4096 * 4096 + 4096 * 10
    assert c["centralized_macs_per_image"] == convs + fcs
    assert c["centralized_params"] == 14_714_688 + 8_448 + 18_923_530 == 33_646_666
    macs = {"1C": 442_368, "3C+1M": 14_598_144, "4C+1M": 24_035_328, "7C+3M": 47_628_288}
    for cut, expected in macs.items():
        assert A.cost_model(A.AdptVFedConvConfig(cut=cut))["extractor_macs_per_tile"] == expected


def test_count_macs_of_a_transposed_convolution():
    m = torch.nn.ConvTranspose2d(4, 3, 3, padding=1)
    assert A.count_macs(m, (4, 8, 8)) == 4 * 8 * 8 * 3 * 9


# --------------------------------------------------------------------------- variants


@pytest.mark.parametrize("options", [
    {"padding": "zeros"},
    {"model_transfer": False},
    {"finetune": "none"},
    {"finetune": "bn_stats"},
    {"extraction": "once"},
    {"cut": "4C+2M"},
    {"server_tile": 3},
    {"augment": False},
])
def test_each_variant_runs(cifar, tmp_path, options):
    channel = Channel()
    out = T.train(tiny(**options), device="cpu", data=cifar, channel=channel, checkpoint_dir=tmp_path)
    assert out["complete"] and len(out["history"]["classifier"]["test_accuracy"]) == 2
    assert 0 <= out["final_accuracy"] <= 1 and out["paper_model"] is False
    state = _state(tmp_path)["models"]
    server = state["server"]["extractor"]
    client = state["client_2"]["extractor"] if options.get("server_tile") != 3 else state["client_4"]["extractor"]
    if options.get("finetune") == "none":
        assert all(torch.equal(server[k], client[k]) for k in server)
    if options.get("finetune") == "bn_stats":
        assert torch.equal(server["0.weight"], client["0.weight"])  # weights frozen
        assert not torch.equal(server["1.running_mean"], client["1.running_mean"])  # stats moved
    if options.get("finetune") is None and options.get("model_transfer", True):
        assert not torch.equal(server["0.weight"], client["0.weight"])  # the AE fine-tuned it
    if options.get("extraction") == "once":
        fm = channel.ledger.frame(phase="train")
        assert set(fm["epoch"]) == {0}  # sent once, before stage 3's epochs
        assert out["costs"]["per_client"]["client_2"]["samples_uploaded_train"] == 64
    if options.get("cut") == "4C+2M":
        assert out["costs"]["feature_map_shape"] == [8, 4, 4]


def test_centralized_baseline_runs_and_resumes(cifar, tmp_path):
    cfg = tiny()
    whole = T.train_centralized(cfg, device="cpu", data=cifar)
    part = T.train_centralized(cfg, device="cpu", data=cifar, checkpoint_dir=tmp_path, stop_after=1)
    assert not part["complete"] and len(part["curve"]) == 1
    rest = T.train_centralized(cfg, device="cpu", data=cifar, checkpoint_dir=tmp_path)
    assert rest["complete"] and rest["curve"] == whole["curve"]
    assert rest["train_loss"] == whole["train_loss"]
    assert whole["params"] == sum(p.numel() for p in vgg16_bn_centralized(num_classes=10, width=W).parameters())


# --------------------------------------------------------------------------- config and width


@pytest.mark.parametrize("bad", [{"padding": "reflect"}, {"finetune": "ae"}, {"extraction": "twice"},
                                 {"width": 0}, {"batch_size": 1}, {"server_tile": 4},
                                 {"pretrain_epochs": -1}])
def test_bad_config_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        A.AdptVFedConvConfig(**bad)


def test_width_scales_every_layer_and_width_one_is_the_paper_model():
    ext, cls = vgg16_bn_split(num_classes=10, cut="2C+1M", width=0.125)
    assert ext(torch.zeros(2, 3, 16, 16)).shape == (2, 8, 8, 8)
    assert cls(torch.zeros(2, 8, 16, 16)).shape == (2, 10)
    assert A.AdptVFedConvConfig().paper_model and not tiny().paper_model
    assert dataclasses.asdict(tiny())["width"] == W


@pytest.mark.parametrize("diffs, status", [
    ([4.0, -0.5, 4.5], "not testable at this profile"),  # +2.67 ± 1.59: band ± 6.83 allows a loss > 1
    ([2.7, 2.6, 2.8, 2.7, 2.6], "agree"),  # 5 seeds, tight: the band rules out a 1-point loss
    ([-3.0, -3.2, -2.9], "disagree"),  # below b beyond the band
])
def test_no_loss_clause_reads_the_noise_band(monkeypatch, diffs: list[float], status: str) -> None:
    """"No negative impact": agree only when mean - t*s.e. > -1 point, disagree when mean + t*s.e. < 0."""
    frame = pd.DataFrame({"cell": "CIFAR-10", "seed": range(len(diffs)), "diff": diffs})
    monkeypatch.setattr(study, "_pairs", lambda *a, **k: frame)
    v = study._no_loss(claims.Records("quick", {}), ("a", "x"), ("b", "y"), "2C+1M - 2C")
    assert v.status == status, v.evidence
    assert "noise band" in v.evidence


#: CIFAR-10's training and test set sizes (the paper profile's n_train / n_test = None: all).
CIFAR10_SIZES = {"n_train": 50_000, "n_test": 10_000}


def test_quick_profile_is_the_paper_profile_reduced_by_one_factor():
    """quick divides the paper profile's images and epochs by one whole factor k (the
    autoencoder's epochs round up to one), gives Centralized the epochs of AdptVFedConv's two
    supervised stages together on the same images, and keeps every optimiser choice."""
    quick = study.PROFILE_SETTINGS["quick"]["run"]
    paper = A.AdptVFedConvConfig(**study.PROFILE_SETTINGS["paper"]["run"])
    k, rest = divmod(paper.pretrain_epochs, quick["pretrain_epochs"])
    assert rest == 0 and k > 1, "a whole reduction factor of the epochs"
    assert quick["classifier_epochs"] * k == paper.classifier_epochs
    for field, n in CIFAR10_SIZES.items():
        assert getattr(paper, field) is None and quick[field] == round(n / k), field
    assert quick["finetune_epochs"] == max(1, round(paper.finetune_epochs / k))
    assert quick["centralized_epochs"] == quick["pretrain_epochs"] + quick["classifier_epochs"]
    # the optimisers, learning rates, schedule and augmentation are the paper profile's
    kept = {f.name for f in dataclasses.fields(A.AdptVFedConvConfig)} - {
        "width", "n_train", "n_test", "pretrain_epochs", "finetune_epochs", "classifier_epochs",
        "centralized_epochs", "batch_size", "ae_batch_size", "eval_batch_size"}
    assert not kept & set(quick), f"quick changes {sorted(kept & set(quick))}"
    runs = study.all_runs(study.configs("quick"))
    central = [r.adpt for r in runs if r.variant == "centralized"]
    assert central and all(c.centralized_epochs == c.pretrain_epochs + c.classifier_epochs and
                           c.n_train == quick["n_train"] for c in central)


def test_communication_words_compare_with_raw_tiles_and_fl():
    """The per-client comparison is worded from communication()'s rows, per scale."""
    com = pd.DataFrame({"scale": ["this run"] * 4,
                        "what": ["AdptVFedConv, maps re-extracted every epoch (ours, default)",
                                 "AdptVFedConv, maps sent once (Algorithm 1)", "raw tiles, sent once",
                                 "parameter-sharing FL, one round"],
                        "x_raw_tiles": [10.7, 2.67, 1.0, 1.67]})
    words = study.communication_words(com)
    assert "2.67–10.7 times its raw tiles (more than its raw tiles" in words and "FL 1.67–1.67" in words
    assert study.communication_words(com.iloc[:0]) == "No run recorded yet."


def test_pending_lists_the_paper_runs_not_recorded_and_nothing_for_quick():
    """``STUDY.pending`` lists each unrecorded paper run with its H100 estimate (a shared
    pre-training counted once), trains nothing, and is empty for a profile whose runs are recorded."""
    todo = pricing.pending(study.STUDY, "paper")
    runs = study.all_runs(study.configs("paper"))
    recorded = {r["key"] for r in records.load_available(runs, profile="paper")}
    assert len(todo) == len([r for r in runs if r.key not in recorded]) > 0
    assert (todo["h100_min"] > 0).all() and set(todo["needs"]) == {"GPU"}
    assert pricing.pending(study.STUDY, "quick").empty


def test_communication_claim_says_what_the_ledger_shows_not_a_fixed_sentence(monkeypatch):
    """The "less communication" evidence compares the recorded run's ledger with the pricing at
    that run's scale, from the records: equal, different (by how much), or no run to check."""
    def com(ledger: float | None) -> pd.DataFrame:
        paper = [("paper scale (priced)", w, mib) for w, mib in (
            ("AdptVFedConv, maps re-extracted every epoch (ours, default)", 46875.0),
            ("AdptVFedConv, maps sent once (Algorithm 1)", 781.0), ("raw tiles, sent once", 37.0),
            ("parameter-sharing FL of the same VGG-16, one round per epoch", 15406.0))]
        run = [] if ledger is None else [
            ("this run (recorded)", "AdptVFedConv, maps re-extracted every epoch (ours, default)", 26.04),
            ("this run (recorded)", "AdptVFedConv, ledger (this client's training traffic)", ledger)]
        return pd.DataFrame(run + paper, columns=["scale", "what", "MiB"])

    clause = next(c for c in study.CLAIMS if "less" in c.clause.lower() or "communicat" in c.clause.lower())
    evidence = {}
    for name, ledger in (("same", 26.04), ("differs", 30.0), ("none", None)):
        monkeypatch.setattr(study, "communication", lambda recs, frame=com(ledger): frame)
        evidence[name] = clause.check(claims.Records("paper", {})).evidence
    assert "the recorded run's ledger gives the bytes priced at its scale (26.04 MiB)" in evidence["same"]
    assert "the recorded run's ledger gives 30.04 MiB" not in evidence["differs"]
    assert "ledger gives 30.00 MiB against 26.04 MiB priced at its scale (+15.2 %)" in evidence["differs"]
    assert "no run recorded at this profile to check the pricing against its ledger" in evidence["none"]
    assert all("the ledger gives the same bytes per map" not in e for e in evidence.values())
