"""The JSP-GFN network (Deleu et al. 2023; docs/references.md, 'Network'): shapes, the graph-network pass against a
per-edge loop, permutation equivariance, and the distribution of theta over the flat parameter vector of the CPD model
(normalised, sampled, masked to the active coordinates, differentiable, row-selectable).

Most tests use the linear-Gaussian layout (``P = d^2``, ``theta[i d + j]`` the weight of i -> j, node j's block its
column); the MLP layout (node j's block contiguous, biases and output weights always active) checks that the diagonal head
scatters each node's block to ``block_index`` and masks by ``active``, whatever the layout."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import MultivariateNormal, Normal

from gflownet_measure.jsp_gfn.bayesnets.cpds import MLPGaussian
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.dag_params.network import DiagGaussianHead, FullGaussianHead, JSPNetwork, JSPOutputs
from gflownet_measure.jsp_gfn.dag_params.theta import DiagNormalTheta, FullNormalTheta

pytestmark = pytest.mark.usefixtures("one_thread")

HEADS = {"diag": DiagGaussianHead, "full": FullGaussianHead}  # the public JSP-GFN code's names
MODELS = list(HEADS)

# d = 3: one edge 0 -> 2; two edges into the same child 0 -> 2, 1 -> 2; two edges into different children 2 -> 0, 2 -> 1.
GRAPHS = torch.zeros(3, 3, 3, dtype=torch.float64)
GRAPHS[0, 0, 2] = 1
GRAPHS[1, 0, 2] = GRAPHS[1, 1, 2] = 1
GRAPHS[2, 2, 0] = GRAPHS[2, 2, 1] = 1


def linear(d: int) -> LinearGaussian:
    """The linear-Gaussian layout on ``d`` nodes (the data do not matter to the network)."""
    return LinearGaussian(torch.randn(4, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))


def make_net(d: int, model: str, hidden: int = 16, seed: int = 0, perturb: bool = True) -> JSPNetwork:
    """A float64 network on the linear layout; ``perturb`` moves the theta head's last layer away from its zero initialisation."""
    lin = linear(d)
    torch.manual_seed(seed)
    net = JSPNetwork(d, hidden, lin.block_index(), lin.active, HEADS[model], n_heads=2, key_size=8).double()
    if perturb:
        with torch.no_grad():
            last = net.theta_head.net[-1]
            last.weight.normal_(0.0, 0.3)
            last.bias.normal_(0.0, 0.5)
    return net


def active_of(adj: torch.Tensor) -> torch.Tensor:
    """``[B, d^2]`` bool: the active coordinates of the linear layout (the edges, row-major)."""
    return adj.flatten(1) > 0


def random_dags(B: int, d: int, p: float = 0.5, seed: int = 0) -> torch.Tensor:
    """``[B, d, d]`` float64 DAGs: a random upper-triangular graph relabelled by a random permutation."""
    g = torch.Generator().manual_seed(seed)
    upper = (torch.rand(B, d, d, generator=g) < p).double().triu(1)
    perm = torch.stack([torch.randperm(d, generator=g) for _ in range(B)])
    P = F.one_hot(perm, d).double()  # [B, d, d]
    return P.transpose(1, 2) @ upper @ P


def gaussian_blocks(out: JSPOutputs, adj: torch.Tensor, b: int):
    """The exact law of graph ``b``'s active entries: their flat positions ``i d + j``, mean ``[k]`` and covariance ``[k, k]``.

    "diag": independent entries of scale ``theta.scale[b, i d + j]``. "full": the covariance of column ``j`` is
    :math:`(U_j^\\top U_j)^{-1}` (the full ``d x d`` inverse) restricted to the parents; columns are independent, so the
    joint covariance is block diagonal.
    """
    d = adj.shape[-1]
    edges = [tuple(e) for e in adj[b].nonzero().tolist()]
    flat = [i * d + j for i, j in edges]
    if isinstance(out.theta, DiagNormalTheta):
        mean = out.theta.loc[b, flat]
    else:
        mean = torch.stack([out.theta.loc[b, i, j] for i, j in edges])
    cov = torch.zeros(len(edges), len(edges), dtype=mean.dtype)
    for r, (i, j) in enumerate(edges):
        for c, (k, m) in enumerate(edges):
            if m != j:
                continue
            if isinstance(out.theta, DiagNormalTheta):
                cov[r, c] = out.theta.scale[b, i * d + j] ** 2 if i == k else 0.0
            else:
                U = out.theta.prec_chol[b, j]
                cov[r, c] = torch.linalg.inv(U.T @ U)[i, k]
    return flat, mean, cov


