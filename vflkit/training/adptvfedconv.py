"""AdptVFedConv's trainer: the three stages of :mod:`vflkit.methods.adptvfedconv` (which holds the
method: config, augmentation, stitching, cost model) run epoch by epoch, checkpointed, and resumed;
:mod:`vflkit.training.tiles` turns a :class:`~vflkit.training.tiles.TilesRun` into these calls.

Resume: :func:`train` writes a checkpoint after every epoch of every stage (models,
optimizers, schedulers, histories, ledger, stage and epoch) and continues from it. Every epoch
reseeds torch's generator from (seed, stage, epoch), so the stage and epoch fix all randomness
(dropout, shuffles, augmentation) and a resumed run equals an uninterrupted one (on CPU; CUDA
kernels may not be bitwise deterministic).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..comm import Channel, Party
from ..config import REGISTER_HOW, resolve_device
from ..data import ImageData, load_dataset
from ..errors import ConfigError
from ..files import move_aside
from ..methods.adptvfedconv import (_PRETRAIN_FIELDS, PRETRAIN_CUT, STAGES, AdptVFedConvConfig, _derive, _generator,
                                    augment_tiles, augmentation_params, cost_model, count_macs, count_params,
                                    flip_images, shift_images, stitch)
from ..methods.base import make_optimizer
from ..models import vgg16_bn_centralized, vgg16_bn_generator, vgg16_bn_split
from ..partition import grid
from . import checkpoint as checkpoint_io

__all__ = ["curve_summary", "train", "train_noncooperation", "train_centralized"]


#: The fields that decide the Centralized VGG-16's checkpoint.
_CENTRALIZED_FIELDS: tuple[str, ...] = (
    "dataset", "n_train", "n_test", "subset_seed", "seed", "width", "centralized_epochs",
    "batch_size", "lr", "weight_decay", "augment", "centralized_crop_pad", "eval_batch_size",
)


# --------------------------------------------------------------------------- batches


def _batches(n: int, batch_size: int, *key: Any) -> list[torch.Tensor]:
    """A shuffled pass over rows 0..n-1 in batches; a trailing batch of one is dropped
    (BatchNorm cannot train on a single sample)."""
    perm = torch.randperm(n, generator=_generator(*key))
    out = list(perm.split(batch_size))
    if len(out) > 1 and len(out[-1]) < 2:
        out.pop()
    return out


# --------------------------------------------------------------------------- checkpoint files


def _save_atomic(obj: Any, path: Path, device: torch.device) -> None:
    """Write ``obj`` to ``path`` whole or not at all; a dict also names what computed it
    (:func:`~vflkit.training.checkpoint.computed_by`), which :func:`_load_if_ours` checks."""
    if isinstance(obj, dict):
        obj = {"computed_by": checkpoint_io.computed_by(device), **obj}
    checkpoint_io.write(path, obj, what=f"the checkpoint {path.name}")


def _load_if_ours(path: Path, config_dict: dict[str, Any], fields: Sequence[str],
                  device: torch.device) -> dict | None:
    """The checkpoint at ``path`` if its config agrees on ``fields`` and the same code on the same
    kind of machine wrote it (a record names one environment); a foreign or unreadable one is
    moved aside with a warning (a bad checkpoint costs time, never a wrong result)."""
    if not path.exists():
        return None
    try:
        state = checkpoint_io.read(path)  # weights_only: a planted pickle is refused, never run
        theirs = state.get("config", {})
        if any(theirs.get(k) != config_dict[k] for k in fields):
            raise ValueError("its config is not this run's")
        checkpoint_io.check_computed_by(state, device)
        return state
    except Exception as exc:
        bad = move_aside(path, ".bad")
        warnings.warn(f"ignoring checkpoint {path} ({exc}); moved to {bad.name}", stacklevel=3)
        return None


def _step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> torch.Tensor:
    """One optimiser step on ``loss``; returns it detached, left on the device (no sync)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def _mean(losses: list[torch.Tensor]) -> float:
    """Mean of a stage's batch losses; kept on the device until the epoch ends (one sync)."""
    return float(torch.stack(losses).mean()) if losses else float("nan")


