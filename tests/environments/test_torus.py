"""The torus and the hybrid torus (Lahlou et al. 2023, section 4.3): R6's normaliser and basins by quadrature, the hybrid
torus's exact terminal density against a closed form and against its own samples, and the settings' one-line errors."""
import itertools
import math

import numpy as np
import pytest
import torch
from scipy.special import ive

from gflownet_measure.densities import Policy
from gflownet_measure.environments import hybrid_torus, torus
from gflownet_measure.environments.torus_targets import grid_log_normaliser, periodic_grid, r6
from gflownet_measure.heads import VonMisesMixture
from gflownet_measure.rollout import sample_forward


def test_r6_normaliser_and_six_equal_basins_by_quadrature():
    """Z = (2 pi)^2 E[(sin 3a + cos 2b + 2)^3] = 4 pi^2 (8 + 6 (1/2 + 1/2)) = 56 pi^2 (the cross and odd moments vanish).
    R6 has degree 9, so the 12-point periodic grid is exact (to round-off); on the 120-point grid (basin edges on cell
    edges) each of the six basins holds exactly 1/6 by symmetry."""
    target = r6(2)
    for G in (12, 120):
        assert grid_log_normaliser(target.log_reward(periodic_grid(2, G)), 2, G) == pytest.approx(math.log(56 * math.pi**2), abs=1e-12)
    points = periodic_grid(2, 120)
    p = torch.softmax(target.log_reward(points), 0)
    region = target.region_of(points)
    assert len(target.regions) == 6
    assert torch.allclose(torch.stack([p[region == j].sum() for j in range(6)]), torch.full((6,), 1 / 6, dtype=torch.float64), atol=1e-12, rtol=0)
    modes = torch.tensor([[math.pi / 6 + 2 * math.pi * a / 3, math.pi * b] for a in range(3) for b in range(2)], dtype=torch.float64)
    assert torch.allclose(target.log_reward(modes), torch.full((6,), 3 * math.log(4.0), dtype=torch.float64))  # R = 64 at each mode
    assert sorted(target.region_of(modes).tolist()) == list(range(6))


class FixedPolicy(Policy):
    """A state-independent hybrid-torus policy: choice probabilities ``softmax(logits)`` over the present components
    ``[stay, torus, circle 1..n]``, one von Mises per piece (``loc`` measured from the box's low end, as the heads do)."""

    def __init__(self, kernel, logits, loc0, kappa0, loc, kappa):
        super().__init__(kernel)
        self.logits, self.loc0, self.kappa0, self.loc, self.kappa = logits, loc0, kappa0, loc, kappa

    def parameters_at(self, s, measure):
        B, n = len(s), len(self.loc)

        def family(loc, kappa, k):
            low, high = torch.full((k,), -math.pi, dtype=torch.float64), torch.full((k,), math.pi, dtype=torch.float64)
            return lambda rows: VonMisesMixture(torch.zeros(int(rows.sum()), k, 1, dtype=torch.float64), loc.expand(int(rows.sum()), k, 1), kappa.expand(int(rows.sum()), k, 1), low, high)

        torus_family = family(self.loc0.reshape(1, n, 1), self.kappa0.reshape(1, n, 1), n)
        circles = [family(self.loc[i].reshape(1, 1, 1), self.kappa[i].reshape(1, 1, 1), 1) for i in range(n)]
        return self.logits.expand(B, -1), [torus_family, *circles]


def _von_mises_sum_density(theta, mean, amplitudes, K=60):
    """The density on the circle whose Fourier coefficients are ``amplitudes[k] e^{-ik mean}``: (1 + 2 sum_k A_k cos k(theta - mean)) / 2 pi."""
    k = np.arange(1, K + 1)
    return (1 + 2 * (amplitudes[k][None] * np.cos(k[None] * (theta[:, None] - mean))).sum(1)) / (2 * math.pi)