@pytest.mark.parametrize("model", MODELS)
def test_output_shapes(model):
    """B = 3, d = 4 in float32: every output's shape, and theta densities for flat ``[B, P]`` and ``[S, B, P]`` (P = d^2)."""
    torch.manual_seed(0)
    B, d, S = 3, 4, 5
    lin = linear(d)
    net = JSPNetwork(d, 32, lin.block_index(), lin.active, HEADS[model])
    adj = random_dags(B, d).float()
    out = net(adj)
    P = d * d
    assert out.edge_logits.shape == (B, d, d) and out.stop_logit.shape == (B,)
    assert out.theta.batch_shape == (B,) and out.theta.event_shape == (P,) and out.theta.has_rsample
    assert torch.equal(out.theta.active, active_of(adj))
    if model == "diag":
        assert isinstance(out.theta, DiagNormalTheta) and out.theta.loc.shape == (B, P) and out.theta.scale.shape == (B, P)
    else:
        assert isinstance(out.theta, FullNormalTheta) and out.theta.loc.shape == (B, d, d) and out.theta.prec_chol.shape == (B, d, d, d)
    theta = out.theta.rsample((S,))
    assert theta.shape == (S, B, P) and theta.dtype == torch.float32
    assert out.theta.log_prob(theta).shape == (S, B) and out.theta.log_prob(theta[0]).shape == (B,)
    assert out.theta.rsample().shape == (B, P) and out.theta.rsample((2, 3)).shape == (2, 3, B, P)
    assert not out.theta.sample((2,)).requires_grad and theta.requires_grad
    # edge logits are u_i . v_j of the sender and receiver MLPs
    nodes, _ = net.backbone(adj)
    u, v = net.senders(nodes), net.receivers(nodes)
    assert torch.allclose(out.edge_logits[1, 2, 3], u[1, 2] @ v[1, 3], atol=1e-5)


def test_full_head_on_a_nonlinear_layout_is_rejected():
    mlp = MLPGaussian(torch.randn(4, 3, dtype=torch.float64), hidden=2)
    with pytest.raises(ValueError, match="linear models"):
        JSPNetwork(3, 8, mlp.block_index(), mlp.active, FullGaussianHead)


def test_graph_network_matches_a_loop_over_edges():
    """The message table selected by ``adj`` equals the textbook pass: phi_e on concat(e, x_i, x_j) per edge, phi_x on
    (x_i, sum of sent, sum of received), phi_g on (sum of nodes, sum of edges)."""
    d = 4
    bb = make_net(d, "diag", hidden=8).backbone
    adj = random_dags(3, d, seed=1)
    nodes, glob = bb.graph_network(adj)
    x, e = bb.embed.weight, bb.edge_feature
    for b in range(len(adj)):
        sent, received, edge_sum = torch.zeros_like(x), torch.zeros_like(x), torch.zeros_like(e)
        for i, j in adj[b].nonzero().tolist():
            m = bb.edge_mlp(torch.cat([e, x[i], x[j]]))
            sent[i], received[j], edge_sum = sent[i] + m, received[j] + m, edge_sum + m
        ref_nodes = bb.node_mlp(torch.cat([x, sent, received], -1))
        assert torch.allclose(nodes[b], ref_nodes, atol=1e-12)
        assert torch.allclose(glob[b], bb.global_mlp(torch.cat([ref_nodes.sum(0), edge_sum])), atol=1e-12)


