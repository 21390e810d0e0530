"""Policies as densities with respect to reference kernels (Lahlou et al. 2023, section 3).

A forward policy :math:`P_F(s, \\cdot) \\ll \\kappa(s, \\cdot)` is a categorical choice among the
kernel's components (atoms and continuous pieces), then a density ``q_c(u)`` over the chart
coordinates of the chosen piece. Its density w.r.t. :math:`\\kappa(s, \\cdot)` is

.. math:: p(s, x) = \\frac{\\pi_k}{m_k} \\text{ at atom } x_k, \\qquad
   p(s, \\varphi_c(u)) = \\pi_c\\, \\frac{q_c(u)}{|J_c(u)|} \\text{ on piece } c,

so the chart's Jacobian enters every continuous density. Backward policies are the same objects
w.r.t. :math:`\\kappa_b`.
"""
from __future__ import annotations

import functools
from abc import abstractmethod
from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor, nn
from torch.distributions import Beta, Dirichlet, Distribution, Independent, Normal, Uniform

from .kernels import Kernel
from .measures import Measure

__all__ = ["Draw", "KernelDensity", "Policy", "UniformPolicy", "MLPPolicy", "BetaHead", "BetaMixtureHead", "StateFlow", "gumbel_max", "mlp", "tied", "torso"]


class Draw(NamedTuple):
    """Where a draw from a :class:`KernelDensity` landed: the component ``comp [B]`` (atom ``k`` or piece ``K + c``)
    and, per piece, the chart coordinates ``u`` of the rows on it (in row order; ``None`` if none)."""

    comp: Tensor
    u: tuple


CoordinateFamily = Callable[[Tensor], Distribution]
"""``rows [B] bool -> q_c(. | s_b)`` for the selected rows: a piece's coordinate densities, built only where needed."""