class _Stop(Exception):
    """Raised after a checkpoint when ``stop_after`` or ``max_seconds`` says to stop."""


# --------------------------------------------------------------------------- the run


def _load_data(config: AdptVFedConvConfig, data: ImageData | None) -> ImageData:
    d = data if data is not None else load_dataset(config.dataset)
    if not isinstance(d, ImageData):
        raise ConfigError(f"AdptVFedConv takes image data, but {config.dataset!r} is {type(d).__name__}; "
                          f"{REGISTER_HOW['image']}")
    if config.n_train is not None or config.n_test is not None:
        d = d.subset(n_train=config.n_train, n_test=config.n_test, seed=config.subset_seed)
    c, h, w = d.image_shape
    if h % 2 or w % 2:
        raise ConfigError(f"a 2x2 grid needs even image sides, got {h}x{w}")
    return d


def _sgd(params: Any, config: AdptVFedConvConfig, epochs: int) -> tuple[torch.optim.Optimizer, Any]:
    """SGD, momentum 0.9 (make_optimizer's "sgd_momentum"), weight decay, cosine lr to 0."""
    opt = make_optimizer("sgd_momentum", params, config.lr)
    for group in opt.param_groups:  # make_optimizer has no weight decay; VGG needs some
        group["weight_decay"] = config.weight_decay
    return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs))