def test_attention_matches_scaled_dot_product_attention():
    """The einsum attention equals torch's SDPA on the same per-head queries, keys and values (heads not mixed up)."""
    bb = make_net(5, "diag").backbone
    adj = random_dags(4, 5, seed=2)
    nodes, glob = bb.graph_network(adj)
    B, d, H, k = 4, 5, bb.n_heads, bb.key_size
    q, key, v = bb.qkv(nodes).view(B, d, 3, H, k).permute(2, 0, 3, 1, 4)  # each [B, H, d, k]
    mixed = F.scaled_dot_product_attention(q, key, v).transpose(1, 2).reshape(B, d, H * k)
    ref_nodes, ref_glob = bb.node_norm(bb.attn_out(mixed)), bb.global_norm(glob)
    out_nodes, out_glob = bb(adj)
    assert torch.allclose(out_nodes, ref_nodes, atol=1e-12) and torch.allclose(out_glob, ref_glob, atol=1e-12)


def test_edge_logits_are_permutation_equivariant():
    """Relabelling the nodes (rows of the embedding table and of adj together) permutes the edge logits the same way
    and leaves the stop logit unchanged; relabelling adj alone does not (so the check is not vacuous)."""
    d = 5
    net = make_net(d, "diag")
    adj = random_dags(4, d, seed=3)
    perm = torch.tensor([3, 0, 4, 1, 2])
    relabelled = copy.deepcopy(net)
    with torch.no_grad():
        relabelled.backbone.embed.weight.copy_(net.backbone.embed.weight[perm])
    adj_p = adj[:, perm][:, :, perm]  # new node k is old node perm[k]
    out, out_p = net(adj), relabelled(adj_p)
    assert torch.allclose(out_p.edge_logits, out.edge_logits[:, perm][:, :, perm], atol=1e-10)
    assert torch.allclose(out_p.stop_logit, out.stop_logit, atol=1e-10)
    assert not torch.allclose(net(adj_p).edge_logits, out.edge_logits[:, perm][:, :, perm], atol=1e-3)


@pytest.mark.parametrize("model", MODELS)
def test_initial_head_and_structure_of_U(model):
    """Zero-initialised head: loc = 0, scales / parent diagonals = log 2. Perturbed: U is upper triangular, non-parent
    diagonals are exactly 1, off-diagonals vanish unless both indices are parents of the child."""
    d = 4
    adj = random_dags(6, d, seed=4)
    out = make_net(d, model, perturb=False)(adj)
    assert torch.equal(out.theta.loc, torch.zeros_like(out.theta.loc))
    if model == "diag":
        assert torch.allclose(out.theta.scale, torch.full_like(out.theta.scale, math.log(2)))
        return
    parents = adj.transpose(1, 2)  # [B, j, i]
    eye = torch.eye(d, dtype=adj.dtype)
    initial_diag = torch.where(parents > 0, torch.full_like(parents, math.log(2)), torch.ones_like(parents))
    assert torch.allclose(out.theta.prec_chol, torch.diag_embed(initial_diag))
    U = make_net(d, model)(adj).theta.prec_chol  # [B, j, d, d]
    assert torch.equal(U.tril(-1), torch.zeros_like(U))
    assert torch.equal(U.diagonal(dim1=-2, dim2=-1)[parents == 0], torch.ones(int((parents == 0).sum()), dtype=U.dtype))
    pairs = parents[..., :, None] * parents[..., None, :]
    assert torch.equal((U * (1 - eye))[pairs == 0], torch.zeros(int((pairs == 0).sum()), dtype=U.dtype))
    assert ((U * (1 - eye)).abs()[pairs.triu(1) > 0] > 0).all()


