"""EASTER: embedding aggregation-based heterogeneous models training in VFL.

The journal extension of VFedMH (paper ``001_10a5c1e8906902bc``). Algorithm 1, Eqs. (4)-(7)
and the four messages per step are VFedMH's word for word, so :class:`EASTER` *is*
:class:`~vflkit.methods.vfedmh.VFedMH` under its own registry name (records and tables say
EASTER). Two additions, both for EASTER's experiments rather than its algorithm:

* ``allow_single_passive`` (Table VI, C = 2): with one passive party Eq. (5) has no pair, so
  r_1 = 0 and the active party reads E_1 in the clear. :func:`vflkit.secure.check_passive_count`
  refuses that; the option lets key agreement and aggregation go ahead (through
  ``VFedMH.allow_insecure``), and since it is a config option the record says so.
* per-party model options (Criteo): a party built by :func:`vflkit.tabular.build_tabular_parties`
  carries the keyword arguments its model needs (``vocab_sizes``, ``n_dense``), which
  ``party_model`` passes to :func:`vflkit.models.get_model`. Image parties carry none.

Eq. (8) is written as binary cross-entropy with log2. We keep natural-log cross-entropy on
C logits (two for Criteo: that is BCE on the logit difference); log2 only rescales the
gradient by 1/ln 2, i.e. the learning rate.
"""

from __future__ import annotations

from .vfedmh import VFedMH


class EASTER(VFedMH):
    """EASTER (Algorithm 1): VFedMH's protocol under the name ``easter``.

    Options
    -------
    blinding, scheme, scale_bits, authenticate_keys
        As :class:`~vflkit.methods.vfedmh.VFedMH`.
    allow_single_passive : bool, default False
        Table VI's C = 2 column: the active party then sees the passive embedding (module docstring).
    """

    name = "easter"
    defaults = {**VFedMH.defaults, "allow_single_passive": False}

    def allow_insecure(self) -> bool:
        """The ``allow_single_passive`` option (see the class docstring)."""
        return bool(self.options["allow_single_passive"])
