"""Tests for vflkit.gpu: the missing-CUDA error names the driver the wheel needs, MPS is started
for several CUDA workers where it can be (and stopped), or the reason is said, and cached
memory is released only on CUDA."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from vflkit import gpu
from vflkit.config import resolve_device
from vflkit.errors import ConfigError


def _fake_control(folder: Path, *, rc: int = 0) -> Path:
    """An ``nvidia-cuda-mps-control`` that logs its arguments and stdin to a file beside it."""
    exe = folder / "nvidia-cuda-mps-control"
    log = folder / "calls.log"
    exe.write_text(f"#!/bin/sh\necho \"args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY\" >> {log}\n"
                   f"if [ \"$1\" != -d ]; then cat >> {log}; fi\nexit {rc}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return log


def test_missing_cuda_names_the_driver_and_what_to_do(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(gpu, "driver_version", lambda: "535.104")
    with pytest.raises(ConfigError) as err:
        resolve_device("cuda")
    msg = str(err.value)
    assert "CUDA 13.0" in msg and "R580" in msg and "535.104" in msg and "device='auto' or 'cpu'" in msg


def test_missing_cuda_on_a_cpu_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU build" in gpu.cuda_unavailable_message("cuda:0")


def test_no_mps_for_a_cpu_or_one_worker(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    log = _fake_control(tmp_path)
    for workers, device in ((8, "cpu"), (1, "cuda")):
        with gpu.shared_gpu(workers, device) as said:
            assert said == ""
    assert not log.exists()


def test_mps_started_for_the_workers_and_stopped(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.setattr(gpu.Path, "exists", lambda self: False if str(self) == "/tmp/nvidia-mps/control"
                        else os.path.exists(self))
    log = _fake_control(tmp_path)
    with gpu.shared_gpu(8, "cuda") as said:
        assert said.startswith("MPS started for 8 workers")
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]  # the workers started here find the daemon
        assert Path(pipe).is_dir()
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ and not Path(pipe).exists()
    calls = log.read_text()
    assert f"args=-d pipe={pipe}" in calls and "quit" in calls


def test_mps_not_started_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no control program
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.setattr(gpu.Path, "exists", lambda self: False)
    with gpu.shared_gpu(8, "cuda") as said:
        assert "MPS not started" in said and "time-slice" in said
    _fake_control(tmp_path, rc=1)
    with gpu.shared_gpu(8, "cuda") as said:
        assert "MPS not started" in said and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ


def test_a_running_daemon_is_used_and_left_running(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    log = _fake_control(tmp_path)
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "theirs"))
    with gpu.shared_gpu(8, "cuda") as said:
        assert said.startswith("MPS: a running daemon")
    assert not log.exists()


def test_release_cached_memory_only_on_cuda(monkeypatch):
    called = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: called.append(1))
    gpu.release_cached_memory("cpu")
    assert called == []
    gpu.release_cached_memory("cuda:0")
    assert called == [1]