@pytest.mark.parametrize("model", MODELS)
def test_head_outputs_of_node_j_parametrise_column_j(model):
    """With the last layer's weight at 0 and bias ``c``, every node emits ``c``: the first ``d`` entries are the
    locations of its column, so the location of theta[i d + j] is c[i] adj[b, i, j] (a function of the parent i), and
    for "diag" the scales are softplus(c[d + i])."""
    d = 4
    adj = random_dags(5, d, seed=10)
    net = make_net(d, model, perturb=False)
    c = torch.linspace(-1.0, 2.0, net.theta_head.net[-1].out_features, dtype=torch.float64)
    with torch.no_grad():
        net.theta_head.net[-1].bias.copy_(c)
        out = net(adj)
    loc = out.theta.loc.reshape(5, d, d)  # "diag": flat [B, d^2] row-major; "full": already [B, d(i), d(j)]
    assert torch.allclose(loc, c[:d, None] * adj)
    if model == "diag":
        assert torch.allclose(out.theta.scale, F.softplus(c[d:, None]).expand(5, d, d).reshape(5, d * d))


def test_diag_head_scatters_each_node_block_to_the_mlp_layout():
    """The MLP layout (node j's block contiguous at ``block_index[j]``, first-layer columns of non-parents inactive):
    with the last layer's weight at 0 and bias ``c``, theta's location at ``block_index[j, k]`` is ``c[k]`` where active and
    0 elsewhere, its scale ``softplus(c[block + k])``; log_prob is the sum of Normal terms over the active coordinates,
    and samples are 0 on the inactive ones."""
    d, hidden = 3, 2
    mlp = MLPGaussian(torch.randn(4, d, dtype=torch.float64), hidden=hidden)
    block, P = mlp.block, mlp.n_params
    torch.manual_seed(0)
    net = JSPNetwork(d, 8, mlp.block_index(), mlp.active, DiagGaussianHead, n_heads=2, key_size=4).double()
    adj = GRAPHS
    c = torch.linspace(-1.0, 2.0, 2 * block, dtype=torch.float64)
    with torch.no_grad():
        net.theta_head.net[-1].bias.copy_(c)
        out = net(adj)
    on = mlp.active(adj > 0)  # [B, P]
    assert out.theta.loc.shape == (3, P) and torch.equal(out.theta.active, on)
    assert not on.all() and on.any(1).all()  # some inactive first-layer columns, always some active coordinates
    expected_loc = torch.zeros(3, P, dtype=torch.float64)
    expected_scale = torch.zeros(3, P, dtype=torch.float64)
    idx = mlp.block_index()  # [d, block]
    expected_loc[:, idx] = c[:block].expand(3, d, block)
    expected_scale[:, idx] = F.softplus(c[block:]).expand(3, d, block)
    assert torch.allclose(out.theta.loc, torch.where(on, expected_loc, 0.0))
    assert torch.allclose(out.theta.scale, expected_scale)
    torch.manual_seed(1)
    theta = out.theta.rsample((4,))  # [4, B, P]
    assert (theta[:, ~on] == 0).all() and (theta[:, on] != 0).all()
    reference = torch.where(on, Normal(out.theta.loc, out.theta.scale).log_prob(theta), 0.0).sum(-1)
    assert torch.allclose(out.theta.log_prob(theta), reference, atol=1e-10)
    dirty = torch.where(on, theta, float("nan"))
    assert torch.equal(out.theta.log_prob(dirty), out.theta.log_prob(theta))


