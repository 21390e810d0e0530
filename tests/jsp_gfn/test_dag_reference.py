"""The reference measures of the DAG x Theta space without enumeration (``gflownet_measure/jsp_gfn/dag_params/reference.py``): the
importance rule over DAGs (exact draws by edge weight, ``weighted_dags.py``), the acyclicity test, and the sampled nu and terminal measure against the enumerated
ones at d = 3 (Lahlou et al. 2023, Definition 1; Deleu et al. 2023).

Every stochastic comparison is seeded, so the tests are deterministic; the stated tolerances (4 standard errors of the
estimate, its own sample spread / sqrt(M)) are what an unseeded run would pass with probability about 1 - 6e-5 each.
"""
from __future__ import annotations

import math

import pytest
import torch

from gflownet_measure.checks import integrate
from gflownet_measure.jsp_gfn.bayesnets.dags import dag_codes, enumerate_dags, is_dag, transitive_closure
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.dag_params.reference import BLOCK_THETAS, PROPOSAL_SCALE, draw_dags, sampled_measures
from gflownet_measure.jsp_gfn.dag_params.space import ThetaChart, enumerated_measures, make_space
from gflownet_measure.jsp_gfn.dag_params.states import join, split
from gflownet_measure.sampled import SampledMeasure

pytestmark = pytest.mark.usefixtures("one_thread")

Z = 4.0  # standard errors allowed to a seeded Monte Carlo estimate


def nilpotent(adj: torch.Tensor) -> torch.Tensor:
    """Acyclic iff :math:`A^d = 0` (a walk of length d on d nodes repeats a node): ``[B]`` bool, independent of the closure code."""
    d = adj.shape[-1]
    return (torch.linalg.matrix_power(adj.double(), d) == 0).all(-1).all(-1)


def all_graphs(d: int, loops: bool) -> torch.Tensor:
    """Every directed graph on ``d`` nodes (with or without self loops) as ``[2^k, d, d]`` bool."""
    slots = [(i, j) for i in range(d) for j in range(d) if loops or i != j]
    bits = (torch.arange(2 ** len(slots))[:, None] >> torch.arange(len(slots))) & 1
    adj = torch.zeros(len(bits), d, d, dtype=torch.bool)
    for k, (i, j) in enumerate(slots):
        adj[:, i, j] = bits[:, k].bool()
    return adj


def _linear(d: int) -> LinearGaussian:
    return LinearGaussian(torch.randn(10, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))


# ---------------------------------------------------------------- is_dag


@pytest.mark.parametrize("d, loops", [(3, True), (4, False)])
def test_is_dag_agrees_with_the_closure_and_the_enumeration(d, loops):
    """On every directed graph of d = 3 (self loops included, 512) and d = 4 (4,096): ``is_dag`` is true exactly when no
    node has a self loop and no two distinct nodes reach each other in the transitive closure, exactly when A^d = 0, and
    exactly on the 25 / 543 enumerated DAGs."""
    adj = all_graphs(d, loops)
    reach = transitive_closure(adj)
    eye = torch.eye(d, dtype=torch.bool)
    by_closure = ~(adj & eye).flatten(1).any(1) & ~(reach & reach.transpose(1, 2) & ~eye).flatten(1).any(1)
    got = is_dag(adj)
    assert torch.equal(got, by_closure) and torch.equal(got, nilpotent(adj))
    dags = enumerate_dags(d)
    assert int(got.sum()) == len(dags) and torch.equal(dag_codes(adj[got]).sort().values, dag_codes(dags))


def test_is_dag_is_batched_over_leading_dimensions():
    adj = torch.zeros(2, 3, 5, 5, dtype=torch.bool)
    adj[1, 2, 0, 1] = adj[1, 2, 1, 4] = adj[1, 2, 4, 0] = True  # a 3-cycle
    out = is_dag(adj)
    assert out.shape == (2, 3) and out.sum() == 5 and not out[1, 2]


# ---------------------------------------------------------------- draw_dags


