"""The shapes row, which runs first: the shape contracts of :mod:`gflownet_measure.contracts` probed on states drawn as
the other rows draw them. When it fails, the other rows are not run: a wrong shape would make them fail (or pass) for
no reason of theirs, with a raw torch message."""

from __future__ import annotations

from torch import nn

from ..contract_error import ContractError
from ..contracts import check_reference, check_states
from ..graph import PointedGraph
from .integration import nu_states, terminal_states
from .results import CONDITIONS, CheckResult

__all__ = ["probe_contracts", "check_contracts"]


def probe_contracts(graph: PointedGraph, networks: dict[str, nn.Module | None], n: int) -> str:
    """Every shape contract of ``graph`` and ``networks`` (name -> policy, state flow or ``None``) at the states of
    :func:`~gflownet_measure.checks.integration.nu_states` and :func:`~gflownet_measure.checks.integration.terminal_states`
    (``n`` random points per piece); a one-line summary, or a :class:`~gflownet_measure.contract_error.ContractError`."""
    check_reference(graph)  # what the states are drawn from, before drawing them
    return check_states(graph, nu_states(graph, n), terminal_states(graph, n), networks)


def check_contracts(graph: PointedGraph, networks: dict[str, nn.Module | None], n: int) -> CheckResult:
    """:func:`probe_contracts` as a row: FAIL with the contract's one-line message, which names the object, what it
    returned and what is expected (a NaN or ``+inf`` log-reward: at which terminal state)."""
    try:
        return CheckResult(CONDITIONS["contracts"], 0, 0, True, probe_contracts(graph, networks, n))
    except ContractError as e:
        return CheckResult(CONDITIONS["contracts"], 1, 0, False, str(e))