@pytest.mark.parametrize("model", MODELS)
def test_log_prob_is_the_gaussian_on_the_active_coordinates(model):
    """theta.log_prob = log N(active entries; mean, cov) with the cov of :func:`gaussian_blocks`
    (``MultivariateNormal``; "diag" also against a sum of ``Normal`` terms); the empty graph has log-density 0."""
    net = make_net(3, model)
    adj = torch.cat([GRAPHS, torch.zeros(1, 3, 3, dtype=torch.float64)])
    out = net(adj)
    theta = torch.randn(7, 4, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    log_p = out.theta.log_prob(theta)  # [7, 4]
    for b in range(3):
        flat, mean, cov = gaussian_blocks(out, adj, b)
        active = theta[:, b, flat]  # [7, k]
        assert torch.allclose(log_p[:, b], MultivariateNormal(mean, cov).log_prob(active), atol=1e-10)
        if model == "diag":
            scales = out.theta.scale[b, flat]
            assert torch.allclose(log_p[:, b], Normal(mean, scales).log_prob(active).sum(-1), atol=1e-10)
    assert torch.equal(log_p[:, 3], torch.zeros(7, dtype=torch.float64))


@pytest.mark.parametrize("model", MODELS)
def test_density_integrates_to_one_over_the_active_coordinates(model):
    """Trapezoidal quadrature of exp(theta.log_prob) over +-10 marginal standard deviations of the active entries:
    one edge (a line) and two edges into one child (a plane, correlated for "full"). The other entries of the grid
    points hold noise, which must not matter. A Gaussian's trapezoid error on such a grid is far below 1e-6."""
    with torch.no_grad():
        out = make_net(3, model)(GRAPHS)
    gen = torch.Generator().manual_seed(12)
    for b in (0, 1):
        flat, mean, cov = gaussian_blocks(out, GRAPHS, b)
        axes = [torch.linspace(-10, 10, 401, dtype=torch.float64) * cov[r, r].sqrt() + mean[r] for r in range(len(flat))]
        grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(flat))  # [M, k]
        theta = torch.randn(len(grid), 3, 9, dtype=torch.float64, generator=gen)  # [M, B, P]; noise off the active entries
        theta[:, b, flat] = grid
        density = out.theta.log_prob(theta)[:, b].exp().reshape(*(len(a) for a in axes))
        for a in reversed(axes):
            density = torch.trapezoid(density, a, dim=-1)
        assert abs(float(density) - 1.0) < 1e-6


@pytest.mark.parametrize("model", MODELS)
def test_rsample_has_the_mean_and_covariance_of_the_density(model):
    """Monte Carlo moments of 20000 samples per graph against :func:`gaussian_blocks`, cross-child covariances
    included. Tolerance: 5 standard errors of each estimator, sqrt(S_aa / n) for a mean and
    sqrt((S_aa S_bb + S_ab^2) / n) for a second moment of a Gaussian; with a random seed each comparison would fail
    with probability about 6e-7 (|z| > 5), about 2e-5 for the whole test. The seed is fixed, so it is deterministic."""
    with torch.no_grad():
        out = make_net(3, model)(GRAPHS)
    n = 20000
    torch.manual_seed(6)
    samples = out.theta.rsample((n,))  # [n, B, P]
    for b in range(3):
        flat, mean, cov = gaussian_blocks(out, GRAPHS, b)
        x = samples[:, b, flat]  # [n, k]
        var = cov.diagonal()
        assert ((x.mean(0) - mean).abs() < 5 * (var / n).sqrt()).all()
        centred = x - mean
        second = centred.T @ centred / n
        se = ((var[:, None] * var[None, :] + cov.square()) / n).sqrt()
        assert ((second - cov).abs() < 5 * se).all()


@pytest.mark.parametrize("model", MODELS)
def test_samples_vanish_off_the_edges(model):
    """Entries of theta.rsample off the active coordinates are exactly 0 (non-parents of "full" would otherwise carry
    eps): the samples lie in the support, and a sample moved off it does not."""
    adj = random_dags(8, 5, seed=7)
    on = active_of(adj)  # [8, 25]
    theta = make_net(5, model)(adj).theta
    torch.manual_seed(7)
    samples = theta.rsample((32,))  # [32, 8, 25]
    assert (samples[:, ~on] == 0).all()
    assert (samples[:, on] != 0).all()
    assert theta.support.check(samples).all()
    off = samples.detach().clone()
    off[0, ~on] = 1.0  # every DAG has non-edges (its diagonal at least)
    inside = theta.support.check(off)  # [32, 8]
    assert not inside[0].any() and inside[1:].all()