class _Run:
    """One AdptVFedConv run: parties, models, the three stages and their checkpoints."""

    def __init__(self, config: AdptVFedConvConfig, *, device: torch.device, data: ImageData,
                 channel: Channel, checkpoint_dir: Path | None, pretrain_dir: Path | None) -> None:
        self.cfg, self.device, self.data, self.channel = config, device, data, channel
        self.num_classes = data.num_classes
        self.part = grid(2, 2, image_shape=data.image_shape, active=config.server_tile)
        self.ckpt = (checkpoint_dir / f"adptvfedconv-{config.key()}.pt") if checkpoint_dir else None
        pdir = pretrain_dir or checkpoint_dir
        self.pretrain_file = (pdir / f"adptvfedconv-pretrain-{config.key(_PRETRAIN_FIELDS)}.pt"
                              if pdir else None)
        self.once_file = (checkpoint_dir / f"adptvfedconv-{config.key()}.maps.pt"
                          if checkpoint_dir else None)
        # Participants in partition order; the paper's numbering: server = 1, clients 2..K.
        tiles_tr, tiles_te = self.part.split(data.x_train), self.part.split(data.x_test)
        clients = iter(range(2, self.part.n_parties + 1))
        self.parties: list[Party] = []
        for k in range(self.part.n_parties):
            server = k == self.part.active
            labels = {"train": data.y_train.to(device), "test": data.y_test.to(device)} if server else None
            self.parties.append(Party(
                "server" if server else f"client_{next(clients)}", channel=channel, device=device, labels=labels,
                features={"train": tiles_tr[k].contiguous().to(device),
                          "test": tiles_te[k].contiguous().to(device)}))
        self.server = self.parties[self.part.active]
        self.clients = [p for p in self.parties if p is not self.server]
        self.tile = self.part.party_shape(self.part.active)
        self._build()
        self.progress = {s: 0 for s in STAGES}
        self.history: dict[str, Any] = {
            "pretrain": {"train_loss": [], "test_accuracy": []},
            "finetune": {c.name: {"recon_loss": []} for c in self.clients},
            "classifier": {"train_loss": [], "test_accuracy": []},
        }
        self.uploaded = {split: {c.name: 0 for c in self.clients} for split in ("train", "eval")}
        self.elapsed = 0.0
        self.once_maps: torch.Tensor | None = None

    def _seeded(self, *key: Any) -> None:
        torch.manual_seed(_derive(self.cfg.seed, *key))

    def _build(self) -> None:
        cfg, dev, nc = self.cfg, self.device, self.num_classes
        kw = dict(num_classes=nc, padding_mode=cfg.padding, width=cfg.width, in_channels=self.tile[0])
        # Each model's initialisation depends on (seed, its name) only, not on build order.
        self._seeded("init", "pretrain")
        ext, head = vgg16_bn_split(cut=PRETRAIN_CUT, **kw)
        self.server.models["pretrain"] = nn.Sequential(ext, head).to(dev)  # W_e^1 + W_clst
        self._seeded("init", "server_classifier")
        # W_s: a fresh classifier ("W_clst ... will be dropped"); zero padding (whole map).
        self.server.models["classifier"] = vgg16_bn_split(cut=cfg.cut, **kw)[1].to(dev)
        self.server.models["extractor"] = vgg16_bn_split(cut=cfg.cut, **kw)[0].to(dev)
        for c in self.clients:
            self._seeded("init", c.name, "extractor")
            c.models["extractor"] = vgg16_bn_split(cut=cfg.cut, **kw)[0].to(dev)
            self._seeded("init", c.name, "generator")
            c.models["generator"] = vgg16_bn_generator(cut=cfg.cut, width=cfg.width,
                                                       out_channels=self.tile[0]).to(dev)
        self.optim: dict[str, tuple[torch.optim.Optimizer, Any]] = {
            "pretrain": _sgd(self.server.models["pretrain"].parameters(), cfg, cfg.pretrain_epochs),
            "classifier": _sgd(self.server.models["classifier"].parameters(), cfg,
                               cfg.classifier_epochs),
        }
        ext_lr = cfg.ae_lr_extractor if cfg.model_transfer else cfg.ae_lr_extractor_scratch
        for c in self.clients:
            opt = make_optimizer("adam", [
                {"params": list(c.models["extractor"].parameters()), "lr": ext_lr},
                {"params": list(c.models["generator"].parameters()), "lr": cfg.ae_lr_generator},
            ], cfg.ae_lr_generator)
            self.optim[c.name] = (opt, torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=max(1, cfg.finetune_epochs)))

    def _state(self) -> dict[str, Any]:
        # Once W_e^1 has been copied out, the pre-training network and its optimizer are no
        # longer needed (the pre-training file keeps the network): left out, about halving a
        # checkpoint written every stage-3 epoch.
        done = bool(self.progress["transfer"])
        return {
            "config": self.cfg.to_dict(), "progress": dict(self.progress), "history": self.history,
            "uploaded": self.uploaded, "elapsed_s": self.elapsed,
            "models": {p.name: {k: m.state_dict() for k, m in p.models.items()
                                if not (done and k == "pretrain")} for p in self.parties},
            "optim": {k: (o.state_dict(), s.state_dict()) for k, (o, s) in self.optim.items()
                      if not (done and k == "pretrain")},
            "ledger": list(self.channel.ledger._rows),
        }

    def _restore(self, state: dict[str, Any]) -> None:
        for p in self.parties:
            for k, sd in state["models"][p.name].items():
                p.models[k].load_state_dict(sd)
        for k, (o, s) in state["optim"].items():
            self.optim[k][0].load_state_dict(o)
            self.optim[k][1].load_state_dict(s)
        self.progress = dict(state["progress"])
        self.history = state["history"]
        self.uploaded = state["uploaded"]
        self.elapsed = state["elapsed_s"]
        self.channel.ledger.restore(state["ledger"])

    def resume(self) -> None:
        """Continue from this run's checkpoint, else from a shared pre-training, else start."""
        if self.ckpt is not None:
            state = _load_if_ours(self.ckpt, self.cfg.to_dict(), sorted(self.cfg.to_dict()), self.device)
            if state is not None:
                self._restore(state)
                if self.progress["classifier"] and self.cfg.extraction == "once":
                    self.once_maps = torch.load(self.once_file, map_location=self.device, weights_only=True)
                return
        if self.pretrain_file is not None:
            state = _load_if_ours(self.pretrain_file, self.cfg.to_dict(), _PRETRAIN_FIELDS, self.device)
            if state is not None and state["complete"]:
                self.server.models["pretrain"].load_state_dict(state["model"])
                self.history["pretrain"] = state["history"]
                self.progress["pretrain"] = self.cfg.pretrain_epochs

    def checkpoint(self, stage: str, epoch: int, start: float, stop: Callable[[str, int], bool]) -> None:
        """Record progress, write the checkpoint, and stop if asked to."""
        self.progress[stage] = epoch
        now = time.perf_counter()
        self.elapsed += now - start
        if self.ckpt is not None:
            _save_atomic(self._state(), self.ckpt, self.device)
        if stage == "pretrain" and self.pretrain_file is not None:
            _save_atomic({"config": self.cfg.to_dict(), "history": self.history["pretrain"],
                          "model": self.server.models["pretrain"].state_dict(),
                          "complete": epoch == self.cfg.pretrain_epochs}, self.pretrain_file, self.device)
        if stop(stage, epoch):
            raise _Stop

    def _tiles(self, party: Party, split: str, ids: torch.Tensor,
               aug: tuple[torch.Tensor, ...] | None) -> torch.Tensor:
        """A party's normalised tiles for ``ids``, augmented with ``aug`` = (flip, dy, dx) rows:
        drawn from the party's own key in stage 1 and the autoencoder (no message), from the public
        key in stage 3, one family everywhere so each extractor trains on the tiles it later sees."""
        x = party.features(split, ids=ids)
        if aug is not None:
            x = augment_tiles(x, *(a[ids] for a in aug), fill="replicate")
        return self.data.normalize(x)

    def _local_aug(self, n: int, *key: Any) -> tuple[torch.Tensor, ...] | None:
        return augmentation_params(n, self.cfg.tile_shift, self.cfg.seed, *key) if self.cfg.augment else None

    def pretrain(self, stop: Callable[[str, int], bool]) -> None:
        """Eq. 1: the server trains VGG-16 on its own tile; test accuracy = Non-cooperation."""
        net = self.server.models["pretrain"]
        opt, sched = self.optim["pretrain"]
        n = self.server.n_samples("train")
        for epoch in range(self.progress["pretrain"] + 1, self.cfg.pretrain_epochs + 1):
            start = time.perf_counter()
            self._seeded("pretrain", epoch)
            aug = self._local_aug(n, "pretrain-aug", epoch)
            net.train()
            losses = []
            for ids in _batches(n, self.cfg.batch_size, self.cfg.seed, "pretrain", epoch):
                x = self._tiles(self.server, "train", ids, aug)
                loss = F.cross_entropy(net(x), self.server.labels("train", ids=ids))
                losses.append(_step(opt, loss))
            sched.step()
            self.history["pretrain"]["train_loss"].append(_mean(losses))
            self.history["pretrain"]["test_accuracy"].append(self._eval_pretrain())
            self.checkpoint("pretrain", epoch, start, stop)

    @torch.no_grad()
    def _eval_pretrain(self) -> float:
        net = self.server.models["pretrain"].eval()
        n = self.server.n_samples("test")
        correct = 0
        for ids in torch.arange(n).split(self.cfg.eval_batch_size):
            logits = net(self._tiles(self.server, "test", ids, None))
            correct += int((logits.argmax(1) == self.server.labels("test", ids=ids)).sum())
        net.train()
        return correct / n

    def transfer(self, stop: Callable[[str, int], bool]) -> None:
        """Eq. 2: W_e^k <- W_e^1, sent through the channel (setup phase)."""
        if self.progress["transfer"]:
            return
        start = time.perf_counter()
        n_layers = len(self.server.models["extractor"])
        # The server's own W_e^1 is the leading layers of its pre-trained network.
        self.server.models["extractor"].load_state_dict(
            self.server.models["pretrain"][0][:n_layers].state_dict())
        if self.cfg.model_transfer:
            self.channel.at(epoch=0, step=0, phase="setup")
            weights = self.server.models["extractor"].state_dict()
            for c in self.clients:
                self.server.send(c, "model_weights", dict(weights))
            for c in self.clients:
                c.models["extractor"].load_state_dict(c.recv(self.server, "model_weights"))
        # else: No model transfer; each client keeps its own random initialisation.
        self.checkpoint("transfer", 1, start, stop)

    def finetune(self, stop: Callable[[str, int], bool]) -> None:
        """Eq. 3: each client adapts its extractor to its tiles (local; no message)."""
        cfg = self.cfg
        if cfg.finetune == "none":
            return
        for epoch in range(self.progress["finetune"] + 1, cfg.finetune_epochs + 1):
            start = time.perf_counter()
            for c in self.clients:
                self._seeded("finetune", c.name, epoch)
                n = c.n_samples("train")
                aug = self._local_aug(n, "finetune-aug", c.name, epoch)
                ext, gen = c.models["extractor"], c.models["generator"]
                opt, sched = self.optim[c.name]
                ext.train()
                gen.train()
                losses = []
                for ids in _batches(n, cfg.ae_batch_size, cfg.seed, "finetune", c.name, epoch):
                    x = self._tiles(c, "train", ids, aug)
                    if cfg.finetune == "bn_stats":
                        # Weights frozen; a train-mode pass moves BatchNorm's running statistics
                        # to this client's tiles (what the tiny extractor lr mostly changes).
                        with torch.no_grad():
                            ext(x)
                        continue
                    loss = F.mse_loss(gen(ext(x)), x)
                    losses.append(_step(opt, loss))
                if cfg.finetune == "autoencoder":
                    sched.step()
                    self.history["finetune"][c.name]["recon_loss"].append(
                        _mean(losses))
                ext.eval()
            self.checkpoint("finetune", epoch, start, stop)

    @torch.no_grad()
    def _feature_maps(self, split: str, ids: torch.Tensor,
                      aug: tuple[torch.Tensor, ...] | None) -> torch.Tensor:
        """One round of Eq. 4: clients send their maps of ``ids``; the server stitches them."""
        own = None
        for p in self.parties:
            ext = p.models["extractor"].eval()  # frozen after stage 2 (Algorithm 1)
            h = ext(self._tiles(p, split, ids, aug))
            if p is self.server:
                own = h
            else:
                p.send(self.server, "feature_map", h)
                self.uploaded["eval" if self.channel.phase == "eval" else "train"][p.name] += len(ids)
        maps = [own if p is self.server else self.server.recv(p, "feature_map") for p in self.parties]
        return stitch(self.part, maps, None if aug is None else aug[0][ids])

    def _extract_once(self) -> None:
        """Algorithm 1 line 22 literally: maps of the un-augmented training tiles, sent once."""
        if self.once_maps is not None:
            return
        n = self.server.n_samples("train")
        chunks = []
        for step, ids in enumerate(torch.arange(n).split(self.cfg.eval_batch_size)):
            self.channel.at(epoch=0, step=step, phase="train")
            chunks.append(self._feature_maps("train", ids, None))
        self.once_maps = torch.cat(chunks)
        if self.once_file is not None:
            # The server keeps what it received on its own disk, so a resumed run does not
            # ask the clients again.
            _save_atomic(self.once_maps, self.once_file, self.device)

    def classifier(self, stop: Callable[[str, int], bool]) -> None:
        """Eq. 5: the server trains W_s on the stitched maps."""
        cfg = self.cfg
        net = self.server.models["classifier"]
        opt, sched = self.optim["classifier"]
        n = self.server.n_samples("train")
        if cfg.extraction == "once" and cfg.classifier_epochs:
            self._extract_once()
        for epoch in range(self.progress["classifier"] + 1, cfg.classifier_epochs + 1):
            start = time.perf_counter()
            self._seeded("classifier", epoch)
            # Public protocol parameter: every participant derives the same transforms.
            aug = (augmentation_params(n, cfg.tile_shift, cfg.seed, "classifier-aug", epoch)
                   if cfg.augment and cfg.extraction == "per_epoch" else None)
            losses = []
            for step, ids in enumerate(_batches(n, cfg.batch_size, cfg.seed, "classifier", epoch)):
                if cfg.extraction == "once":
                    h = self.once_maps[ids.to(self.once_maps.device)]
                else:
                    self.channel.at(epoch=epoch, step=step, phase="train")
                    h = self._feature_maps("train", ids, aug)
                net.train()
                loss = F.cross_entropy(net(h), self.server.labels("train", ids=ids))
                losses.append(_step(opt, loss))
            sched.step()
            self.history["classifier"]["train_loss"].append(_mean(losses))
            self.history["classifier"]["test_accuracy"].append(self._eval_classifier(epoch))
            self.checkpoint("classifier", epoch, start, stop)

    @torch.no_grad()
    def _eval_classifier(self, epoch: int) -> float:
        """Test accuracy through the same protocol on the test tiles (phase "eval")."""
        net = self.server.models["classifier"].eval()
        n = self.server.n_samples("test")
        correct = 0
        for step, ids in enumerate(torch.arange(n).split(self.cfg.eval_batch_size)):
            self.channel.at(epoch=epoch, step=step, phase="eval")
            logits = net(self._feature_maps("test", ids, None))
            correct += int((logits.argmax(1) == self.server.labels("test", ids=ids)).sum())
        self.channel.at(phase="train")
        net.train()
        return correct / n

    def result(self, complete: bool) -> dict[str, Any]:
        """Curves, final/best accuracy and the cost accounting (JSON-able)."""
        cfg = self.cfg
        n_train = self.server.n_samples("train")
        arch = cost_model(cfg, num_classes=self.num_classes, image_shape=self.data.image_shape,
                          n_train=n_train)
        ledger = self.channel.ledger.frame(phase=None)
        per_client: dict[str, Any] = {}
        for c in self.clients:
            sent = ledger[(ledger["sender"] == c.name) & (ledger["kind"] == "feature_map")]
            got = ledger[(ledger["receiver"] == c.name) & (ledger["kind"] == "model_weights")]
            train_b = int(sent[sent["phase"] == "train"]["nbytes"].sum())
            eval_b = int(sent[sent["phase"] == "eval"]["nbytes"].sum())
            n_up = self.uploaded["train"][c.name]
            per_client[c.name] = {
                "model_transfer_bytes": int(got["nbytes"].sum()),
                "upload_bytes_train": train_b,
                "upload_bytes_eval": eval_b,
                "samples_uploaded_train": n_up,
                "upload_bytes_per_sample": train_b / n_up if n_up else None,
            }
        per_sample = [v["upload_bytes_per_sample"] for v in per_client.values()
                      if v["upload_bytes_per_sample"] is not None]
        fl_up = arch["fl_bytes_per_round_per_client"]["upload"]
        client_total = [v["model_transfer_bytes"] + v["upload_bytes_train"] for v in per_client.values()]
        costs = {
            **arch,
            "per_client": per_client,
            # From the ledger: bytes a client uploads per training sample it extracts.
            "upload_bytes_per_sample_per_client": per_sample[0] if per_sample else None,
            "model_transfer_bytes_per_client": per_client[self.clients[0].name]["model_transfer_bytes"],
            "client_train_bytes_total": max(client_total) if client_total else 0,
            # Whole-run client traffic (transfer + train uploads) in rounds of parameter-sharing
            # FL of the same VGG-16 (upload only), and against sending the raw tiles once.
            "client_train_bytes_in_fl_rounds": (max(client_total) / fl_up) if client_total else 0.0,
            "client_train_bytes_over_raw_tiles": (max(client_total) / arch["raw_tiles_bytes_per_client"]
                                                  if client_total else 0.0),
            "ledger_per_kind": {k: {"bytes": int(r["bytes"]), "messages": int(r["messages"])}
                                for k, r in self.channel.ledger.per_kind(phase=None).iterrows()},
        }
        return {
            "method": "adptvfedconv", "config": cfg.to_dict(), "paper_model": cfg.paper_model,
            "complete": complete, "progress": dict(self.progress), "device": str(self.device),
            "n_train": n_train, "n_test": self.server.n_samples("test"),
            **curve_summary(self.history["classifier"]["test_accuracy"]),
            "noncooperation": curve_summary(self.history["pretrain"]["test_accuracy"]),
            "history": self.history,
            "costs": costs,
            "elapsed_s": self.elapsed,
        }


