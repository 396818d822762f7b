"""Exceptions vflkit raises. Each message says what is wrong and what to do about it."""

from __future__ import annotations

import functools
from typing import Any, Collection


class VFLKitError(Exception):
    """Base class of every error vflkit raises on purpose."""


class ConfigError(VFLKitError, ValueError):
    """A configuration value is unknown, missing or out of range."""


def check_choice(name: str, value: Any, choices: Collection[str]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of ``choices``; the message lists them."""
    if value not in choices:
        raise ConfigError(f"Invalid {name} {value!r}; choose one of {', '.join(choices)}.")


class DatasetNotFoundError(VFLKitError, FileNotFoundError):
    """A dataset's files are not under any searched directory and could not be downloaded."""


class DatasetCorruptError(VFLKitError, ValueError):
    """A dataset file is present but wrong: checksum, shape or count differs from the original."""


class PartitionError(VFLKitError, ValueError):
    """A vertical partition is impossible or inconsistent (features, parties, sample ids)."""


class SecurityError(VFLKitError, RuntimeError):
    """A secure-aggregation setting would let a party unmask another party's embedding."""


class DivergenceError(VFLKitError, FloatingPointError):
    """A loss became NaN or infinite, or grew without bound, during training."""


class BudgetExhausted(VFLKitError):
    """A run stopped at its deadline after checkpointing its last epoch; rerunning resumes it."""


class DiskSpaceError(VFLKitError, OSError):
    """A results folder lacks the free space a record or checkpoint needs (or its write ran out of it)."""


class RecordWriteError(VFLKitError, OSError):
    """A finished run's record could not be written to its path. ``record`` holds the record
    (nothing trained is lost) and ``saved_to`` where a copy was written instead (None if none
    could be)."""

    def __init__(self, message: str, *, record: dict | None = None, saved_to: str | None = None) -> None:
        super().__init__(message)
        self.record = record
        self.saved_to = saved_to

    def __reduce__(self):  # keep the record across a process pool's pickling
        return functools.partial(RecordWriteError, record=self.record, saved_to=self.saved_to), (str(self),)