@pytest.mark.parametrize("model", MODELS)
def test_log_prob_ignores_values_off_the_edges(model):
    """Writing noise, huge values or NaN at the inactive coordinates leaves theta.log_prob (and its gradient) unchanged."""
    adj = random_dags(8, 5, seed=8)
    on = active_of(adj)
    out = make_net(5, model)(adj)
    torch.manual_seed(8)
    theta = out.theta.rsample((4,)).detach()
    reference = out.theta.log_prob(theta)
    for fill in (torch.randn_like(theta), torch.full_like(theta, 1e300), torch.full_like(theta, float("nan"))):
        dirty = torch.where(on, theta, fill).requires_grad_(True)
        log_p = out.theta.log_prob(dirty)
        assert torch.equal(log_p, reference)
        (grad,) = torch.autograd.grad(log_p.sum(), dirty)
        assert torch.isfinite(grad).all() and (grad[:, ~on] == 0).all()
    if model == "diag":  # a scale that underflowed to 0 off the edges (softplus of a very negative output) is ignored too
        underflowed = DiagNormalTheta(out.theta.loc, torch.where(on, out.theta.scale, 0.0), out.theta.active)
        assert torch.equal(underflowed.log_prob(theta), reference)


@pytest.mark.parametrize("model", MODELS)
def test_gradients_reach_the_network_through_reparametrised_samples(model):
    """A reparametrised estimate of KL(P_phi(theta | G) || N(1, I)) on the active entries: every parameter on the
    theta path gets a finite gradient, nonzero for the head's last layer and the node embeddings; the edge and stop
    MLPs get none, nor (for "full", whose head reads node features only) the global MLP and LayerNorm. And gradcheck
    of theta.log_prob through the head's last layer."""
    adj = random_dags(8, 4, seed=9)
    net = make_net(4, model)
    out = net(adj)
    torch.manual_seed(9)
    theta = out.theta.rsample((16,))
    kl = (out.theta.log_prob(theta) + 0.5 * ((theta - 1) ** 2 * active_of(adj)).sum(-1)).mean()
    kl.backward()
    off_path = ("senders", "receivers", "stop") + (("backbone.global_mlp", "backbone.global_norm") if model == "full" else ())
    for name, p in net.named_parameters():
        assert (p.grad is None) if name.startswith(off_path) else torch.isfinite(p.grad).all(), name
    assert net.theta_head.net[-1].weight.grad.abs().sum() > 0 and net.backbone.embed.weight.grad.abs().sum() > 0

    small = make_net(3, model, hidden=4)
    bias = small.theta_head.net[-1].bias
    point = small(GRAPHS).theta.rsample((2,)).detach()

    def log_p(b):
        return torch.func.functional_call(small, {"theta_head.net.2.bias": b}, (GRAPHS,)).theta.log_prob(point)

    assert torch.autograd.gradcheck(log_p, (bias.detach().clone().requires_grad_(True),))


@pytest.mark.parametrize("model", MODELS)
def test_rows_select_graphs_of_the_batch(model):
    """``JSPOutputs.rows`` and ``theta[rows]`` (a slice or an index) equal the outputs of the network on those graphs alone,
    and a sample of the selected rows is scored as the same sample inside the whole batch."""
    adj = random_dags(6, 4, seed=11)
    out = make_net(4, model)(adj)
    torch.manual_seed(11)
    for rows in (slice(1, 4), torch.tensor([5, 0, 2])):
        part, alone = out.rows(rows), make_net(4, model)(adj[rows])
        assert type(part.theta) is type(out.theta) and part.theta.batch_shape == alone.theta.batch_shape
        assert torch.equal(part.theta.active, alone.theta.active)
        for a, b in zip((part.edge_logits, part.stop_logit, part.theta.loc), (alone.edge_logits, alone.stop_logit, alone.theta.loc)):
            assert torch.allclose(a, b, atol=1e-12)
        theta = part.theta.rsample((3,)).detach()
        assert torch.allclose(part.theta.log_prob(theta), alone.theta.log_prob(theta), atol=1e-12)
        whole = torch.zeros(3, len(adj), 16, dtype=adj.dtype)
        whole[:, rows] = theta
        assert torch.allclose(out.theta.log_prob(whole)[:, rows], part.theta.log_prob(theta), atol=1e-12)