def test_hybrid_terminal_density_matches_the_closed_form():
    """P_T of a state-independent policy on the hybrid 2-torus with T = 4: the three moves after the first are enumerated
    (multinomial counts of stay / move angle 1 / move angle 2) and each angle is a von Mises convolved with its increments, whose
    Fourier coefficients multiply (I_k(kappa)/I_0(kappa) e^{-ik mu}). :func:`terminal_density` integrates on a 32-point periodic grid;
    at kappa <= 3 the trapezoidal error is ~I_32(3)/I_0(3) ~ 1e-26 and the series is cut at 60 terms (below 1e-60). What is left is
    torch's polynomial approximation of log I_0 in the von Mises log-density (relative error up to 3.3e-8 per factor, at most four
    factors on a path): tolerance 2e-7, relative."""
    n, T, G = 2, 4, 32
    graph = hybrid_torus.make_graph(torus.TorusConfig(n_dim=n, n_steps=T))
    logits = torch.tensor([[0.3, 0.0, -0.4, 0.8]], dtype=torch.float64)  # [stay, torus, circle 1, circle 2]
    loc0, kappa0 = torch.tensor([0.5, 2.0], dtype=torch.float64), torch.tensor([1.5, 3.0], dtype=torch.float64)
    loc, kappa = torch.tensor([2.8, 3.6], dtype=torch.float64), torch.tensor([2.0, 1.0], dtype=torch.float64)
    pf = FixedPolicy(graph.kappa, logits, loc0, kappa0, loc, kappa)
    p_T = hybrid_torus.terminal_density(graph, pf, G).numpy()
    assert float(p_T.sum() * (2 * math.pi / G) ** 2) == pytest.approx(1.0, abs=2e-7)

    choice = torch.softmax(logits[0, [0, 2, 3]], 0).numpy()  # stay, move 1, move 2
    amp = lambda c: ive(np.arange(61), c) / ive(0, c)  # noqa: E731  A_k(kappa) = I_k / I_0
    theta = periodic_grid(n, G).numpy()
    exact = np.zeros(len(theta))
    for m in itertools.product(range(T), repeat=3):
        if sum(m) != T - 1:
            continue
        weight = math.factorial(T - 1) / math.prod(math.factorial(v) for v in m) * np.prod(choice ** np.array(m))
        per_angle = []
        for i in range(n):  # theta_i = (a0 - pi) + sum of m_i increments (a_j - pi), angles a measured from -pi
            mean = float(loc0[i]) - math.pi + m[1 + i] * (float(loc[i]) - math.pi)
            per_angle.append(_von_mises_sum_density(theta[:, i], mean, amp(float(kappa0[i])) * amp(float(kappa[i])) ** m[1 + i]))
        exact += weight * per_angle[0] * per_angle[1]
    assert np.abs(p_T / exact - 1).max() < 2e-7


def test_hybrid_terminal_density_of_a_network_policy_matches_its_samples():
    """An untrained MLP policy (T = 3): P_T by quadrature integrates to one, and 4,000 rollouts fall into the 8 x 8 cells of the
    torus as P_T says (chi-square with 63 degrees of freedom below 120, a 1e-5 tail: seeded, a correct sampler fails ~1e-5)."""
    torch.manual_seed(0)
    config = torus.TorusConfig(n_steps=3, hidden=32, n_layers=1, c_min=1.0)
    graph = hybrid_torus.make_graph(config)
    pf, _ = hybrid_torus.make_policies(graph, config)
    G = 32
    p_T = hybrid_torus.terminal_density(graph, pf, G)
    assert float(p_T.sum()) * (2 * math.pi / G) ** 2 == pytest.approx(1.0, abs=1e-6)  # float32 network, float64 quadrature
    cells = (p_T.reshape(8, 4, 8, 4).sum((1, 3)) * (2 * math.pi / G) ** 2).reshape(-1)  # grid rows j -> cell j // 4
    with torch.no_grad():
        x = sample_forward(graph, pf, 4000).terminal[:, :2]
    index = (x / (2 * math.pi / 8)).long().clamp(max=7)
    counts = torch.bincount(index[:, 0] * 8 + index[:, 1], minlength=64).double()
    expected = 4000 * cells
    assert float(((counts - expected) ** 2 / expected).sum()) < 120


@pytest.mark.parametrize("bad, message", [({"temperature": 0.0}, "temperature"), ({"temperature": -5.0}, "temperature"), ({"target": "r7"}, "target")])
def test_bad_settings_are_one_line_errors(bad, message):
    with pytest.raises(ValueError, match=message) as e:
        torus.TorusConfig(**bad)
    assert "\n" not in str(e.value)


