"""Numerical checks of the theory's conditions on any pointed graph (Lahlou et al. 2023, Definition 1).

:func:`check_graph` runs every check and returns a :class:`Report` of :class:`CheckResult` rows (condition, estimate,
tolerance, verdict, detail). Each row is one of:

=====================================  ============================================  ===================================================================
condition                              function                                      how
=====================================  ============================================  ===================================================================
shapes  R, kernels, charts, encode     :func:`check_contracts`                       the shape contracts of :mod:`gflownet_measure.contracts` at states of nu and the terminal measure
eq. 1  reachability                    :func:`check_reachability`                    exact search over atoms, or backward walks from states of nu (no reward evaluated)
eq. 2  absorbing sink                  :func:`check_absorbing_sink`                  no kappa_b(s, .) at states of nu has a sink atom
eq. 3  no jump in s -> kappa, P        :func:`check_continuity`                      masses, Jacobians and policy densities along random segments in pieces of nu, jumps bisected
support kappa <-> kappa_b (eq. 4)      :func:`check_support`                         every forward move is a backward move and the reverse, within nu; sink moves = terminal measure
charts  inverse(forward(u)) = u        :func:`check_charts`                          every chart inverts itself, holds its image, has a finite Jacobian
encode  separates states               :func:`check_encoding`                        distinct states of nu have distinct ``graph.encode`` features
eq. 4  nu(x)kappa = nu(x)kappa_b       :func:`check_reversibility`                   both sides against random test functions, located by pair type and component
eq. 5  kappa_b(s0, .) = 0              :func:`check_source_has_no_parent`            exact
eq. 6  kappa(s, {sink}) in {0, 1}      :func:`check_sink_mass`                       exact on the sink atoms of kappa at states of nu
eq. 7  absorbed within N               :func:`check_finite_absorption`               exact propagation over atoms, or forward walks
eq. 15, 16  P_F, P_B integrate to 1    :func:`check_normalised`                      against the graph's kernels, by quadrature (<= 3 coordinates) or importance sampling
=====================================  ============================================  ===================================================================

Beside the rows, :attr:`Report.warnings`: a head of ``pf`` or ``pb`` whose squashed parameters sit at their cap (or
floor) at most of the states sampled from nu (:mod:`.saturation`) gets a ``WARNING:`` line naming the head, the parameter,
the fraction of states and the remedy (raise ``c_span``); a warning never fails the report.

The shapes row runs first: a log-reward ``[B, 1]`` instead of ``[B]``, atoms of the wrong width, a policy whose ``n_in``
is not the width of ``encode`` or a NaN reward FAIL there in one line (the object, what it returned, what is expected), and
the other rows are *not run* (:attr:`CheckResult.skipped`): a wrong shape would otherwise make them fail, or pass, for no
reason of theirs.

Verdicts: a row passes, FAILs (located: which kernel, component, state) or is *undecided* when its tolerance is too
large to see the errors it is for (:data:`POWER`); :attr:`Report.passed` needs every row to pass. Tolerances:
exact sums within float64 round-off, Monte Carlo within :data:`Z_SCORE` standard errors, quadrature within
:data:`~gflownet_measure.checks.integration.QUADRATURE_SAFETY` times the change from a coarse rule
(:mod:`gflownet_measure.checks.integration`). A check that raises ``ValueError`` or ``RuntimeError`` (a policy on a broken
chart, a walk that never ends) is a failed row whose detail is the error.

``graph.nu`` and ``graph.terminal`` may be :class:`~gflownet_measure.sampled.SampledMeasure` objects (a support too
large to list): the pointwise rows then run on states drawn from them with ``contains`` as membership, eq. 1 and eq. 7
walk, and eq. 4 sums over their importance-sampling draws within Monte Carlo error bars (:mod:`.integration`).
"""

from __future__ import annotations

from typing import Callable

import torch

from ..densities import Policy
from ..graph import PointedGraph
from .continuity import check_continuity
from .encoding import check_encoding
from .integration import EXACT_RTOL, METHODS, Z_SCORE, integrate, nu_states
from .normalisation import FIT_DRAWS, PROPOSAL_WIDENING, check_normalised
from .results import CONDITIONS, POWER, CheckResult, Report
from .reversibility import check_reversibility
from .saturation import SATURATED_FRACTION, saturation_warnings
from .shapes import check_contracts, probe_contracts
from .structure import check_absorbing_sink, check_finite_absorption, check_reachability, check_sink_mass, check_source_has_no_parent
from .support import check_charts, check_support

