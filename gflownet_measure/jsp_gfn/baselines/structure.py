"""The baselines of JSP-GFN's tables (Deleu et al. 2023, section 5.2 and Table D.1), by name: one registry, imported lazily.

``STRUCTURE_BASELINES`` maps a table's name to where the function lives, the packages it needs (the optional extra
``baselines``; none for the MCMC baselines (``mc3-collapsed``: structure MC3 on :math:`P(G | D)` with :math:`\\theta`
integrated out, linear-Gaussian or categorical models), ``bcd`` and ``vbg``, which are numpy / torch / scipy only), which models it can
run on, and how a run's :class:`Budget` becomes its arguments. :func:`available` says whether the packages import, and
why not, so that a table can run what is installed and write which baselines it skipped; :func:`load` returns the
function; :func:`sample` runs one baseline on a model, or says why it cannot. Importing this module imports none of
the optional packages.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable, NamedTuple

from gflownet_measure.jsp_gfn.baselines.collapsed_mc3 import no_closed_form
from gflownet_measure.jsp_gfn.baselines.permutations import MAX_PERMUTATION_D
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

__all__ = ["Budget", "StructureBaseline", "STRUCTURE_BASELINES", "available", "load", "sample"]

INSTALL = "pip install 'gflownet-measure[baselines]'"


@dataclass(frozen=True)
class Budget:
    """What a run gives every baseline (the ``jsp-gfn`` settings of the same names; ``max_parents`` 0 is no limit).

    ``posterior_samples``: samples kept in all (MCMC: split over the chains, thinned from ``mcmc_steps`` steps per
    chain after ``mcmc_burn_in`` x ``mcmc_steps`` of burn-in; BCD Nets: draws of its variational posterior);
    ``bootstraps``: resamples of B-GES / B-PC; ``dibs_steps``, ``bcd_steps``, ``vbg_steps``: updates of DiBS, BCD Nets
    and VBG's GFlowNet (``vbg_rounds`` updates of its :math:`q(\\theta)` in between);
    ``edges_per_node``: the expected degree their sparsity priors assume; ``mcmc_seconds``: where > 0, a wall-clock
    budget of each MCMC baseline in place of ``mcmc_steps`` (its chains run that long; the share
    ``mcmc_burn_in / (1 + mcmc_burn_in)`` of their steps, the one the step budget discards, is burn-in).
    """

    seed: int
    posterior_samples: int
    max_parents: int
    edges_per_node: float
    mcmc_steps: int
    mcmc_chains: int
    mcmc_burn_in: float
    mh_theta_step: float
    dibs_steps: int
    bcd_steps: int
    vbg_steps: int
    vbg_rounds: int
    bootstraps: int
    mcmc_seconds: float = 0.0


def _linear(model) -> bool:
    return isinstance(model, LinearGaussian)


def _mcmc(budget: Budget, model) -> dict[str, Any]:
    per_chain = max(1, budget.posterior_samples // budget.mcmc_chains)  # posterior_samples in all
    thin = max(1, budget.mcmc_steps // per_chain)  # mcmc_steps iterations per chain after burn-in
    return {
        "n_samples": per_chain,
        "burn_in": int(budget.mcmc_steps * budget.mcmc_burn_in),
        "thin": thin,
        "n_chains": budget.mcmc_chains,
        "seed": budget.seed,
        "max_parents": budget.max_parents or None,
        "seconds": budget.mcmc_seconds or None,
        "burn_in_fraction": budget.mcmc_burn_in / (1 + budget.mcmc_burn_in),
    }


def _linear_only(label: str) -> Callable[[Any], str]:
    return lambda model: "" if _linear(model) else f"{label} draws theta from the linear-Gaussian posterior: linear models only"


class StructureBaseline(NamedTuple):
    """``function`` in ``module``, which imports the ``requires`` pairs (import name, package name on PyPI).

    ``label``: the name tables print; ``refuses(model)``: why it cannot run on ``model`` ("" when it can);
    ``arguments(budget, model)``: the keyword arguments of ``function(model, **arguments)``.
    """

    label: str
    module: str
    function: str
    requires: tuple[tuple[str, str], ...]
    refuses: Callable[[Any], str]
    arguments: Callable[[Budget, Any], dict[str, Any]]


CAUSAL_LEARN = (("causallearn", "causal-learn"),)
STRUCTURE_BASELINES = {
    "gibbs": StructureBaseline("Gibbs-MC3", "gflownet_measure.jsp_gfn.baselines.mcmc", "gibbs_mc3", (), lambda model: "", _mcmc),
    "mh": StructureBaseline(
        "MH-MC3",
        "gflownet_measure.jsp_gfn.baselines.mcmc",
        "mh_mc3",
        (),
        lambda model: "",
        lambda budget, model: _mcmc(budget, model) | {"theta_step": budget.mh_theta_step},
    ),
    "mc3-collapsed": StructureBaseline("collapsed MC3", "gflownet_measure.jsp_gfn.baselines.collapsed_mc3", "collapsed_mc3", (), no_closed_form, _mcmc),
    "b-ges": StructureBaseline(
        "B-GES",
        "gflownet_measure.jsp_gfn.baselines.bootstrap",
        "bootstrap_ges",
        CAUSAL_LEARN,
        _linear_only("B-GES"),
        lambda budget, model: {"n_samples": budget.bootstraps, "seed": budget.seed},
    ),
    "b-pc": StructureBaseline(
        "B-PC",
        "gflownet_measure.jsp_gfn.baselines.bootstrap",
        "bootstrap_pc",
        CAUSAL_LEARN,
        _linear_only("B-PC"),
        lambda budget, model: {"n_samples": budget.bootstraps, "seed": budget.seed},
    ),
    "dibs": StructureBaseline(
        "DiBS",
        "gflownet_measure.jsp_gfn.baselines.dibs",
        "joint_dibs",
        (("jax", "jax"), ("dibs", "dibs-lib")),
        lambda model: "" if hasattr(model, "obs_var") else "DiBS here models Gaussian CPDs with a fixed noise variance (linear or MLP); this model has none",
        lambda budget, model: {"seed": budget.seed, "steps": budget.dibs_steps, "nonlinear": not _linear(model), "edges_per_node": budget.edges_per_node},
    ),
    "bcd": StructureBaseline(
        "BCD Nets",
        "gflownet_measure.jsp_gfn.baselines.bcd",
        "bcd_nets",
        (),
        lambda model: (
            ""
            if _linear(model) and model.d <= MAX_PERMUTATION_D
            else f"BCD Nets here is a linear-Gaussian SEM whose permanent is enumerated: linear models with d <= {MAX_PERMUTATION_D} only"
        ),
        lambda budget, model: {"n_samples": budget.posterior_samples, "seed": budget.seed, "steps": budget.bcd_steps, "edges_per_node": budget.edges_per_node},
    ),
    "vbg": StructureBaseline(
        "VBG",
        "gflownet_measure.jsp_gfn.baselines.vbg",
        "vbg",
        (),
        _linear_only("VBG"),
        lambda budget, model: {
            "n_samples": budget.posterior_samples,
            "seed": budget.seed,
            "steps": budget.vbg_steps,
            "iterations": min(budget.vbg_rounds, budget.vbg_steps),
            "max_parents": budget.max_parents or None,
        },
    ),
}


def _baseline(name: str) -> StructureBaseline:
    if name not in STRUCTURE_BASELINES:
        raise ValueError(f"unknown structure baseline {name!r}; choose one of {tuple(STRUCTURE_BASELINES)}")
    return STRUCTURE_BASELINES[name]


def available(name: str) -> tuple[bool, str]:
    """``(True, "")`` if every package of baseline ``name`` imports, else ``(False, reason)`` naming the first that does not and how to install it."""
    for module, package in _baseline(name).requires:
        try:
            import_module(module)
        except ImportError as error:
            if isinstance(error, ModuleNotFoundError) and error.name == module:
                return False, f"{package} is not installed: {INSTALL}"
            return False, f"{package} fails to import ({error}): {INSTALL}"
    return True, ""


def load(name: str) -> Callable:
    """The function of baseline ``name``; ``ImportError`` with :func:`available`'s reason if a package is missing."""
    ok, reason = available(name)
    if not ok:
        raise ImportError(f"structure baseline {name!r}: {reason}")
    baseline = _baseline(name)
    return getattr(import_module(baseline.module), baseline.function)


def sample(name: str, model, budget: Budget) -> tuple[Any, dict[str, Any]] | str:
    """Baseline ``name`` run on ``model`` with ``budget``: ``(samples, extra)``, where ``samples`` has ``graphs``,
    ``thetas`` (or ``None``) and ``seconds`` and ``extra`` its other fields (``acceptance`` of the MCMC baselines,
    ``discarded`` of the others); or, when it cannot run, the reason (a missing package, a model it does not take, no
    acyclic sample)."""
    baseline = _baseline(name)
    ok, reason = available(name)
    if not ok:
        return reason
    reason = baseline.refuses(model)
    if reason:
        return reason
    out = load(name)(model, **baseline.arguments(budget, model))
    if not len(out.graphs):
        return f"every {baseline.label} sample ended cyclic"
    return out, {k: v for k, v in out._asdict().items() if k not in ("graphs", "thetas", "seconds")}
