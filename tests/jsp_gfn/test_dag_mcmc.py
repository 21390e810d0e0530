"""MH-MC3 and Gibbs-MC3 (gflownet_measure/jsp_gfn/baselines/mcmc.py): legal moves, Hastings counts, and agreement with the exact posterior.

Note [Randomized statistical tests]: every run is seeded. The posterior checks compare each of the
d(d-1) edge marginals (6 at d = 3, 12 at d = 4) with the exact one by a z-score, SE = sqrt(p(1-p) / ESS), ESS from batch means
over 4 chains; |z| < 4 fails a correct sampler with probability about 12 * 6e-5 per run (a bit more for
the noise of the ESS estimate). The runs are broad posteriors (small N, model noise = data noise) where
both samplers mix: ESS is ~1,200-5,000 of 6,400 kept states, so SE <= 0.015 and RMSE < 0.05 holds with room.
"""
import math

import numpy as np
import pytest
import torch

from gflownet_measure.jsp_gfn.baselines.mcmc import (
    MOVES,
    ChainState,
    MCMCSamples,
    Target,
    _GibbsDraws,
    _legal_np,
    gibbs_mc3,
    legal_moves,
    mala_step,
    mh_mc3,
    propose_structure,
)
from gflownet_measure.jsp_gfn.bayesnets.dags import enumerate_dags, transitive_closure
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

pytestmark = pytest.mark.usefixtures("one_thread")

N_CHAINS, N_SAMPLES, THIN, BURN_IN = 4, 1600, 5, 500