class KernelDensity:
    """:math:`P(s_b, \\cdot)` for a batch of states: component logits plus coordinate densities.

    Args:
        measure: the reference measures :math:`\\kappa(s_b, \\cdot)`, ``B`` of them.
        logits: ``[B, K + C]`` unnormalised log-probabilities of the ``K`` atoms and ``C`` pieces
            (absent components are masked out). For flow matching they are log edge flows.
        coords: one :data:`CoordinateFamily` per piece: given a row mask, the distributions over the
            chart coordinates of those rows (batch ``[rows]``, event ``[k]``). They are only built for
            the rows that sample or are located on the piece.
    """

    def __init__(self, measure: Measure, logits: Tensor, coords: Sequence[CoordinateFamily] = ()):
        if len(coords) != len(measure.pieces):
            raise ValueError(f"KernelDensity needs one coordinate family per piece: {len(coords)} for {len(measure.pieces)} pieces")
        mask = measure.component_mask()
        present = mask.any(1)
        if not bool(present.all()):
            raise ValueError(f"the reference kernel is the zero measure at {int((~present).sum())} of {len(mask)} states; a policy is only defined where kappa(s, .) != 0")
        self.measure, self.coords = measure, tuple(coords)
        self.logits = logits.masked_fill(~mask, float("-inf"))
        self.log_probs = torch.log_softmax(self.logits, 1)  # [B, K + C]

    def sample(self, epsilon: float = 0.0, reparametrise: bool = False) -> tuple[Tensor, Tensor]:
        """Draw :math:`x \\sim (1-\\epsilon) P(s, \\cdot) + \\epsilon U(s, \\cdot)` (``U``: :class:`UniformPolicy`).

        Returns the next states ``x [B, D]`` (rows that chose the sink repeat nothing meaningful)
        and ``sink [B]`` bool. With ``reparametrise`` the chart coordinates are drawn with
        ``rsample`` so that ``x`` is differentiable in the policy's parameters (the choice of
        component stays discrete); exploration then is not allowed.
        """
        x, sink, _ = self.draw(epsilon, reparametrise)
        return x, sink

    def draw(self, epsilon: float = 0.0, reparametrise: bool = False) -> tuple[Tensor, Tensor, Draw]:
        """:meth:`sample`, plus the :class:`Draw` (component and chart coordinates) it came from, for :meth:`log_prob_of`."""
        if reparametrise and epsilon > 0:
            raise ValueError("reparametrised sampling draws from the policy itself; epsilon must be 0")
        m = self.measure
        log_probs = self.log_probs.detach()
        explore = None  # rows that move uniformly (epsilon > 0 only)
        if epsilon > 0:
            uniform = uniform_density(m)
            explore = torch.rand(m.batch, device=log_probs.device) < epsilon
            log_probs = torch.where(explore[:, None], uniform.log_probs.to(log_probs.dtype), log_probs)
        comp = gumbel_max(log_probs)
        K = m.atoms.count
        rows = torch.arange(m.batch, device=comp.device)
        k = comp.clamp(max=max(K - 1, 0))
        x = m.atoms.x[rows, k] if K else torch.zeros(m.batch, m.pieces[0].context.shape[1], dtype=m.pieces[0].context.dtype)
        sink = m.atoms.sink[rows, k] & (comp < K) if K else torch.zeros(m.batch, dtype=torch.bool)
        x, us = x.clone(), []
        for c, p in enumerate(m.pieces):
            chosen = comp == K + c
            u = None
            if chosen.any():
                q = self.coords[c](chosen)
                u = q.rsample() if reparametrise else q.sample()
                if explore is not None and explore[chosen].any():
                    u = torch.where(explore[chosen][:, None], uniform.coords[c](chosen).sample().to(u.dtype), u)
                x = x.index_put((chosen.nonzero()[:, 0],), p.chart.forward(p.context[chosen], u).to(x.dtype))
            us.append(u)
        return x, sink, Draw(comp, tuple(us))

    def widened(self, variance: float) -> "KernelDensity":
        """The same density with ``variance`` added to every Gaussian coordinate density (off-policy exploration).

        .. math:: q_c(u) = \\mathcal N(u; m, \\mathrm{diag}(v)) \\;\\to\\; \\mathcal N(u; m, \\mathrm{diag}(v + \\text{variance}))

        in chart coordinates (Lahlou et al. 2023, section 4.2: the exploration noise of the SDE
        samplers). The component probabilities are unchanged; raises on non-Gaussian coordinates.
        """
        if variance < 0:
            raise ValueError(f"widened needs a non-negative extra variance, got {variance}")
        return KernelDensity(self.measure, self.logits, [functools.partial(_widen_rows, c, variance) for c in self.coords])

    def log_prob(self, x: Tensor, sink: Tensor) -> Tensor:
        """:math:`\\log \\frac{dP(s_b,\\cdot)}{d\\kappa(s_b,\\cdot)}(x_b)` ``[B]``; raises if ``x_b`` is outside the kernel's support.

        On piece ``c``: :math:`\\log \\pi_c + \\log q_c(u) - \\log|J_c(u)|` with :math:`u = \\varphi_c^{-1}(x)`.
        """
        return self.log_prob_of(self.locate(x, sink))

    def locate(self, x: Tensor, sink: Tensor) -> Draw:
        """The :class:`Draw` that lands on ``x`` (the component holding it and its chart coordinates), to evaluate
        this density and others on the same kernel at ``x`` without locating it again; raises if ``x_b`` is outside the kernel's support."""
        comp, us = self.measure.locate_coordinates(x, sink)
        outside = comp < 0
        if outside.any():
            i = int(outside.nonzero()[0])
            raise ValueError(f"{int(outside.sum())} transitions lie outside the reference kernel's support (first: to {x[i].tolist()}, sink={bool(sink[i])})")
        return Draw(comp, us)

    def log_prob_of(self, d: Draw) -> Tensor:
        """The log-density ``[B]`` at the points a :class:`Draw` names (a draw of this density or of another on the same kernel), without locating them."""
        comp = d.comp
        K = self.measure.atoms.count
        rows = torch.arange(len(comp), device=comp.device)
        out = self.log_probs[rows, comp]
        if K:
            is_atom = comp < K
            out = out - torch.where(is_atom, self.measure.atoms.log_mass[rows, comp.clamp(max=K - 1)], torch.zeros_like(out))
        for c, p in enumerate(self.measure.pieces):
            on = comp == K + c
            if on.any():
                u = d.u[c]
                density = (self.coords[c](on).log_prob(u) - p.chart.log_abs_det_jacobian(p.context[on], u)).to(out.dtype)
                out = out + torch.zeros_like(out).index_put((on.nonzero()[:, 0],), density)
        return out

    def log_flow(self, x: Tensor, sink: Tensor) -> Tensor:
        """Unnormalised logit of the atom holding ``x``: the log edge flow :math:`\\log F(s \\to x)` (flow matching)."""
        comp = self.measure.locate(x, sink)
        if (comp < 0).any() or (comp >= self.measure.atoms.count).any():
            raise ValueError("log_flow is defined on atoms of the kernel only")
        return self.logits[torch.arange(len(comp)), comp]