def curve_summary(curve: list[float]) -> dict[str, Any]:
    """The last and the best accuracy of a curve, and the best's epoch (from 1; the first best)."""
    if not curve:
        return {"final_accuracy": None, "best_accuracy": None, "best_epoch": None}
    best = max(range(len(curve)), key=lambda i: curve[i])
    return {"final_accuracy": curve[-1], "best_accuracy": curve[best], "best_epoch": best + 1}


def _stopper(stop_after: tuple[str, int] | None, max_seconds: float | None,
             deadline: float | None = None) -> Callable[[str, int], bool]:
    """When to stop after a checkpoint: at ``stop_after``, past ``max_seconds``, or when the next
    epoch, taken to last as long as the one just checkpointed, would end after ``deadline``
    (a ``time.time()`` value: the scheduler's budget)."""
    begun = time.perf_counter()
    last = [begun]

    def stop(stage: str, epoch: int) -> bool:
        now = time.perf_counter()
        epoch_s, last[0] = now - last[0], now
        if stop_after is not None and (stage, epoch) == tuple(stop_after):
            return True
        if deadline is not None and time.time() + epoch_s > deadline:
            return True
        return max_seconds is not None and now - begun >= max_seconds

    return stop


def train(config: AdptVFedConvConfig, *, device: str | torch.device = "auto",
          checkpoint_dir: str | Path | None = None, data: ImageData | None = None,
          channel: Channel | None = None, pretrain_dir: str | Path | None = None,
          stages: Sequence[str] = STAGES, stop_after: tuple[str, int] | None = None,
          max_seconds: float | None = None, deadline: float | None = None) -> dict[str, Any]:
    """Run AdptVFedConv's three stages; resume from ``checkpoint_dir`` if it holds this run.

    Parameters
    ----------
    device
        "auto" (CUDA if available), "cpu", "cuda[:N]".
    checkpoint_dir
        Where the per-epoch checkpoint (and, for ``extraction="once"``, the server's received
        maps) live; None: no checkpoints. A completed run's checkpoint returns its result
        without training.
    data, channel
        Instead of ``load_dataset(config.dataset)`` and a new :class:`~vflkit.comm.Channel`.
    pretrain_dir
        Where stage 1's network is kept and looked for (default ``checkpoint_dir``): runs that
        agree on stage 1's fields (e.g. every cut of Table 3) share one pre-training.
    stages
        The stages to run (default all); ``("pretrain",)`` is Non-cooperation.
    stop_after
        ``(stage, epoch)``: return after that epoch's checkpoint (``complete=False``).
    max_seconds
        Return after the first checkpoint past this many seconds (time-limited GPU jobs).
    deadline
        A ``time.time()`` value (:func:`_stopper`).

    Returns
    -------
    dict
        ``history`` (per-epoch ``pretrain`` train loss and test accuracy = Non-cooperation,
        ``finetune`` reconstruction loss per client, ``classifier`` train loss and test
        accuracy), ``final_accuracy``/``best_accuracy``/``best_epoch`` of stage 3,
        ``noncooperation`` (the same for stage 1), ``costs`` (see :func:`cost_model`, plus the
        ledger's per-client bytes), ``complete``, ``progress``, ``config``, ``paper_model``.
    """
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ConfigError(f"unknown stages {unknown}; choose from {', '.join(STAGES)}")
    dev = resolve_device(device)
    run = _Run(config, device=dev, data=_load_data(config, data), channel=channel or Channel(),
               checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
               pretrain_dir=Path(pretrain_dir) if pretrain_dir else None)
    run.resume()
    stop = _stopper(stop_after, max_seconds, deadline)
    try:
        for stage in STAGES:
            if stage in stages:
                getattr(run, stage)(stop)
    except _Stop:
        return run.result(complete=False)
    done = (config.pretrain_epochs == run.progress["pretrain"]
            and ("transfer" not in stages or run.progress["transfer"] == 1)
            and ("classifier" not in stages or run.progress["classifier"] == config.classifier_epochs))
    return run.result(complete=done)