def test_von_mises_exploration_moves_near_the_state_and_is_scored_as_drawn():
    """exploration=von-mises: with epsilon = 1 every move is the public code's random action, von Mises(0, kappa) about
    no move, and the behaviour density log q that the objectives weight by is that law (the kernel's own reference
    proposal); with uniform exploration the increments are uniform on the circle. Seeded 4,000 moves: the mean cosine of
    the increment is I_1(5) / I_0(5) = 0.89 for von Mises and 0 for uniform (standard errors below 0.02)."""
    from gflownet_measure.densities import uniform_density

    for exploration, mean_cos in (("von-mises", ive(1, 5.0) / ive(0, 5.0)), ("uniform", 0.0)):
        config = torus.TorusConfig(n_steps=3, hidden=8, n_layers=1, exploration=exploration, exploration_concentration=5.0)
        graph = torus.make_graph(config)
        pf, _ = torus.make_policies(graph, config)
        s = torch.tensor([[1.0, 2.0, 1.0]], dtype=torch.float64).expand(4000, -1)
        torch.manual_seed(0)
        with torch.no_grad():
            density = pf(s)
            x, sink, drawn = density.draw(epsilon=1.0)
        assert not sink.any()
        assert float(torch.cos(x[:, :2] - s[:, :2]).mean()) == pytest.approx(mean_cos, abs=0.05)
        q = uniform_density(density.measure).log_prob_at(drawn)
        increment = torch.remainder(x[:, :2] - s[:, :2] + math.pi, 2 * math.pi) - math.pi
        expected = (5.0 * torch.cos(increment) - math.log(2 * math.pi * ive(0, 5.0)) - 5.0).sum(1) if exploration == "von-mises" else torch.full((4000,), -2 * math.log(2 * math.pi), dtype=torch.float64)
        assert torch.allclose(q.double(), expected, atol=1e-6)


@pytest.mark.parametrize("location", ["absolute", "increment"])
def test_absolute_locations_land_on_the_network_output_from_every_state(location):
    """With P_F's output layer a constant (weights 0; location bias m = (2.0, 0.5), concentration 4 + 50), the moves from
    two different states land about m when the locations are absolute, and about theta + m - pi (the increment measured
    from the box's low side, -pi) when they are the public code's increments. Seeded 2,000 moves per state: circular mean
    within 0.02 (its standard error is about 0.003 at concentration 54)."""
    config = torus.TorusConfig(n_steps=3, hidden=8, n_layers=1, n_components=1, location=location)
    graph = torus.make_graph(config)
    pf, _ = torus.make_policies(graph, config)
    m = torch.tensor([2.0, 0.5], dtype=torch.float64)
    with torch.no_grad():
        pf.out.weight.zero_()
        raw = torch.zeros(2, 3, 1)  # per angle: logit, location, concentration pre-activation
        raw[:, 1, 0], raw[:, 2, 0] = m.float(), 50.0
        pf.out.bias.copy_(torch.cat([torch.zeros(2), raw.flatten()]))
    torch.manual_seed(0)
    for theta in ([1.0, 2.0], [4.0, 5.5]):
        s = torch.tensor([[*theta, 1.0]], dtype=torch.float64).expand(2000, -1)
        with torch.no_grad():
            x, _, _ = pf(s).draw()
        mean = torch.atan2(torch.sin(x[:, :2]).mean(0), torch.cos(x[:, :2]).mean(0))
        expected = m if location == "absolute" else torch.tensor(theta, dtype=torch.float64) + m - math.pi
        assert torch.allclose(torch.remainder(mean - expected + math.pi, 2 * math.pi) - math.pi, torch.zeros(2, dtype=torch.float64), atol=0.02)


def test_hybrid_absolute_locations_keep_the_terminal_density_normalised():
    """location=absolute on the hybrid torus (the full-torus head and each circle's head aim at angles): its exact P_T, by
    enumeration and quadrature, still integrates to one (the offsets are a fixed function of the state)."""
    torch.manual_seed(0)
    config = torus.TorusConfig(n_steps=3, hidden=16, n_layers=1, c_min=1.0, location="absolute")
    graph = hybrid_torus.make_graph(config)
    pf, pb = hybrid_torus.make_policies(graph, config)
    assert pf.offset is not None and pb.offset is not None
    p_T = hybrid_torus.terminal_density(graph, pf, 32)
    assert float(p_T.sum()) * (2 * math.pi / 32) ** 2 == pytest.approx(1.0, abs=1e-6)