def gumbel_max(logits: Tensor) -> Tensor:
    """One index per row of ``logits [..., C]``, :math:`P(j) = \\mathrm{softmax}(\\ell)_j`: :math:`\\arg\\max_j (\\ell_j + G_j)`, :math:`G_j` i.i.d. Gumbel.

    The Gumbel-max trick: exact, and a few elementwise operations where ``torch.multinomial`` costs
    a rollout step more than its policy network. ``-inf`` logits (absent components) are never drawn:
    the uniforms are kept off 0 (``torch.rand`` returns 0 once in ~2^24 draws in float32; its Gumbel
    would be +inf, every score -inf and ``argmax`` the first component, present or not).
    """
    u = torch.rand(logits.shape, dtype=logits.dtype, device=logits.device).clamp_(min=torch.finfo(logits.dtype).tiny)
    return (logits - u.log_().neg_().log_()).argmax(-1)  # in place: log(-log u), no temporaries


def _widen_rows(family: CoordinateFamily, variance: float, rows: Tensor) -> Distribution:
    q = family(rows)
    base = q.base_dist if isinstance(q, Independent) else q
    if not isinstance(base, Normal):
        raise ValueError(f"extra-variance exploration needs Gaussian coordinate densities, got {type(base).__name__}")
    widened = Normal(base.loc, (base.scale.square() + variance).sqrt(), validate_args=False)
    return Independent(widened, q.reinterpreted_batch_ndims) if isinstance(q, Independent) else widened


def _uniform_rows(low: Tensor, high: Tensor, rows: Tensor) -> Distribution:
    n = int(rows.sum())
    return Independent(Uniform(low.expand(n, -1), high.expand(n, -1), validate_args=False), 1)


def _head_rows(head: nn.Module, raw: Tensor, rows: Tensor) -> Distribution:
    return head(raw[rows])


def uniform_density(measure: Measure) -> KernelDensity:
    """Equal probability for each present component, uniform coordinates on each chart's box.

    .. math:: \\pi_k = 1/|\\text{components}|, \\quad q_c(u) = 1/\\lambda(U_c)

    An exact density (it integrates to one against the kernel); uniform w.r.t. the reference
    measure itself when atoms have unit mass and charts have constant Jacobian.
    """
    coords = []
    for p in measure.pieces:
        if not p.chart.domain.bounded:
            raise ValueError("a uniform policy needs bounded chart domains")
        coords.append(functools.partial(_uniform_rows, torch.as_tensor(p.chart.domain.low, dtype=p.context.dtype), torch.as_tensor(p.chart.domain.high, dtype=p.context.dtype)))
    logits = torch.zeros(measure.batch, measure.n_components, dtype=measure.atoms.log_mass.dtype)
    return KernelDensity(measure, logits, coords)


class Policy(nn.Module):
    """A conditional density :math:`P(s, \\cdot)` w.r.t. ``kernel``; ``policy(s)`` is a :class:`KernelDensity`."""

    def __init__(self, kernel: Kernel):
        super().__init__()
        self.kernel = kernel

    def forward(self, s: Tensor) -> KernelDensity:
        m = self.kernel(s)
        logits, coords = self.parameters_at(s, m)
        return KernelDensity(m, logits, coords)

    @abstractmethod
    def parameters_at(self, s: Tensor, measure: Measure) -> tuple[Tensor, list[CoordinateFamily]]:
        """Component logits ``[B, K + C]`` and one :data:`CoordinateFamily` per piece at states ``s``."""


