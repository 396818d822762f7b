"""vflkit: a reproducible study of vertical federated learning.

Modules: :mod:`vflkit.data` (datasets), :mod:`vflkit.partition` (vertical partitioners and
sample alignment), :mod:`vflkit.models` (the papers' party models, split into embedding and
prediction networks), :mod:`vflkit.secure` (VFedMH's blinded embedding aggregation),
:mod:`vflkit.comm` (parties, the channel and its ledger), :mod:`vflkit.methods` (one module per
VFL method, with the run configs they consume), :mod:`vflkit.training` (one trainer per protocol
family), :mod:`vflkit.records` (the one run loop and record store of every paper),
:mod:`vflkit.report` (tables and figures beside the papers' numbers) and :mod:`vflkit.studies`
(per paper: the runs of each profile, and the tables and figures drawn from their records).
"""

__version__ = "0.2.0"

# the study registry tells the lower layers which papers exist (vflkit.config.check_paper): wired
# here, at the package's face, so that no lower module reads the study layer
from . import studies as _studies  # noqa: E402,F401
