"""The conditional mode of one node's parameters and its Laplace local marginal, cached per (node, parent set).

Every CPD model's reward is a sum of per-node terms (:mod:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base`); node :math:`j` with
parent set :math:`P` (bitmask ``code``) contributes, over its :math:`k` active coordinates :math:`u = \\theta_j`,

.. math:: \\ell_{jP}(u) = \\log P(x_j \\mid X_P, u) + \\log \\mathcal N(u; 0, \\sigma_0^2 I_k),

which depends on nothing else. Its maximiser :math:`u^*` (the conditional mode of :math:`\\theta_j` given :math:`G` and
the data, whatever the other nodes' parent sets), the negative Hessian :math:`\\Lambda = -\\nabla^2 \\ell_{jP}(u^*)`
and the Laplace approximation of the local marginal (Tierney and Kadane 1986, eq. 2.1; MacKay 1992, eq. 2.7)

.. math:: \\log P(x_j \\mid X_P) = \\log \\int e^{\\ell_{jP}(u)} du \\approx \\ell_{jP}(u^*) + \\tfrac k2 \\log 2\\pi - \\tfrac12 \\log\\det \\Lambda

are a deterministic, measurable function of the key ``code * d + j``: the solver starts from ``starts`` draws of the
prior seeded by the key alone and keeps the best, so the cache answers the same whatever order the graphs arrive in.
For a linear-Gaussian node :math:`\\ell` is quadratic and all three are exact (JSP-GFN eq. D.24).

The solver is Levenberg-Marquardt on the exact Hessian (Nocedal and Wright 2006, section 10.3, with the Newton matrix
in place of the Gauss-Newton one): :math:`\\delta = (\\Lambda + \\lambda I)^{-1} \\nabla \\ell`, accepted where it raises
:math:`\\ell`, per key and start (:func:`maximise`). :math:`\\Lambda` is the exact Hessian (autograd,
forward-over-reverse), not its Gauss-Newton approximation; its eigenvalues below the prior's precision
:math:`1/\\sigma_0^2` (which a Gauss-Newton matrix never has; the exact one only off a maximum or through the
residuals' second-order term) are raised to it before the determinant and the diagonal are read (:func:`laplace_terms`).

Limits. An MLP's posterior has many modes (at least the :math:`H!` permutations of the hidden units): the Laplace
marginal is that of the mode found, not their sum, and its error is at least the log of the number of equivalent modes;
the mode itself is the best of ``starts`` local searches, not a certified global maximum.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from gflownet_measure.gaussian import LOG_2PI

__all__ = ["LaplaceLocal", "LaplaceCache", "maximise", "laplace_terms", "node_problem"]

SEED_SALT = 0x5DEECE66D
"""Added to a key to seed its starts (any fixed integer: it only keeps the seeds apart from small ones used elsewhere)."""


class LaplaceLocal(NamedTuple):
    """Per key, in node ``j``'s block layout (``[m, block]``, 0 at the inactive coordinates):"""

    mode: Tensor  # [m, block]: u*
    precision: Tensor  # [m, block]: Lambda_pp (1 / sigma_0^2 at the inactive coordinates)
    log_marginal: Tensor  # [m]: the Laplace log P(x_j | X_P)


