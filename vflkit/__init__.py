"""vflkit: a reproducible study of vertical federated learning.

Data, partitions, party models and the channel (:mod:`vflkit.data`, :mod:`vflkit.partition`,
:mod:`vflkit.models`, :mod:`vflkit.comm`) under the methods and their trainers
(:mod:`vflkit.methods`, :mod:`vflkit.training`), the record store (:mod:`vflkit.records`), and
per paper a study (:mod:`vflkit.studies`) drawn by :mod:`vflkit.report`.
"""

__version__ = "0.2.0"

# the study registry tells the lower layers which papers exist (vflkit.config.check_paper): wired
# here, at the package's face, so that no lower module reads the study layer
from . import studies as _studies  # noqa: E402,F401
