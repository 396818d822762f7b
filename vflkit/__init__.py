"""vflkit: a reproducible study of vertical federated learning.

Modules: :mod:`vflkit.data` (datasets), :mod:`vflkit.partition` (vertical partitioners and
sample alignment), :mod:`vflkit.models` (the papers' party models, split into embedding and
prediction networks), :mod:`vflkit.secure` (VFedMH's blinded embedding aggregation),
:mod:`vflkit.comm` (parties, the channel and its ledger), :mod:`vflkit.methods` (one module per
VFL method), :mod:`vflkit.experiment` (configs, runs and their records) and
:mod:`vflkit.report` (tables and figures beside the papers' numbers).
"""

__version__ = "0.1.0"