def maximise(objective: Callable[[Tensor], Tensor], u0: Tensor, iterations: int, memory: int = 10, tries: int = 10) -> tuple[Tensor, Tensor]:
    """Batched L-BFGS ascent of independent problems from ``u0 [B, k]``: ``(u [B, k], f(u) [B])``.

    ``objective(u [B, k]) -> [B]`` float64, row ``b`` a function of ``u[b]`` alone. Per row, the two-loop recursion of
    Nocedal and Wright (2006, algorithm 7.4) over the last ``memory`` pairs :math:`(s, y)` gives the direction
    :math:`p = H \\nabla f` (:math:`H_0 = \\frac{s^\\top y}{y^\\top y} I`, or a unit step in the gradient's largest coordinate
    before the first pair), and a backtracking line search takes the first :math:`\\alpha \\in \\{1, \\frac12, \\dots\\}` (``tries``
    halvings) with :math:`f(u + \\alpha p) \\ge f(u) + 10^{-4} \\alpha\\, p^\\top \\nabla f` (Armijo), not the strong-Wolfe search
    of the book: a pair with :math:`s^\\top y \\le 0`, which Armijo alone does not exclude, is not stored. A row whose slope
    :math:`p^\\top \\nabla f` is below :math:`10^{-12} (1 + |f|)` (converged to rounding), or whose search fails, stays where
    it is for the remaining steps. ``iterations`` steps, no early stop: every row takes the same path whatever the others
    do (rows are never mixed).
    """
    B, k = u0.shape
    u = u0.detach()
    f, g = _value_and_grad(objective, u)
    S = torch.zeros(B, memory, k, dtype=torch.float64)  # newest pair first
    Y = torch.zeros_like(S)
    rho = torch.zeros(B, memory, dtype=torch.float64)  # 1 / s^T y, 0 for an empty slot
    stalled = torch.zeros(B, dtype=torch.bool)
    for _ in range(iterations if k else 0):  # (no coordinates: nothing to move)
        q, alphas = g.clone(), []
        for m in range(memory):  # (the pairs of an ascent: s a step, y = -(change of the gradient))
            a = rho[:, m] * (S[:, m] * q).sum(-1)
            q = q - a[:, None] * Y[:, m]
            alphas.append(a)
        sy, yy = 1.0 / rho[:, 0].clamp(min=1e-300), (Y[:, 0] * Y[:, 0]).sum(-1)
        gamma = torch.where(rho[:, 0] > 0, sy / yy.clamp(min=1e-300), 1.0 / g.abs().amax(-1).clamp(min=1e-300))
        r = gamma[:, None] * q
        for m in reversed(range(memory)):
            b = rho[:, m] * (Y[:, m] * r).sum(-1)
            r = r + (alphas[m] - b)[:, None] * S[:, m]
        slope = (r * g).sum(-1)
        step, done = torch.zeros(B, dtype=torch.float64), stalled | (slope <= 1e-12 * (1 + f.abs()))  # converged to rounding, or not an ascent direction
        alpha = torch.ones(B, dtype=torch.float64)
        with torch.no_grad():
            for _ in range(tries):
                ok = ~done & (objective(u + alpha[:, None] * r) >= f + 1e-4 * alpha * slope)
                step, done = torch.where(ok, alpha, step), done | ok
                if bool(done.all()):
                    break
                alpha = alpha / 2
        moved = step > 0
        stalled = ~moved
        u_new = u + step[:, None] * r
        f_new, g_new = _value_and_grad(objective, u_new)
        s, y = u_new - u, g - g_new
        keep = moved & ((s * y).sum(-1) > 1e-12 * s.norm(dim=-1) * y.norm(dim=-1))
        S = torch.where(keep[:, None, None], torch.cat([s[:, None], S[:, :-1]], 1), S)
        Y = torch.where(keep[:, None, None], torch.cat([y[:, None], Y[:, :-1]], 1), Y)
        rho = torch.where(keep[:, None], torch.cat([1.0 / (s * y).sum(-1, keepdim=True).clamp(min=1e-300), rho[:, :-1]], 1), rho)
        u, f, g = torch.where(moved[:, None], u_new, u), torch.where(moved, f_new, f), torch.where(moved[:, None], g_new, g)
    return u, f


def _value_and_grad(objective: Callable[[Tensor], Tensor], u: Tensor) -> tuple[Tensor, Tensor]:
    """``(f [B], grad f [B, k])`` of independent rows (reverse mode on their sum)."""
    with torch.enable_grad():
        x = u.detach().clone().requires_grad_(True)
        value = objective(x)
        (grad,) = torch.autograd.grad(value.sum(), x)
    return value.detach(), grad


def neg_hessian(objective: Callable[[Tensor], Tensor], u: Tensor) -> Tensor:
    """:math:`-\\nabla^2 f` ``[B, k, k]`` of independent rows at ``u [B, k]``: ``k`` forward-mode derivatives of the gradient
    (forward over reverse), one per coordinate, all rows at once (their Hessian is block-diagonal), four coordinates at a time."""
    u = u.detach()
    if not u.shape[1]:
        return u.new_zeros(*u.shape, 0)

    def grad(x: Tensor) -> Tensor:
        return torch.func.grad(lambda y: objective(y).sum())(x)

    basis = torch.eye(u.shape[1], dtype=torch.float64)[:, None, :].expand(-1, u.shape[0], -1)  # [k, B, k]
    columns = torch.func.vmap(lambda v: torch.func.jvp(grad, (u,), (v,))[1], chunk_size=4)(basis)  # [k, B, k]
    return -columns.permute(1, 2, 0)