def _acyclic(adj: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: no node reaches another node that reaches it back (and no self loop)."""
    reach = transitive_closure(adj)
    eye = torch.eye(adj.shape[-1], dtype=torch.bool)
    return ~((reach & reach.transpose(-1, -2)) & ~eye).any(-1).any(-1) & ~(adj.bool() & eye).any(-1).any(-1)


def _model(d: int, n: int, seed: int) -> LinearGaussian:
    """Simulated ER1 data with unit noise scored with the matching model noise: a broad posterior."""
    sim = simulate_er(d, 1.0, n, 0, obs_std=1.0, seed=seed)
    return LinearGaussian(sim.train, obs_var=1.0)


def _batch_means_ess(x: np.ndarray, n_batches: int = 20) -> float:
    """ESS of the mean of ``x [C, T]`` (C chains): C T var(x) / (L var(batch means)), batches of length L = T / n_batches."""
    C, T = x.shape
    L = T // n_batches
    bm = x[:, : n_batches * L].reshape(C, n_batches, L).mean(-1)
    return C * n_batches * L * x.var() / (L * bm.var(ddof=1))


def _check_edges(samples: MCMCSamples, exact_edge: torch.Tensor, n_chains: int = N_CHAINS) -> None:
    """RMSE < 0.05, and every off-diagonal edge marginal within 4 SE of the exact one with ESS > 500."""
    d = exact_edge.shape[-1]
    g = samples.graphs.view(n_chains, -1, d, d).numpy().astype(float)
    p, est = exact_edge.numpy(), g.mean((0, 1))
    off = ~np.eye(d, dtype=bool)
    rmse = math.sqrt(((est - p)[off] ** 2).mean())
    assert rmse < 0.05, rmse
    for i, j in zip(*np.nonzero(off)):
        ess = _batch_means_ess(g[:, :, i, j])
        assert ess > 500, f"edge {i}->{j}: ESS {ess:.0f}, the chain does not mix"
        z = (est[i, j] - p[i, j]) / math.sqrt(p[i, j] * (1 - p[i, j]) / ess)
        assert abs(z) < 4, f"edge {i}->{j}: estimate {est[i, j]:.4f}, exact {p[i, j]:.4f}, ESS {ess:.0f}, z = {z:.2f}"


# ---------------------------------------------------------------- legal moves and the Hastings counts


def _brute_force_moves(adj: torch.Tensor, max_parents: int | None = None) -> set[tuple[int, int, int]]:
    """Every (kind, i, j) single-edge change of ``adj [d, d]`` whose result is a DAG (with at most ``max_parents``
    parents per node), by trying each one."""
    d = adj.shape[-1]
    out = set()
    for i in range(d):
        for j in range(d):
            if i == j:
                continue
            g = adj.clone()
            if not adj[i, j]:
                g[i, j] = True
                kind = 0
            else:
                g[i, j] = False
                out.add((1, i, j))  # removing an edge of a DAG always leaves a DAG
                g[j, i] = True
                kind = 2
            if _acyclic(g[None])[0] and (max_parents is None or int(g.sum(0).max()) <= max_parents):
                out.add((kind, i, j))
    return out


def test_legal_moves_on_hand_graphs():
    """Chain 0 -> 1 -> 2: add {0->2} (1->0, 2->0, 2->1 close a cycle), remove and reverse both edges: n = 5.
    Triangle 0->1, 1->2, 0->2: nothing to add, remove 3, reverse 0->1 and 1->2 but not 0->2 (0->1->2): n = 5."""
    chain = torch.zeros(3, 3, dtype=torch.bool)
    chain[0, 1] = chain[1, 2] = True
    tri = chain.clone()
    tri[0, 2] = True
    m = legal_moves(torch.stack([chain, tri]), transitive_closure(torch.stack([chain, tri])))  # [2, 3, 3, 3]
    got = [{(k, i, j) for k, i, j in m[b].nonzero().tolist()} for b in range(2)]
    assert got[0] == {(0, 0, 2), (1, 0, 1), (1, 1, 2), (2, 0, 1), (2, 1, 2)}
    assert got[1] == {(1, 0, 1), (1, 1, 2), (1, 0, 2), (2, 0, 1), (2, 1, 2)}
    assert MOVES == ("add", "remove", "reverse")


@pytest.mark.parametrize("d, max_parents", [(2, None), (3, None), (4, None), (3, 1), (4, 1), (4, 2)])
def test_legal_moves_are_exactly_the_acyclic_single_edge_changes(d, max_parents):
    """On every DAG with d <= 4 (543 at d = 4), within ``max_parents`` if set: the legal set equals the brute-force
    set of single-edge changes that stay acyclic and within the limit (so n(G) is right, and every move's inverse,
    a single-edge change back, is legal too), and the numpy masks of the sampler's move table equal ``legal_moves``."""
    dags = enumerate_dags(d, max_parents)
    m = legal_moves(dags, transitive_closure(dags), max_parents)
    for b in range(len(dags)):
        assert {tuple(x) for x in m[b].nonzero().tolist()} == _brute_force_moves(dags[b], max_parents)
        assert np.array_equal(_legal_np(dags[b].numpy(), max_parents), m[b].numpy())


def test_every_move_has_its_inverse_and_the_counts_match():
    """For every third DAG at d = 4 and each of its legal moves (12 n(G) proposals draw every move except with
    probability ~ n e^-12): G' is acyclic, the inverse move is legal in G' and returns G, n(G) and n(G') are
    the legal counts of G and G', the weights sit exactly on the edges of G', and
    log_hastings = log n(G) - log n(G') + log q(dropped) - log q(drawn)."""
    dags = enumerate_dags(4)
    counts = legal_moves(dags, transitive_closure(dags)).flatten(1).sum(1)  # [n]
    index = {g.numpy().tobytes(): k for k, g in enumerate(dags)}
    s = 0.7

    def log_q(w):
        return -0.5 * (w / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)

    gen = torch.Generator().manual_seed(0)
    for k in range(0, len(dags), 3):  # 181 of the 543 DAGs
        g, n = dags[k], int(counts[k])
        theta = torch.randn(4, 4, dtype=torch.float64, generator=gen) * g
        reps = 12 * n
        prop = propose_structure(g.expand(reps, 4, 4), theta.flatten().expand(reps, 16), jump_std=s, generator=gen)
        assert prop.theta.shape == (reps, 16)
        assert _acyclic(prop.adj).all()
        assert (prop.n_moves == n).all()
        first = {}
        for r in range(reps):
            first.setdefault((int(prop.kind[r]), *prop.edge[r].tolist()), r)
        assert len(first) == n
        for (kind, i, j), r in first.items():
            g2, th2 = prop.adj[r], prop.theta[r].view(4, 4)  # flat index i * d + j
            k2 = index[g2.numpy().tobytes()]
            assert int(prop.n_moves_new[r]) == int(counts[k2])
            inv_kind, a, b = {0: (1, i, j), 1: (0, i, j), 2: (2, j, i)}[kind]
            assert legal_moves(g2[None], transitive_closure(g2[None]))[0, inv_kind, a, b]
            undone = g2.clone()
            undone[a, b] = inv_kind == 0
            if inv_kind == 2:
                undone[b, a] = True
            assert torch.equal(undone, g)
            assert torch.equal(th2 != 0, g2)
            dropped = log_q(float(theta[i, j])) if kind != 0 else 0.0
            drawn = log_q(float(th2[(i, j) if kind == 0 else (j, i)])) if kind != 1 else 0.0
            expected = math.log(n) - math.log(int(counts[k2])) + dropped - drawn
            assert math.isclose(float(prop.log_hastings[r]), expected, rel_tol=1e-12, abs_tol=1e-12)


def test_proposal_is_uniform_over_legal_moves():
    """From the chain 0 -> 1 -> 2 -> 3 (n = 3 adds + 3 removes + 3 reverses = 9): 18,000 proposals, each move's
    count ~ Binomial(18000, 1/9), sd = 42; every count within 5 sd of 2,000."""
    g = torch.zeros(4, 4, dtype=torch.bool)
    g[0, 1] = g[1, 2] = g[2, 3] = True
    m = legal_moves(g[None], transitive_closure(g[None]))[0]
    n = int(m.sum())
    assert n == 9  # adds 0->2, 0->3, 1->3
    reps = 18000
    prop = propose_structure(g.expand(reps, 4, 4), torch.zeros(reps, 16, dtype=torch.float64), generator=torch.Generator().manual_seed(1))
    keys = (prop.kind * 16 + prop.edge[:, 0] * 4 + prop.edge[:, 1]).tolist()
    freq = {k: keys.count(k) for k in set(keys)}
    assert len(freq) == n
    sd = math.sqrt(reps * (1 / n) * (1 - 1 / n))
    assert all(abs(c - reps / n) < 5 * sd for c in freq.values()), freq


# ---------------------------------------------------------------- samplers against the exact posterior


def test_gibbs_draws_have_the_conjugate_posterior_law():
    """The sampler's cached conjugate draws against ``model.theta_posterior`` (and the same moments as
    ``model.sample_theta_posterior``): 20,000 draws for the graph 0->2, 1->2, 1->3; means within 4 SE, the
    covariance of column 2's two weights within 0.05 relative, zero off the edges."""
    model = _model(4, 20, seed=3)
    g = torch.zeros(4, 4, dtype=torch.bool)
    g[0, 2] = g[1, 2] = g[1, 3] = True
    draws = torch.from_numpy(_GibbsDraws(model)(np.broadcast_to(g.numpy(), (20000, 4, 4)).copy(), np.random.default_rng(0)))  # [K, d, d] inside the sampler
    ref = model.sample_theta_posterior(g.expand(20000, 4, 4), generator=torch.Generator().manual_seed(0)).view(20000, 4, 4)  # flat, row-major
    mean, cov = model.theta_posterior(g)
    mean = mean.view(4, 4)
    assert not (draws[:, ~g] != 0).any()
    for x in (draws, ref):
        se = cov.diagonal(dim1=1, dim2=2).T.sqrt() / math.sqrt(20000)  # [d, d]: sd of theta_ij is sqrt(cov[j][i, i])
        assert ((x.mean(0) - mean)[g] / se[g]).abs().max() < 4
        c = torch.cov(x[:, [0, 1], 2].T)
        assert torch.allclose(c, cov[2][[0, 1]][:, [0, 1]], rtol=0.05, atol=0.05 * float(cov[2].abs().max()))


@pytest.mark.slow
def test_gibbs_mc3_edge_marginals_match_exact():
    """d = 3, N = 20, seed 1: exact edge marginals 0.14-0.53 (no graph above 0.23)."""
    model = _model(3, 20, seed=1)
    exact = ExactPosterior(model).features()["edge"]
    out = gibbs_mc3(model, n_samples=N_SAMPLES, burn_in=BURN_IN, thin=THIN, n_chains=N_CHAINS, seed=0)
    assert out.graphs.shape == (N_CHAINS * N_SAMPLES, 3, 3) and out.graphs.dtype == torch.bool
    assert _acyclic(out.graphs).all()
    assert out.thetas.shape == (N_CHAINS * N_SAMPLES, 9)
    assert torch.equal(out.thetas != 0, out.graphs.flatten(1))  # exact Gibbs draws: nonzero exactly on the edges
    assert 0 < out.acceptance < 1 and out.seconds > 0
    _check_edges(out, exact)


def test_mala_leaves_the_conjugate_posterior_invariant():
    """4,000 chains on the graph 0->2, 1->2, 1->3 started at exact draws of P(theta | G, D), 30 MALA moves (84% of
    them accepted): still the conjugate law. Means within 4 SE, variances within 10% (4,000 draws: the SE of a variance
    is 2.2%). Without the proposal ratio q(theta | theta') / q(theta' | theta) the variances end at 0.53-0.62 of the exact."""
    model, C = _model(4, 20, seed=3), 4000
    g = torch.zeros(4, 4, dtype=torch.bool)
    g[0, 2] = g[1, 2] = g[1, 3] = True
    adj = np.broadcast_to(g.numpy(), (C, 4, 4)).copy()
    target, rng = Target(model), np.random.default_rng(0)
    theta = _GibbsDraws(model)(adj, rng).reshape(C, 16)
    state = ChainState(adj, theta, target.log_R(adj, theta))
    mean, cov = model.theta_posterior(g)
    var = cov.diagonal(dim1=1, dim2=2).T.reshape(16).numpy()  # var of theta_ij = cov[j][i, i], flat row-major
    step = np.full(C, 1.2 * float(np.sqrt(var[g.flatten().numpy()]).min()))
    accepted = 0
    for _ in range(30):
        state, ok = mala_step(state, target, rng, step)
        accepted += ok.sum()
    assert 0.3 < accepted / (30 * C) < 0.9
    on = g.flatten().numpy()
    assert not state.theta[:, ~on].any()
    se = np.sqrt(var[on] / C)
    assert (np.abs(state.theta[:, on].mean(0) - mean.numpy()[on]) / se).max() < 4
    assert np.allclose(state.theta[:, on].var(0) / var[on], 1, atol=0.1)


@pytest.mark.slow
def test_gibbs_mc3_with_mala_moves_matches_exact():
    """The weight update by MALA (``theta_update="mala"``, as for CPDs with no closed form) on the problem of
    :func:`test_gibbs_mc3_edge_marginals_match_exact`: the same edge marginals."""
    model = _model(3, 20, seed=1)
    out = gibbs_mc3(model, n_samples=N_SAMPLES, burn_in=BURN_IN, thin=THIN, n_chains=N_CHAINS, seed=0, theta_update="mala", theta_step=0.3)
    assert _acyclic(out.graphs).all() and not (out.thetas[~out.graphs.flatten(1)] != 0).any()
    _check_edges(out, ExactPosterior(model).features()["edge"])


@pytest.mark.slow
def test_gibbs_mc3_within_max_parents_matches_the_restricted_posterior():
    """d = 3, N = 20, seed 1, at most one parent: the chain stays on the 16 forests and its edge marginals match
    ``ExactPosterior(model, 1)``, not the unrestricted posterior (RMSE 0.062 between the two here; edge 0 -> 2: 0.06 against 0.19)."""
    model = _model(3, 20, seed=1)
    restricted = ExactPosterior(model, max_parents=1).features()["edge"]
    assert ((restricted - ExactPosterior(model).features()["edge"]) ** 2).mean().sqrt() > 0.05  # the check below can tell them apart
    out = gibbs_mc3(model, n_samples=N_SAMPLES, burn_in=BURN_IN, thin=THIN, n_chains=N_CHAINS, seed=0, max_parents=1)
    assert int(out.graphs.sum(1).amax()) <= 1
    _check_edges(out, restricted)


@pytest.mark.slow
def test_mh_mc3_edge_marginals_and_weights_match_exact():
    """d = 3, N = 10, seed 2 (edge marginals 0.13-0.74): graph marginals as for Gibbs; and given the MAP graph
    (P = 0.23, ~1,450 kept states) the weight's sample mean is within 0.1 of the exact posterior mean
    (posterior sd 0.35; the random walk's ESS on it is in the hundreds, so 0.1 is > 5 SE)."""
    model = _model(3, 10, seed=2)
    post = ExactPosterior(model)
    out = mh_mc3(model, n_samples=N_SAMPLES, burn_in=BURN_IN, thin=THIN, n_chains=N_CHAINS, seed=0)
    assert _acyclic(out.graphs).all()
    assert not (out.thetas[~out.graphs.flatten(1)] != 0).any()  # weights only on edges
    _check_edges(out, post.features()["edge"])
    top = post.dags[post.log_prob.argmax()]
    hit = (out.graphs == top).flatten(1).all(1)
    assert abs(float(hit.double().mean()) - float(post.log_prob.exp().max())) < 0.05
    mean, _ = model.theta_posterior(top)
    assert (out.thetas[hit].mean(0) - mean)[top.flatten()].abs().max() < 0.1


@pytest.mark.slow
def test_uninformative_data_give_the_uniform_distribution_over_dags():
    """All-zero data: the likelihood is constant, so P(G | D) is uniform over the 543 DAGs of d = 4 (every
    edge marginal = E|E| / 12 = 0.3094) and theta | G is the N(0, 1) prior. With jump_std = 1.5 the
    reversible-jump densities q_w do not cancel the prior: dropping them biases |E| by O(1). (A narrow
    q_w, 0.5, also targets the right law but mixes slowly: removing a weight far out in q_w's tail is rare.) (Dropping the
    move counts n(G)/n(G') would move E|E| only from 3.713 to 3.632, about 3 SE here; the counts are
    checked exactly above.)"""
    model = LinearGaussian(torch.zeros(1, 4, dtype=torch.float64))
    post = ExactPosterior(model)
    assert torch.allclose(post.log_prob, torch.full_like(post.log_prob, -math.log(543)))
    out = mh_mc3(model, n_samples=1500, burn_in=200, thin=3, n_chains=N_CHAINS, seed=0, jump_std=1.5)
    _check_edges(out, post.features()["edge"])
    n_edges = out.graphs.flatten(1).sum(1).view(N_CHAINS, -1).numpy().astype(float)
    se = math.sqrt(n_edges.var() / _batch_means_ess(n_edges))
    assert abs(n_edges.mean() - 2016 / 543) < 4 * se  # E|E| = 12 * 0.3094 = 3.7127
    active = out.thetas[out.graphs.flatten(1)]
    assert abs(float(active.mean())) < 0.1 and abs(float(active.std()) - 1) < 0.1  # the N(0, 1) prior


def test_reproducible_per_seed_and_chain_layout():
    model = _model(3, 10, seed=2)
    for fn in (mh_mc3, gibbs_mc3):
        a = fn(model, n_samples=50, burn_in=10, thin=2, n_chains=3, seed=5)
        b = fn(model, n_samples=50, burn_in=10, thin=2, n_chains=3, seed=5)
        c = fn(model, n_samples=50, burn_in=10, thin=2, n_chains=3, seed=6)
        assert torch.equal(a.graphs, b.graphs) and torch.equal(a.thetas, b.thetas) and a.acceptance == b.acceptance
        assert not torch.equal(a.thetas, c.thetas)
        assert a.graphs.shape == (150, 3, 3) and a.thetas.dtype == torch.float64
        chains = a.thetas.view(3, 50, 9)
        assert not torch.equal(chains[0], chains[1])  # independent chains, chain-major layout


def test_invalid_arguments():
    model = _model(3, 10, seed=2)
    with pytest.raises(ValueError, match="thin must be an integer >= 1"):
        mh_mc3(model, thin=0)
    with pytest.raises(ValueError, match="n_chains"):
        gibbs_mc3(model, n_chains=1.5)
    with pytest.raises(ValueError, match="jump_std"):
        gibbs_mc3(model, jump_std=0.0)
    with pytest.raises(ValueError, match="d >= 2"):
        mh_mc3(LinearGaussian(torch.randn(5, 1, dtype=torch.float64)))
