"""Exceptions vflkit raises. Each message says what is wrong and what to do about it."""

from __future__ import annotations


class VFLKitError(Exception):
    """Base class of every error vflkit raises on purpose."""


class ConfigError(VFLKitError, ValueError):
    """A configuration value is unknown, missing or out of range."""


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