@pytest.mark.parametrize("d", [2, 3, 5, 8, 20])
def test_draw_dags_gives_dags_with_finite_log_weights(d):
    adj, log_w = draw_dags(2000, d, torch.Generator().manual_seed(d))
    assert adj.shape == (2000, d, d) and adj.dtype == torch.bool and log_w.shape == (2000,) and log_w.dtype == torch.float64
    assert is_dag(adj).all() and nilpotent(adj).all() and torch.isfinite(log_w).all()
    if d <= 3:  # (1 - p)^(d (d - 1) / 2) of the draws are empty: both kinds occur
        assert adj.flatten(1).any(1).any() and (~adj.flatten(1).any(1)).any()


def test_draw_dags_is_repeatable_from_its_generator():
    a = draw_dags(100, 6, torch.Generator().manual_seed(7))
    b = draw_dags(100, 6, torch.Generator().manual_seed(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("d, count", [(3, 25), (4, 543)])
def test_draw_dags_importance_rule_is_unbiased(d, count):
    """:math:`\\frac1M \\sum_m w_m f(G_m)` estimates :math:`\\sum_G f(G)` over the enumerated DAGs, for f = 1 (25 at d = 3,
    543 at d = 4) and f = the number of edges, within 4 standard errors (M = 200,000 draws, seeded)."""
    M = 200_000
    adj, log_w = draw_dags(M, d, torch.Generator().manual_seed(10 + d))
    w = log_w.exp()
    dags = enumerate_dags(d)
    assert len(dags) == count
    for f in (lambda a: torch.ones(len(a), dtype=torch.float64), lambda a: a.flatten(1).sum(1).double()):
        terms = w * f(adj)
        exact = float(f(dags).sum())
        se = float(terms.std()) / math.sqrt(M)
        assert abs(float(terms.mean()) - exact) <= Z * se, (float(terms.mean()), exact, se)
        assert se < 0.01 * exact  # the estimate has power: its error bar is under 1% of the value


def test_draw_dags_weights_count_each_dag_once():
    """At d = 3 the weights of the draws of each DAG average to one per draw-count: for every one of the 25 DAGs,
    :math:`\\frac1M \\sum_m w_m 1[G_m = G]` = 1 within 4 standard errors (M = 200,000, seeded); no draw is cyclic."""
    M = 200_000
    adj, log_w = draw_dags(M, 3, torch.Generator().manual_seed(3))
    dags = enumerate_dags(3)
    codes = dag_codes(dags)
    idx = torch.searchsorted(codes, dag_codes(adj))
    assert torch.equal(codes[idx], dag_codes(adj))  # every draw is one of the enumerated DAGs
    w = log_w.exp()
    one_hot = torch.zeros(M, len(dags), dtype=torch.float64)
    one_hot[torch.arange(M), idx] = w
    mean, se = one_hot.mean(0), one_hot.std(0) / math.sqrt(M)
    assert ((mean - 1).abs() <= Z * se).all(), ((mean - 1) / se).abs().max()


# ---------------------------------------------------------------- the sampled nu and terminal measure


def _test_function(d: int, P: int, active, gen: torch.Generator):
    """``f(x)`` = g(G) exp(-sum_{active i} (theta_i - mu_i)^2 / (2 s^2)) at a terminal state, h(G) at (G, #), with random
    ``g``, ``h`` (exponentials of linear functions of the edges), ``mu`` and ``s``; and its exact integrals against the
    terminal measure and nu over a list of DAGs, :math:`\\sum_G g(G) (\\sqrt{2\\pi} s)^{|\\Theta_G|}` and that plus :math:`\\sum_G h(G)`.

    The bump has the width of the rule's Gaussian proposal (PROPOSAL_SCALE, the theory checks' envelope) and a centre
    within a third of it: the integrands the rule is built for. A bump much wider than the proposal gives importance
    weights of infinite variance (reference.py), and no error bar means anything there."""
    a, b = (0.4 * torch.randn(d * d, dtype=torch.float64, generator=gen) for _ in range(2))
    s = PROPOSAL_SCALE
    mu = s / 3 * torch.randn(P, dtype=torch.float64, generator=gen)

    def f(x: torch.Tensor) -> torch.Tensor:
        adj, theta, stopped = split(x.double(), d)
        e = adj.flatten(1).double()
        on = active(adj)
        bump = torch.exp(-torch.where(on, (theta - mu) ** 2, 0.0).sum(1) / (2 * s * s))
        return torch.where(stopped, torch.exp(e @ a) * bump, torch.exp(e @ b))

    def exact(dags: torch.Tensor) -> tuple[float, float]:
        e = dags.flatten(1).double()
        k = active(dags).sum(1).double()
        terminal = float((torch.exp(e @ a) * (math.sqrt(2 * math.pi) * s) ** k).sum())
        return terminal, terminal + float(torch.exp(e @ b).sum())

    return f, exact


def _sampled_integral(measure: SampledMeasure, f, M: int, seed: int) -> tuple[float, float]:
    """:math:`\\sum_m w_m f(x_m)` over the draws of ``M`` and its standard error (that of the i.i.d. blocks of draws, :func:`integrate`)."""
    wp = measure.weighted_points(M, torch.Generator().manual_seed(seed))
    (est,), (var,) = integrate(wp, f(wp.x[0])[None])
    return float(est), float(var) ** 0.5


def _quadrature_integral(measure, f, n: int) -> float:
    wp = measure.weighted_points(n, "quadrature")
    return float(torch.where(wp.mask[0] & ~wp.sink[0], wp.log_w[0].exp() * f(wp.x[0]), 0.0).sum())


@pytest.mark.parametrize("max_parents", [None, 1])
@pytest.mark.slow
def test_sampled_measures_integrate_like_the_enumerated_ones(max_parents):
    """d = 3, linear model (Theta_G = R^|E|): the enumerated nu and terminal measure (``Measure.weighted_points(n,
    "quadrature")``) integrate the test function of :func:`_test_function` to its exact value (relative 1e-8: a
    Gauss-Hermite rule of 30 nodes per coordinate on a Gaussian bump), and the sampled ones (M = 200,000 draws, seeded)
    to the same value within 4 standard errors. With ``max_parents = 1`` both sum over the 16 forests only: the sampled
    rule gives weight 0 to the other draws."""
    d = 3
    model = _linear(d)
    P = model.n_params
    nu_s, terminal_s = sampled_measures(d, P, model.active, max_parents)
    nu_e, terminal_e = enumerated_measures(d, P, ThetaChart(d, P, model.active), max_parents)
    dags = enumerate_dags(d, max_parents)
    assert len(dags) == (16 if max_parents == 1 else 25)
    gen = torch.Generator().manual_seed(20)
    for trial in range(2):
        f, exact = _test_function(d, P, model.active, gen)
        want_terminal, want_nu = exact(dags)
        assert abs(_quadrature_integral(terminal_e, f, 60**3) - want_terminal) <= 1e-8 * want_terminal
        assert abs(_quadrature_integral(nu_e, f, 60**3) - want_nu) <= 1e-8 * want_nu
        for measure, want, seed in ((terminal_s, want_terminal, 100 + trial), (nu_s, want_nu, 200 + trial)):
            got, se = _sampled_integral(measure, f, 200_000, seed)
            assert abs(got - want) <= Z * se, (measure.label, got, want, se)
            assert se < 0.05 * want  # the comparison has power: the error bar is under 5% of the value


def test_sampled_draws_are_states_of_the_space():
    """The draws of the sampled nu are DAGs within ``max_parents`` (or carry weight 0), one in 2 + BLOCK_THETAS of them
    intermediate with theta = 0, the terminal ones with theta on Theta_G only; the terminal measure draws terminal states only; every
    draw of positive weight is ``contains``-ed, and those of weight 0 (over ``max_parents``) are not."""
    d = 4
    model = _linear(d)
    P = model.n_params
    nu, terminal = sampled_measures(d, P, model.active, max_parents=1)
    x, sink, log_w, _ = nu.drawn(4000, torch.Generator().manual_seed(1))
    adj, theta, stopped = split(x, d)
    assert x.shape == (4000 * (2 + BLOCK_THETAS), d * d + P + 1) and not sink.any() and is_dag(adj).all()
    assert stopped.double().mean() == 1 - 1 / (2 + BLOCK_THETAS)  # each block: (G, #), BLOCK_THETAS (G, theta), one more terminal state
    assert (theta[~stopped] == 0).all() and (theta[~model.active(adj)] == 0).all()
    assert (theta[stopped][model.active(adj[stopped])] != 0).all()
    within = (adj.sum(1) <= 1).all(1)
    assert torch.equal(log_w > -math.inf, within) and (~within).any()
    assert torch.equal(nu.contains(x), within)
    assert torch.equal(nu.states(4000, torch.Generator().manual_seed(1)), x[within])
    xt, _, log_wt, _ = terminal.drawn(1000, torch.Generator().manual_seed(2))
    assert (xt[:, -1] == 1).all() and torch.equal(terminal.contains(xt), log_wt > -math.inf)
    assert not terminal.contains(x[~stopped & within]).any() and nu.contains(x[~stopped & within]).all()


def test_contains_rejects_what_is_not_a_state():
    """``contains`` of the sampled nu (max_parents = 1, d = 3) rejects a cyclic graph, a self loop, a non-zero inactive
    parameter, a parameter at an intermediate state, a graph over max_parents, a stop flag or an edge flag that is not
    0/1, and a vector of the wrong width; it accepts the valid versions of each."""
    d = 3
    model = _linear(d)
    P = model.n_params
    nu, terminal = sampled_measures(d, P, model.active, max_parents=1)
    chain = torch.zeros(1, d, d, dtype=torch.bool)
    chain[0, 0, 1] = chain[0, 1, 2] = True  # 0 -> 1 -> 2
    theta = torch.zeros(1, P, dtype=torch.float64)
    theta[0, 1], theta[0, 5] = 0.7, -0.2  # the weights of 0 -> 1 and 1 -> 2
    stop = torch.ones(1, dtype=torch.bool)
    good = join(chain, P, theta, stop, dtype=torch.float64)
    assert nu.contains(good).all() and terminal.contains(good).all()
    assert nu.contains(join(chain, P, dtype=torch.float64)).all() and not terminal.contains(join(chain, P, dtype=torch.float64)).any()

    cyclic = chain.clone()
    cyclic[0, 2, 0] = True  # 2 -> 0 closes the cycle; every node still has one parent
    loop = torch.zeros(1, d, d, dtype=torch.bool)
    loop[0, 1, 1] = True
    inactive = theta.clone()
    inactive[0, 2] = 0.1  # theta[0 d + 2]: the edge 0 -> 2 is absent
    two_parents = chain.clone()
    two_parents[0, 0, 2] = True  # node 2 has parents 0 and 1
    half = good.clone()
    half[0, -1] = 0.5
    flag = good.clone()
    flag[0, 1] = 0.9
    bad = {
        "cyclic": join(cyclic, P, theta, stop, dtype=torch.float64),
        "self loop": join(loop, P, dtype=torch.float64),
        "inactive parameter": join(chain, P, inactive, stop, dtype=torch.float64),
        "parameter at (G, #)": join(chain, P, theta, dtype=torch.float64),
        "over max_parents": join(two_parents, P, dtype=torch.float64),
        "stop flag 0.5": half,
        "edge flag 0.9": flag,
    }
    for name, x in bad.items():
        assert not nu.contains(x).any(), name
        assert not terminal.contains(x).any(), name
    assert not nu.contains(good[:, :-1]).any()  # the wrong width
    unlimited, _ = sampled_measures(d, P, model.active)
    assert unlimited.contains(bad["over max_parents"]).all() and not unlimited.contains(bad["cyclic"]).any()


def test_make_space_uses_the_sampled_measures_beyond_d_5():
    """At d = 6 nu and the terminal measure are :class:`SampledMeasure`; the source is the empty graph and the kernels
    act on the sampled states (a Theta piece at (G, #), the sink alone at (G, theta))."""
    model = _linear(6)
    graph = make_space(model)
    assert isinstance(graph.nu, SampledMeasure) and isinstance(graph.terminal, SampledMeasure)
    assert torch.equal(graph.source, join(torch.zeros(1, 6, 6, dtype=torch.bool), model.n_params)[0])
    x = graph.nu.states(64, torch.Generator().manual_seed(0)).float()
    _, _, stopped = split(x, 6)
    m = graph.kappa(x)
    assert torch.equal(m.pieces[0].mask, ~stopped) and torch.equal(m.atoms.mask[:, -1], stopped)
    assert torch.isfinite(graph.log_reward(x[stopped])).all()
