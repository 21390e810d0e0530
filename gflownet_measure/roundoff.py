"""Round-off in matching states: when two computed states name the same atom.

An atom :math:`\\delta_x` of a kernel is matched against states computed elsewhere: a move of :math:`\\kappa` is located
among the atoms of :math:`\\kappa_b` at its target (eq. 4 on supports), a transition among the atoms of a policy's kernel
(its log-density). A user's kernel may recompute a state rather than copy it (a parent's angle by ``atan2`` from the
child's coordinates), and then lands one float ulp away. States are therefore matched within :data:`ATOM_ULPS` units
of round-off (:func:`ulps_from`), a tolerance relative to the magnitude and set by the dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["ATOM_ULPS", "ROUNDOFF_ULPS", "row_max", "ulps_from"]

ATOM_ULPS = 4.0
"""Two states name the same atom when every coordinate agrees within ``ATOM_ULPS`` units of :func:`ulps_from`,
:math:`|a_i - x_i| \\le 4\\, \\epsilon \\max(1, |x_i|)`: a state recomputed by a different formula (``atan2`` of a
sine and a cosine, a sum in another order) is off by one or two ulps, while a genuinely shifted atom is off by
thousands (1e-3 at :math:`|x| \\le 4` is 2,000 units in float32, 4e12 in float64)."""
ROUNDOFF_ULPS = 1e3
"""A mismatch within this many units, beyond :data:`ATOM_ULPS`, still reads as round-off (a long chain of float32
operations, a state cast through a coarser dtype), not as a wrong state: the support check's hint then says so."""


def ulps_from(a: Tensor, x: Tensor) -> Tensor:
    """How far the states ``a [..., D]`` lie from ``x [..., D]`` (broadcast), in units of round-off at ``x``:

    .. math:: \\max_i \\frac{|a_i - x_i|}{\\epsilon \\max(1, |x_i|)},

    with :math:`\\epsilon` the machine epsilon of the coarser of the two dtypes (one unit is one ulp of :math:`x_i` for
    :math:`|x_i| \\in [1, 2)`; near 0 an absolute :math:`\\epsilon`, the round-off of an angle or a sum that cancels).
    A state of no coordinate is 0 units from any other.
    """
    eps = max(torch.finfo(a.dtype).eps, torch.finfo(x.dtype).eps)
    return row_max((a - x).abs() / (eps * x.abs().clamp(min=1)))


def row_max(t: Tensor) -> Tensor:
    """``[...]``: the largest entry of each row of the non-negative ``t [..., k]``, 0 for rows of no entry (``k = 0``: a
    state of no coordinate, a chart of dimension 0), where ``amax`` has nothing to reduce."""
    return t.amax(-1) if t.shape[-1] else t.sum(-1)