def laplace_terms(f: Tensor, H: Tensor, valid: Tensor, prior_var: float) -> tuple[Tensor, Tensor]:
    """``(log marginal [B], Lambda_pp [B, k])``: :math:`f + \\frac k2 \\log 2\\pi - \\frac12 \\log\\det \\Lambda` and the diagonal of
    :math:`\\Lambda` (``H [B, k, k]``), its eigenvalues raised to at least :math:`1/\\sigma_0^2`, on the ``valid [B, k]`` coordinates
    (the padding's rows and columns are replaced by the prior's, and its :math:`\\log 2\\pi\\sigma_0^2` removed)."""
    pair = valid[:, :, None] & valid[:, None, :]
    prior = 1.0 / prior_var
    H = torch.where(pair, H, torch.diag_embed(torch.full(valid.shape, prior, dtype=torch.float64)))
    eig, vec = torch.linalg.eigh(0.5 * (H + H.mT))
    eig = eig.clamp(min=prior)
    diag = torch.einsum("bpe,be,bpe->bp", vec, eig, vec)
    k = valid.sum(-1, dtype=torch.float64)
    padding = valid.shape[1] - k
    log_marginal = f + 0.5 * k * LOG_2PI - 0.5 * (eig.log().sum(-1) - padding * math.log(prior))
    return log_marginal, diag


def node_problem(
    node_log_likelihood: Callable, block_index: Tensor, active: Callable[[Tensor], Tensor], d: int, prior_var: float, nodes: Tensor, codes: Tensor
):
    """The objective :math:`\\ell_{jP}` of the module docstring for the keys ``(nodes [B], codes [B])`` over their active
    coordinates packed to the left: ``(objective, index [B, k], valid [B, k])``, ``index`` the positions in node ``j``'s
    block (0 in the padding, where ``valid`` is False and the coordinate is held at 0).

    ``node_log_likelihood(nodes, parents [B, d] bool, blocks [B, block], rows)`` is a model's own node term
    (:meth:`~gflownet_measure.jsp_gfn.bayesnets.cpds.MaskedMLP.node_log_likelihood`), ``active(adj)`` its active coordinates."""
    parents = (codes[:, None] >> torch.arange(d)) & 1 > 0  # [B, d]
    adj = torch.zeros(len(nodes), d, d, dtype=torch.bool)
    adj[torch.arange(len(nodes))[:, None], torch.arange(d), nodes[:, None]] = parents  # column j: the parents of j
    on = active(adj).gather(1, block_index[nodes])  # [B, block]
    k = int(on.sum(1).max()) if len(nodes) else 0
    order = torch.sort((~on).to(torch.int8), dim=1, stable=True).indices[:, :k]  # the active positions first, in order
    valid = on.gather(1, order)
    index = torch.where(valid, order, 0)
    block = on.shape[1]

    def objective(u: Tensor) -> Tensor:  # u [..., B, k] -> [..., B]
        u = torch.where(valid, u, 0.0)
        blocks = torch.zeros(*u.shape[:-1], block, dtype=torch.float64).scatter_add(-1, index.expand_as(u), u)
        lead = blocks.numel() // (len(nodes) * block)
        ll = node_log_likelihood(nodes.repeat(lead), parents.repeat(lead, 1), blocks.reshape(-1, block)).reshape(u.shape[:-1])
        return ll - 0.5 * u.square().sum(-1) / prior_var - 0.5 * valid.sum(-1) * (LOG_2PI + math.log(prior_var))

    return objective, index, valid