class UniformPolicy(Policy):
    """The fixed uniform policy of :func:`uniform_density` (e.g. the uniform :math:`P_B` of Bengio et al. 2021)."""

    def forward(self, s: Tensor) -> KernelDensity:
        return uniform_density(self.kernel(s))

    def parameters_at(self, s, measure):
        d = uniform_density(measure)
        return d.logits, list(d.coords)


def torso(n_in: int, hidden: int, n_layers: int, act=nn.ELU) -> nn.Sequential:
    """``n_layers`` Linear+activation blocks of width ``hidden`` (empty for ``n_layers = 0``)."""
    layers, width = [], n_in
    for _ in range(n_layers):
        layers += [nn.Linear(width, hidden), act()]
        width = hidden
    return nn.Sequential(*layers)


def _width(body: nn.Sequential, n_in: int) -> int:
    """Output width of a torso: its last Linear's, or the input's when it has none."""
    linears = [m for m in body if isinstance(m, nn.Linear)]
    return linears[-1].out_features if linears else n_in


def mlp(n_in: int, hidden: int, n_layers: int, n_out: int, act=nn.ELU) -> nn.Sequential:
    """A :func:`torso` then a linear head of ``n_out`` (``n_layers = 0``: linear)."""
    body = torso(n_in, hidden, n_layers, act)
    return nn.Sequential(*body, nn.Linear(_width(body, n_in), n_out))


class _EdgeClamped(Distribution):
    """``base`` on ``[0, 1]^k`` with samples and evaluation points clamped to ``[eps, 1 - eps]``.

    A Beta with a concentration below 1 puts mass within float round-off of 0 and 1 (Beta(0.1, 0.1):
    13% beyond 1e-6 of an edge); there a chart's inverse cannot recover ``u`` to the precision its
    log-density needs (an arc maps ``u = 1e-30`` and ``u = 0`` to the same float), so ``log_prob``
    turns infinite or NaN on sampled transitions. Clamping both to ``[eps, 1 - eps]`` keeps sample and
    density on the same representable points; the moved mass is at most ``P(u < eps) + P(u > 1 - eps)``.
    """

    arg_constraints: dict = {}

    def __init__(self, base: Distribution, eps: float):
        self.base, self.eps = base, eps
        super().__init__(batch_shape=base.batch_shape, event_shape=base.event_shape, validate_args=False)

    def sample(self, sample_shape=torch.Size()):
        return self.base.sample(sample_shape).clamp(self.eps, 1 - self.eps)

    def log_prob(self, value):
        return self.base.log_prob(value.clamp(self.eps, 1 - self.eps))


class BetaHead(nn.Module):
    """Product of Betas on ``[0, 1]^k``, concentrations :math:`c_{min} + c_{span}\\,\\mathrm{sigmoid}(\\cdot)`.

    .. math:: q(u) = \\prod_{i=1}^k \\mathrm{Beta}(u_i; \\alpha_i, \\beta_i),\\quad \\alpha_i, \\beta_i \\in [c_{min}, c_{min} + c_{span}]

    A density over chart coordinates (w.r.t. ``du``); :class:`KernelDensity` divides by the chart's
    Jacobian. Coordinates are clamped to ``[edge, 1 - edge]`` (see :class:`_EdgeClamped`); ``edge``
    defaults to 1e-6, about the float32 spacing just below 1.
    """

    def __init__(self, k: int, c_min: float = 0.1, c_span: float = 5.0, edge: float = 1e-6):
        super().__init__()
        self.k, self.c_min, self.c_span, self.edge = k, c_min, c_span, edge

    @property
    def n_params(self) -> int:
        return 2 * self.k

    def _concentrations(self, raw: Tensor) -> Tensor:
        """Concentrations :math:`c_{min} + c_{span}\\,\\mathrm{sigmoid}(\\cdot)` of raw outputs, elementwise (same shape)."""
        return self.c_min + self.c_span * torch.sigmoid(raw)

    def forward(self, raw: Tensor) -> Distribution:
        a, b = self._concentrations(raw).chunk(2, -1)  # [..., 2k] -> alpha, beta [..., k]
        return _EdgeClamped(Independent(Beta(a, b, validate_args=False), 1), self.edge)


