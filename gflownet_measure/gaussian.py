"""The normalising constant of Gaussian densities, in one place.

.. math:: \\log \\mathcal N(x; \\mu, \\sigma^2) = -\\tfrac12 \\big((x - \\mu) / \\sigma\\big)^2 - \\log \\sigma - \\tfrac12 \\log 2\\pi

Each caller keeps its own arrangement of this formula (per coordinate, per variance, per precision factor):
floating-point sums depend on their order, and runs are compared bit for bit, so only the constant is shared.
"""

from __future__ import annotations

import math

__all__ = ["LOG_2PI"]

LOG_2PI: float = math.log(2 * math.pi)
""":math:`\\log 2\\pi`, the same double as ``math.log(2 * math.pi)``."""
