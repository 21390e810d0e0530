"""What a check returns: a :class:`CheckResult` per condition, a :class:`Report` per graph, and the verdict rule.

A numerical check compares estimates with a tolerance. Three verdicts:

- **FAIL**: some comparison is off by more than its tolerance (whatever the power: a failure is located);
- **undecided**: nothing is off, but the typical tolerance is larger than :data:`POWER` times the size of the
  integral it compares; such a check could not have seen the errors it exists for, so it is not a pass;
- **pass**: nothing is off and the check had the power to see an error of that size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["CheckResult", "Report", "CONDITIONS", "POWER", "UNDECIDED", "verdict"]

POWER = 0.25
"""Largest ratio tolerance / :math:`|\\text{integral compared}|` (median over the comparisons of a check) that still decides.

The errors these checks exist for change a compared integral by a factor: a dropped Jacobian (2 pi on a circle, 2 in
the tutorial's ``y = 2u``, rho^2 pi / 2 on the quarter disc's first move), a missing or duplicated atom or piece (0 or 2),
a policy off by a constant. A check must at least see such an error when it moves a quarter of the compared integral:
one of four equal components lost, a Jacobian off by 4/3 or 3/4. Above that ratio its "pass" says nothing (issue 23: a
dropped log 2 pi read 0.668 against a Monte Carlo tolerance of 0.918); below it, a factor-2 error is seen even when the
affected component carries only half of the integral.
"""

UNDECIDED = "undecided: too little power"
"""How an undecided row's detail starts; it goes on to name the piece that lacks power and what would decide it there
(:func:`~gflownet_measure.checks.normalisation.remedy`), which depends on that piece: more nodes (``n``, ``--samples``)
anywhere, the other rule only where it fits the piece (quadrature at most
:data:`~gflownet_measure.checks.integration.QUADRATURE_MAX_DIM` coordinates, or a periodic box; not the 10 coordinates of
the funnel, where a tensor rule has 2 nodes per coordinate at ``n = 1024``)."""

CONDITIONS = {
    "contracts": "shapes  R, kernels, charts, encode",
    "reachability": "eq. 1  reachability",
    "absorbing": "eq. 2  absorbing sink",
    "continuity": "eq. 3  no jump in s -> kappa, P",
    "support": "support kappa <-> kappa_b (eq. 4)",
    "charts": "charts  inverse(forward(u)) = u",
    "encode": "encode  separates states",
    "reversibility": "eq. 4  nu(x)kappa = nu(x)kappa_b",
    "source": "eq. 5  kappa_b(s0, .) = 0",
    "sink mass": "eq. 6  kappa(s, {sink}) in {0, 1}",
    "absorption": "eq. 7  absorbed within N",
    "P_F": "eq. 15 P_F integrates to 1",
    "P_B": "eq. 16 P_B integrates to 1",
}
"""The name of each row of a :class:`Report`, in its order."""


@dataclass(frozen=True)
class CheckResult:
    """One condition: its measured violation ``estimate`` against ``tolerance``, and the verdict.

    ``undecided`` results are never ``passed``: :attr:`Report.passed` is false while any condition is undecided.
    ``skipped`` results were not run (another row, the shape contracts, failed first) and are not ``passed`` either.
    """

    condition: str
    estimate: float
    tolerance: float
    passed: bool
    detail: str = ""
    undecided: bool = False
    skipped: bool = False

    @property
    def verdict(self) -> str:
        """``"pass"``, ``"FAIL"``, ``"undecided"`` or ``"not run"``."""
        return "pass" if self.passed else "undecided" if self.undecided else "not run" if self.skipped else "FAIL"


@dataclass(frozen=True)
class Report:
    """The :class:`CheckResult` of every condition checked on ``graph`` (its name), and ``warnings``: lines about the
    policies that are no condition of the theory (a head whose parameters sit at their cap,
    :mod:`~gflownet_measure.checks.saturation`), printed as ``WARNING:`` lines; they never change :attr:`passed`."""

    graph: str
    results: tuple[CheckResult, ...]
    warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Every condition passed: none failed and none was undecided."""
        return all(r.passed for r in self.results)

    @property
    def undecided(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.undecided)

    def __str__(self) -> str:
        w = max(len(r.condition) for r in self.results)
        lines = [f"theory checks for {self.graph}", f"{'condition':<{w}}  {'estimate':>11}  {'tolerance':>11}  result"]
        for r in self.results:
            lines.append(f"{r.condition:<{w}}  {r.estimate:>11.3g}  {r.tolerance:>11.3g}  {r.verdict}  {r.detail}")
        lines += [f"WARNING: {line}" for line in self.warnings]
        if self.passed:
            lines.append("all conditions hold")
        elif any(r.verdict == "FAIL" for r in self.results):
            lines.append("some conditions FAIL")
        else:
            lines.append(f"some conditions are {UNDECIDED} (each such row names the piece and what would decide it)")
        return "\n".join(lines)


def verdict(error: Tensor, tolerance: Tensor, statistical: Tensor, size: Tensor, estimated: Tensor | None = None) -> tuple[bool, bool, float, int]:
    """``(passed, undecided, power, worst)`` for comparisons ``error <= tolerance`` (``[N]`` each, ``N >= 1``).

    ``statistical`` is the part of ``tolerance`` that is estimation error (Monte Carlo standard errors, a quadrature
    error estimate; not float round-off) and ``size`` the magnitude of the integral compared. ``worst`` indexes the
    comparison with the largest ``error / tolerance``, ``power`` is the median of ``statistical / size`` over the
    comparisons that are ``estimated`` (default: all; exact sums over atoms have no estimation error to judge). A
    comparison failing fails the check; otherwise the check is undecided when ``power`` exceeds :data:`POWER`.
    """
    worst = int(torch.nan_to_num(error / tolerance, nan=float("inf")).argmax())
    ratio = statistical / size.clamp(min=torch.finfo(size.dtype).tiny)
    ratio = ratio if estimated is None else ratio[estimated]
    power = float(ratio.median()) if len(ratio) else 0.0
    if not bool((error <= tolerance).all()):
        return False, False, power, worst
    undecided = power > POWER
    return not undecided, undecided, power, worst