class _BetaMixture(Distribution):
    """:math:`q(u) = \\sum_j w_j \\prod_i \\mathrm{Beta}(u_i; \\alpha_{ji}, \\beta_{ji})`, :math:`w = \\mathrm{softmax}(\\ell)`, built lazily.

    The law of ``MixtureSameFamily(Categorical(logits), Independent(Beta(alpha, beta), 1))``, which a
    rollout would build at every step and whose ``sample`` draws all ``C`` components at every row.
    Here construction stores the parameters (``logits [..., C]`` and ``conc [..., C, k, 2]``, the pairs
    :math:`(\\alpha, \\beta)`); ``sample`` draws the index :math:`j \\sim w` and then the Betas of component
    ``j`` only; ``log_prob`` is the log-sum-exp over components of the Beta log-densities. Both go through
    the library's ``Dirichlet`` on :math:`(u, 1 - u)`, which is what its ``Beta`` does (without stacking
    :math:`\\alpha` and :math:`\\beta` again at every call).
    """

    arg_constraints: dict = {}

    def __init__(self, logits: Tensor, conc: Tensor):
        self.logits, self.conc = logits, conc
        super().__init__(batch_shape=logits.shape[:-1], event_shape=conc.shape[-2:-1], validate_args=False)

    def sample(self, sample_shape=torch.Size()):
        with torch.no_grad():
            j = gumbel_max(self.logits.expand(*torch.Size(sample_shape), *self.logits.shape))  # [*S, *batch]
            index = j[..., None, None, None].expand(*j.shape, 1, *self.conc.shape[-2:])
            picked = self.conc.expand(*j.shape, *self.conc.shape[-3:]).gather(-3, index).squeeze(-3)  # [*S, *batch, k, 2]
            return Dirichlet(picked, validate_args=False).sample()[..., 0]

    def log_prob(self, value: Tensor) -> Tensor:
        v = value.unsqueeze(-2)  # [..., 1, k]: against every component
        per_component = Dirichlet(self.conc, validate_args=False).log_prob(torch.stack([v, 1 - v], -1)).sum(-1)
        return torch.logsumexp(torch.log_softmax(self.logits, -1) + per_component, -1)


class BetaMixtureHead(BetaHead):
    """A mixture of ``n_components`` products of Betas on ``[0, 1]^k`` (the quarter-disc policies, Lahlou et al. 2023 section 4.1).

    .. math:: q(u) = \\sum_{j=1}^{C} w_j \\prod_{i=1}^k \\mathrm{Beta}(u_i; \\alpha_{ji}, \\beta_{ji}),\\quad w = \\mathrm{softmax}(\\ell)

    Raw outputs: ``C`` mixture logits, then ``2 k C`` concentration pre-activations (all ``alpha``
    then all ``beta``, component-major). Same squashing and edge clamp as :class:`BetaHead`.
    """

    def __init__(self, k: int, n_components: int, c_min: float = 0.1, c_span: float = 5.0, edge: float = 1e-6):
        super().__init__(k, c_min, c_span, edge)
        self.n_components = n_components

    @property
    def n_params(self) -> int:
        return self.n_components * (1 + 2 * self.k)

    def forward(self, raw: Tensor) -> Distribution:
        C = self.n_components
        logits, conc = raw[..., :C], raw[..., C:]
        pairs = conc.unflatten(-1, (2, C, self.k)).movedim(-3, -1)  # [..., C, k, 2]: (alpha, beta) of each coordinate
        return _EdgeClamped(_BetaMixture(logits, self._concentrations(pairs)), self.edge)