__all__ = [
    "CheckResult",
    "Report",
    "check_graph",
    "check_contracts",
    "probe_contracts",
    "NOT_RUN",
    "integrate",
    "Z_SCORE",
    "EXACT_RTOL",
    "POWER",
    "METHODS",
    "CONDITIONS",
    "PROPOSAL_WIDENING",
    "FIT_DRAWS",
    "check_reachability",
    "check_absorbing_sink",
    "check_continuity",
    "check_support",
    "check_charts",
    "check_encoding",
    "check_reversibility",
    "check_source_has_no_parent",
    "check_sink_mass",
    "check_finite_absorption",
    "check_normalised",
    "saturation_warnings",
    "SATURATED_FRACTION",
]


NOT_RUN = "because a shape contract fails (the shapes row)"


def _guarded(condition: str, check: Callable[[], CheckResult]) -> CheckResult:
    """``check()``, or a failed row for ``condition`` carrying the ``ValueError`` / ``RuntimeError`` it raised."""
    try:
        return check()
    except (ValueError, RuntimeError) as e:
        return CheckResult(condition, float("nan"), 0.0, False, f"raised {type(e).__name__}: {e}")


def check_graph(
    graph: PointedGraph, pf: Policy | None = None, pb: Policy | None = None, n: int = 256, method: str = "auto", n_functions: int = 8, seed: int = 0
) -> Report:
    """Run every condition of Definition 1 (and eq. 15-16 when policies are given) on ``graph``; never raises for a broken graph or policy.

    The shapes row (:func:`check_contracts`) runs first; when it fails, every other row is *not run*.

    Args:
        n: nodes (Monte Carlo draws or quadrature nodes) per continuous piece, random states per piece of nu.
        method: ``"auto"`` (eq. 4 by quadrature when every piece has at most three coordinates, by Monte Carlo otherwise;
            eq. 15-16 likewise per kernel, periodic pieces by quadrature at any dimension, and importance sampling deciding a
            quadrature row that does not pass), ``"mc"`` (Monte Carlo for eq. 4, importance sampling for eq. 15-16) or
            ``"quadrature"`` (both). See :mod:`gflownet_measure.checks.integration`.
        n_functions: random test functions for eq. 4.
        seed: every draw of the checks; torch's global generator is restored afterwards.
    """
    if method not in METHODS:
        raise ValueError(f"unknown integration method {method!r}; valid: {', '.join(METHODS)}")
    gen = torch.Generator().manual_seed(seed)
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    rows: list[tuple[str, Callable[[], CheckResult]]] = [
        (CONDITIONS["reachability"], lambda: check_reachability(graph, n, pb)),
        (CONDITIONS["absorbing"], lambda: check_absorbing_sink(graph, n)),
        (CONDITIONS["continuity"], lambda: check_continuity(graph, pf, pb, n, seed)),
        (CONDITIONS["support"], lambda: check_support(graph, n)),
        (CONDITIONS["charts"], lambda: check_charts(graph, n)),
        (CONDITIONS["encode"], lambda: check_encoding(graph, n)),
        (CONDITIONS["reversibility"], lambda: check_reversibility(graph, n, method, n_functions, gen)),
        (CONDITIONS["source"], lambda: check_source_has_no_parent(graph)),
        (CONDITIONS["sink mass"], lambda: check_sink_mass(graph, n)),
        (CONDITIONS["absorption"], lambda: check_finite_absorption(graph, n, pf)),
    ]
    if pf is not None:
        rows.append((CONDITIONS["P_F"], lambda: check_normalised(graph, pf, False, n, method)))
    if pb is not None:
        rows.append((CONDITIONS["P_B"], lambda: check_normalised(graph, pb, True, n, method)))
    try:
        contracts = _guarded(CONDITIONS["contracts"], lambda: check_contracts(graph, {"P_F": pf, "P_B": pb}, n))
        torch.manual_seed(seed)  # the other rows draw what they drew before the shapes row existed
        warned: tuple[str, ...] = ()
        if contracts.passed:
            results = tuple(_guarded(condition, check) for condition, check in rows)
            warned = _head_warnings(graph, pf, pb, n)  # after the rows: their draws are those of a check without it
        else:
            results = tuple(CheckResult(condition, float("nan"), 0.0, False, NOT_RUN, skipped=True) for condition, _ in rows)
    finally:
        torch.set_rng_state(state)
    return Report(graph.name, (contracts, *results), warned)


def _head_warnings(graph: PointedGraph, pf: Policy | None, pb: Policy | None, n: int) -> tuple[str, ...]:
    """The report's ``WARNING:`` lines: heads of ``pf`` and ``pb`` at their cap at most of the states of nu the pointwise
    rows run on (:func:`~.saturation.saturation_warnings`); none where the states cannot be drawn (a row says why)."""
    if pf is None and pb is None:
        return ()
    try:
        states = nu_states(graph, n)
    except (ValueError, RuntimeError):
        return ()
    return tuple(w.message for w in saturation_warnings({"P_F": pf, "P_B": pb}, states, "sampled from nu"))