def train_noncooperation(config: AdptVFedConvConfig, **kwargs: Any) -> dict[str, Any]:
    """Non-cooperation (Table 2): the server's stage 1 alone, VGG-16 on its own tile. Arguments
    as :func:`train`, whose runs with the same stage-1 fields reuse its pre-training file.
    Returns ``curve`` (test accuracy per epoch) and its summary."""
    out = train(config, stages=("pretrain",), **kwargs)
    return {"method": "noncooperation", "config": config.to_dict(), "paper_model": config.paper_model,
            "complete": out["complete"], "curve": out["history"]["pretrain"]["test_accuracy"],
            "train_loss": out["history"]["pretrain"]["train_loss"], **out["noncooperation"],
            "elapsed_s": out["elapsed_s"]}


# --------------------------------------------------------------------------- centralized


def train_centralized(config: AdptVFedConvConfig, *, device: str | torch.device = "auto",
                      checkpoint_dir: str | Path | None = None, data: ImageData | None = None,
                      stop_after: int | None = None, max_seconds: float | None = None,
                      deadline: float | None = None) -> dict[str, Any]:
    """Centralized VGG-16 (Table 2's upper bound): one party, whole 32x32 images, zero padding,
    standard augmentation (RandomCrop(32, pad ``centralized_crop_pad``) + flip), SGD as stage 1
    for ``centralized_epochs``. Checkpointed per epoch like :func:`train`; ``stop_after`` is an
    epoch."""
    cfg = config
    dev = resolve_device(device)
    d = _load_data(cfg, data)
    torch.manual_seed(_derive(cfg.seed, "init", "centralized"))
    net = vgg16_bn_centralized(num_classes=d.num_classes, width=cfg.width,
                               in_channels=d.image_shape[0]).to(dev)
    opt, sched = _sgd(net.parameters(), cfg, cfg.centralized_epochs)
    x_tr, y_tr = d.x_train.to(dev), d.y_train.to(dev)
    x_te, y_te = d.x_test.to(dev), d.y_test.to(dev)
    ckpt = (Path(checkpoint_dir) / f"centralized-{cfg.key(_CENTRALIZED_FIELDS)}.pt"
            if checkpoint_dir else None)
    hist: dict[str, list[float]] = {"train_loss": [], "test_accuracy": []}
    first, elapsed = 1, 0.0
    if ckpt is not None:
        state = _load_if_ours(ckpt, cfg.to_dict(), _CENTRALIZED_FIELDS, dev)
        if state is not None:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            sched.load_state_dict(state["sched"])
            hist, first, elapsed = state["history"], state["epoch"] + 1, state["elapsed_s"]
    stop = _stopper(None if stop_after is None else ("centralized", stop_after), max_seconds, deadline)
    n = len(y_tr)
    complete = True
    for epoch in range(first, cfg.centralized_epochs + 1):
        start = time.perf_counter()
        torch.manual_seed(_derive(cfg.seed, "centralized", epoch))
        flip, dy, dx = augmentation_params(n, cfg.centralized_crop_pad, cfg.seed, "centralized-aug", epoch)
        net.train()
        losses = []
        for ids in _batches(n, cfg.batch_size, cfg.seed, "centralized", epoch):
            x = x_tr[ids.to(dev)]
            if cfg.augment:
                x = flip_images(shift_images(x, dy[ids], dx[ids], fill="zeros"), flip[ids])
            loss = F.cross_entropy(net(d.normalize(x)), y_tr[ids.to(dev)])
            losses.append(_step(opt, loss))
        sched.step()
        net.eval()
        with torch.no_grad():
            correct = sum(int((net(d.normalize(x_te[i])).argmax(1) == y_te[i]).sum())
                          for i in torch.arange(len(y_te), device=dev).split(cfg.eval_batch_size))
        hist["train_loss"].append(_mean(losses))
        hist["test_accuracy"].append(correct / len(y_te))
        elapsed += time.perf_counter() - start
        if ckpt is not None:
            _save_atomic({"config": cfg.to_dict(), "model": net.state_dict(), "optim": opt.state_dict(),
                          "sched": sched.state_dict(), "history": hist, "epoch": epoch,
                          "elapsed_s": elapsed}, ckpt, dev)
        if stop("centralized", epoch):
            complete = epoch == cfg.centralized_epochs
            break
    curve = hist["test_accuracy"]
    return {
        "method": "centralized_vgg16", "config": cfg.to_dict(), "paper_model": cfg.paper_model,
        "complete": complete and len(curve) == cfg.centralized_epochs, "device": str(dev),
        "curve": curve, "train_loss": hist["train_loss"], **curve_summary(curve),
        "n_train": n, "n_test": len(y_te),
        "params": count_params(net), "macs_per_image": count_macs(net, d.image_shape),
        "elapsed_s": elapsed,
    }