class MLPPolicy(Policy):
    """A torso on ``encode(s)`` and a linear layer giving atom and piece logits, then one head per piece.

    Args:
        kernel: the reference kernel the density is taken against.
        encode: state features ``[B, F]``.
        n_in: ``F``.
        n_atoms: number of atom slots ``K`` the kernel returns (fixed per space).
        heads: one coordinate head per piece (``n_params`` raw outputs -> Distribution).
        hidden, n_layers: the torso's width and number of Linear+ELU blocks.
        shared_torso: another policy's torso to use instead of a new one (e.g. a learned P_B tied
            to P_F, Lahlou et al. 2023 section 4.1); its parameters are then trained by both.
        source: when given, the raw outputs at this state are free parameters (initialised to 0)
            instead of the network's, as the public quarter-disc code does at :math:`s_0`.
    """

    def __init__(self, kernel: Kernel, encode: Callable[[Tensor], Tensor], n_in: int, n_atoms: int, heads: Sequence[nn.Module] = (), hidden: int = 128, n_layers: int = 2, shared_torso: nn.Sequential | None = None, source: Tensor | None = None):
        super().__init__(kernel)
        self.encode, self.n_atoms = encode, n_atoms
        self.heads = nn.ModuleList(heads)
        n_out = n_atoms + len(heads) + sum(h.n_params for h in heads)
        self.torso = shared_torso if shared_torso is not None else torso(n_in, hidden, n_layers)
        self.out = nn.Linear(_width(self.torso, n_in), n_out)
        self.register_buffer("source", source)
        self.source_out = nn.Parameter(torch.zeros(n_out)) if source is not None else None

    def forward(self, s: Tensor, features: Tensor | None = None) -> KernelDensity:
        """The density at ``s``; ``features`` are :meth:`features` of ``s`` when already computed (a tied policy's pass)."""
        m = self.kernel(s)
        return KernelDensity(m, *self.parameters_at(s, m, features))

    def _at_source(self, s: Tensor) -> Tensor | None:
        return (s == self.source.to(s.dtype)).all(1) if self.source is not None else None

    def features(self, s: Tensor, at_source: Tensor | None = None) -> Tensor:
        """The torso's output ``[B, H]`` at ``s``; zero at the source rows (``at_source``, found when not given), whose raw outputs are free parameters (the torso skips them)."""
        at_source = self._at_source(s) if at_source is None else at_source
        if at_source is None or not at_source.any():
            return self.torso(self.encode(s))
        inner = (~at_source).nonzero()[:, 0]
        h = self.torso(self.encode(s[inner]))
        return torch.zeros(len(s), h.shape[1], dtype=h.dtype, device=h.device).index_put((inner,), h)

    def parameters_at(self, s, measure, features: Tensor | None = None):
        if measure.atoms.count != self.n_atoms or len(measure.pieces) != len(self.heads):
            raise ValueError(f"MLPPolicy has {self.n_atoms} atom logits and {len(self.heads)} heads, but its kernel returns {measure.atoms.count} atom slots and {len(measure.pieces)} pieces")
        at_source = self._at_source(s)
        n_source = 0 if at_source is None else int(at_source.sum())
        if 0 < n_source == len(s):  # the first step of a rollout: free parameters only, no network pass
            out = self.source_out.expand(len(s), -1)
        else:
            out = self.out(self.features(s, at_source) if features is None else features)
            if n_source:
                out = torch.where(at_source[:, None], self.source_out.expand_as(out), out)
        n_logits = self.n_atoms + len(self.heads)
        logits, rest = out[:, :n_logits], out[:, n_logits:]
        coords = []
        for h in self.heads:
            coords.append(functools.partial(_head_rows, h, rest[:, : h.n_params]))
            rest = rest[:, h.n_params :]
        return logits, coords


def tied(pf: Policy, pb: Policy) -> bool:
    """Whether ``pb`` shares ``pf``'s torso and state encoding, so that one :meth:`MLPPolicy.features` pass serves both."""
    return isinstance(pf, MLPPolicy) and isinstance(pb, MLPPolicy) and pf.torso is pb.torso and pf.encode is pb.encode


class StateFlow(nn.Module):
    """:math:`\\log F(s)`, a log-density of the state flow w.r.t. :math:`\\nu`, from an MLP on ``encode(s)``."""

    def __init__(self, encode: Callable[[Tensor], Tensor], n_in: int, hidden: int = 128, n_layers: int = 2):
        super().__init__()
        self.encode = encode
        self.net = mlp(n_in, hidden, n_layers, 1)

    def forward(self, s: Tensor) -> Tensor:
        return self.net(self.encode(s))[:, 0]