class LaplaceCache:
    """:class:`LaplaceLocal` per key ``code * d + j`` of a CPD ``model`` with a node term (``model.node_log_likelihood``,
    :class:`~gflownet_measure.jsp_gfn.bayesnets.cpds.MaskedMLP`), over the data rows ``rows`` (all when ``None``), each computed once.

    Args:
        model: the CPD model.
        rows: ``[M]`` long, the data rows read (fixed for the cache's life), or ``None``.
        starts: prior draws the solver starts from, per key.
        iterations: Levenberg-Marquardt steps per start (:func:`maximise`).
        chunk: keys solved together, always this many (a smaller batch is filled with repeats; :meth:`_solve`). Memory:
            about ``4 * chunk * starts`` times one node's hidden layer (the Hessian, four coordinates at a time).
    """

    def __init__(self, model, rows: Tensor | None = None, starts: int = 3, iterations: int = 30, chunk: int = 64):
        if starts < 1 or iterations < 0 or chunk < 1:
            raise ValueError(f"LaplaceCache: starts >= 1, iterations >= 0 and chunk >= 1; got {starts}, {iterations}, {chunk}")
        self.model, self.rows, self.starts, self.iterations, self.chunk = model, rows, int(starts), int(iterations), int(chunk)
        self._index: dict[int, int] = {}
        block = model.block
        self._mode = torch.empty(0, block, dtype=torch.float64)
        self._precision = torch.empty(0, block, dtype=torch.float64)
        self._log_marginal = torch.empty(0, dtype=torch.float64)

    def __call__(self, nodes: Tensor, codes: Tensor) -> LaplaceLocal:
        """The :class:`LaplaceLocal` of the keys ``(nodes [m], codes [m])``, solving the missing ones."""
        d = self.model.d
        keys = (codes.cpu() * d + nodes.cpu()).tolist()
        missing = sorted({key for key in keys if key not in self._index}, key=lambda key: ((key // d).bit_count(), key))
        for size in sorted({(key // d).bit_count() for key in missing}):
            group = [key for key in missing if (key // d).bit_count() == size]
            for start in range(0, len(group), self.chunk):
                with torch.inference_mode(False):  # also when asked inside an inference-mode rollout: the solves differentiate
                    self._solve(group[start : start + self.chunk])
        at = torch.tensor([self._index[key] for key in keys], dtype=torch.long)
        return LaplaceLocal(self._mode[at], self._precision[at], self._log_marginal[at])

    def log_marginal(self, nodes: Tensor, codes: Tensor) -> Tensor:
        """The Laplace :math:`\\log P(x_j \\mid X_P)` ``[m]`` float64: a ``score`` for :class:`~gflownet_measure.jsp_gfn.bayesnets.scores.LocalScores`."""
        return self(nodes, codes).log_marginal

    def for_graphs(self, adj: Tensor) -> tuple[Tensor, Tensor]:
        """``(mode [..., P], Lambda_pp [..., P])`` float64 of the graphs ``adj [..., d, d]``: each node's block from its key."""
        model, d = self.model, self.model.d
        codes = (adj.bool().long().cpu() << torch.arange(d)[:, None]).sum(-2)  # [..., d]
        local = self(torch.arange(d).expand_as(codes).flatten(), codes.flatten())
        index = model.block_index().flatten()
        mode = torch.zeros(codes.numel() // d, model.n_params, dtype=torch.float64)
        precision = torch.full_like(mode, 1.0 / model.prior_var)
        mode[:, index] = local.mode.reshape(-1, d * model.block)
        precision[:, index] = local.precision.reshape(-1, d * model.block)
        shape = (*adj.shape[:-2], model.n_params)
        return mode.reshape(shape).to(adj.device), precision.reshape(shape).to(adj.device)

    def _solve(self, new: list[int]) -> None:
        """Solve the keys ``new`` (at most ``chunk``, none cached, one parent count) and append them.

        The batch is always ``chunk`` keys of one parent count (``new`` repeated to fill it): every row then runs the same
        kernels on the same shapes, whatever else is in its batch (the batched products' rounding depends on their shapes,
        and a nonconvex search can amplify it to another mode: measured at 40 steps). What remains is the rounding of a
        key's position in the batch: measured up to 4e-8 relative (tests/jsp_gfn/test_dag_laplace.py)."""
        model, d, S = self.model, self.model.d, self.starts
        keys = torch.tensor(new)[torch.arange(self.chunk) % len(new)]
        nodes, codes = keys % d, keys // d
        objective, index, valid = node_problem(
            lambda n, p, b: model.node_log_likelihood(n, p, b, self.rows), model.block_index(), model.active, d, model.prior_var, nodes, codes
        )
        draws = torch.stack(
            [torch.randn(S, model.block, generator=torch.Generator().manual_seed(SEED_SALT + key), dtype=torch.float64) for key in keys.tolist()], 1
        )
        u0 = torch.where(valid, draws.gather(2, index.expand(S, -1, -1)), 0.0) * model.prior_var**0.5  # [S, m, k]

        def stacked(u: Tensor) -> Tensor:  # the S starts as rows of one batch
            return objective(u.unflatten(0, (S, -1))).flatten()

        u, f = (t.unflatten(0, (S, -1)) for t in maximise(stacked, u0.flatten(0, 1), self.iterations))
        pick = (_first_best(f), torch.arange(len(keys)))
        log_marginal, diag = laplace_terms(f[pick], neg_hessian(objective, u[pick]), valid, model.prior_var)
        key_of, slot = valid.nonzero().unbind(1)
        mode = torch.zeros(len(keys), model.block, dtype=torch.float64)
        precision = torch.full_like(mode, 1.0 / model.prior_var)
        mode[key_of, index[key_of, slot]] = u[pick][key_of, slot]
        precision[key_of, index[key_of, slot]] = diag[key_of, slot]
        m = len(new)
        self._index.update({key: len(self._log_marginal) + i for i, key in enumerate(new)})
        self._mode, self._precision = torch.cat([self._mode, mode[:m]]), torch.cat([self._precision, precision[:m]])
        self._log_marginal = torch.cat([self._log_marginal, log_marginal[:m]])


def _first_best(f: Tensor, rtol: float = 1e-9) -> Tensor:
    """``[m]`` long: per column of ``f [S, m]``, the first start within ``rtol`` (relative) of the best, so that starts that
    reach one mode (or its hidden-unit permutations) to rounding pick the same one whatever the rounding."""
    top = f.max(0).values
    close = f >= top - rtol * (1 + top.abs())
    return close.to(torch.int8).argmax(0)
