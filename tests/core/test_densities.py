"""KernelDensity (gflownet_measure.densities): the density at a drawn support point, and the Gumbel-max component draw."""
from dataclasses import replace

import torch

from gflownet_measure.densities import gumbel_max


def test_the_density_of_a_draw_is_the_density_at_its_point():
    """``log_prob_at(point)`` at the drawn support point (no chart inverse) equals ``log_prob(x)`` (``point_of``, which
    inverts the charts) on a space with atoms and two kinds of charted pieces, with and without uniform exploration."""
    from gflownet_measure.environments import quarter_disc
    from gflownet_measure.rollout import sample_forward

    torch.manual_seed(0)
    cfg = quarter_disc.QuarterDiscConfig()
    g = quarter_disc.make_graph(cfg)
    pf, _ = quarter_disc.make_policies(g, replace(cfg, hidden=16, n_layers=1))
    s = sample_forward(g, pf, 256).states[:3].flatten(0, 1)
    s = s[~g.kappa(s).is_zero()]
    with torch.no_grad():
        d = pf(s)
        for eps in (0.0, 0.5):
            x, sink, drawn = d.draw(eps)
            assert torch.allclose(d.log_prob_at(drawn), d.log_prob(x, sink), atol=3e-5)  # two float32 paths to one density: 6e-6 apart measured


def test_gumbel_max_draws_the_softmax_and_never_an_absent_component():
    """50,000 Gumbel-max draws per row against softmax(logits): a chi-square test at p > 1e-3 (a correct sampler fails
    one seed in a thousand); the -inf logit (an absent component) is never drawn; sample shapes lead."""
    from scipy import stats

    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, float("-inf"), 2.0], [3.0, float("-inf"), 0.0, -1.0]])
    j = gumbel_max(logits.expand(50000, -1, -1))
    assert j.shape == (50000, 2)
    for row in range(2):
        counts = torch.bincount(j[:, row], minlength=4)
        p = torch.softmax(logits[row].double(), 0)
        assert counts[p == 0].sum() == 0
        present = p > 0
        assert stats.chisquare(counts[present].numpy(), (50000 * p[present]).double().numpy()).pvalue > 1e-3


def test_gumbel_max_never_draws_an_absent_component_even_when_a_uniform_is_zero(monkeypatch):
    """torch.rand can return exactly 0 (about once in 2^24 float32 draws; a T = 100 SDE run of 1,500 batches of 300 draws
    more than that): the draw must still be a present component, here the only one."""
    monkeypatch.setattr(torch, "rand", lambda shape, dtype=None, device=None: torch.zeros(shape, dtype=dtype))
    logits = torch.tensor([[float("-inf"), 0.0], [float("-inf"), -3.0]])
    assert gumbel_max(logits).tolist() == [1, 1]


def test_the_reference_proposal_is_a_density_on_the_active_coordinates():
    """ReferenceCoordinates (the exploration density of uniform_density): uniform on a bounded coordinate, N(0, c^2) on
    the real line, only on the active ones; its log-density at its own draws equals the sum of the one-dimensional
    densities (float64 round-off), its draws are 0 off the active coordinates, and on a bounded box without a mask it
    draws what torch's Uniform draws from the same seed."""
    import math

    from torch.distributions import Independent, Uniform

    from gflownet_measure.densities import ReferenceCoordinates
    from gflownet_measure.measures import Box

    box = Box((0.0, -math.inf), (2.0, math.inf), proposal_scale=1.5)
    active = torch.tensor([[True, True], [False, True], [True, False]])
    q = ReferenceCoordinates(box, 3, torch.float64, active)
    u = q.sample()
    assert (u[~active] == 0).all()
    normal = -0.5 * (u[:, 1] / 1.5) ** 2 - math.log(1.5) - 0.5 * math.log(2 * math.pi)
    expected = torch.where(active[:, 0], torch.tensor(-math.log(2.0), dtype=torch.float64), 0.0) + torch.where(active[:, 1], normal, 0.0)
    assert torch.allclose(q.log_prob(u), expected, rtol=0, atol=1e-12)
    bounded = Box((0.0, -1.0), (2.0, 1.0))
    torch.manual_seed(3)
    ours = ReferenceCoordinates(bounded, 5, torch.float32).sample()
    torch.manual_seed(3)
    theirs = Independent(Uniform(torch.tensor([0.0, -1.0]).expand(5, -1), torch.tensor([2.0, 1.0]).expand(5, -1)), 1).sample()
    assert torch.equal(ours, theirs)


def test_the_von_mises_reference_proposal_integrates_to_one_and_matches_its_draws():
    """On a periodic box with proposal_concentration kappa the reference proposal is von Mises(0, kappa) in the angle
    2 pi (u - m) / T about the midpoint m: its density integrates to one over the box (periodic trapezoid rule on 400
    nodes, spectrally accurate: 1e-10), its draws lie in the box with mean cos(angle) I_1(kappa) / I_0(kappa) (20,000 seeded
    draws: standard error about 0.002, tolerance 0.01), and a non-periodic box refuses a concentration."""
    import math

    import pytest
    from scipy.special import ive

    from gflownet_measure.densities import ReferenceCoordinates
    from gflownet_measure.measures import Box

    box = Box((-1.0,), (3.0,), periodic=True, proposal_concentration=5.0)
    u, log_w = box.weighted_points(400, "quadrature")
    q = ReferenceCoordinates(box, len(u), torch.float64)
    assert float(torch.logsumexp(q.log_prob(u) + log_w, 0).exp()) == pytest.approx(1.0, abs=1e-10)
    torch.manual_seed(0)
    draws = ReferenceCoordinates(box, 20000, torch.float64).sample()
    assert bool(((draws >= -1.0) & (draws < 3.0)).all())
    angle = 2 * math.pi * (draws[:, 0] - 1.0) / 4.0
    assert float(torch.cos(angle).mean()) == pytest.approx(ive(1, 5.0) / ive(0, 5.0), abs=0.01)
    with pytest.raises(ValueError, match="periodic"):
        Box((0.0,), (1.0,), proposal_concentration=1.0)


def test_a_draw_from_non_finite_logits_is_a_contract_error_not_a_move_the_kernel_lacks():
    """NaN or infinite logits (a policy diverged with finite weights, lr=1e30) make Gumbel-max pick any component, an
    absent one included: the draw refuses, naming how many states, instead of returning a move off the space."""
    import pytest

    from gflownet_measure.contract_error import ContractError
    from gflownet_measure.densities import KernelDensity
    from gflownet_measure.kernels import atoms_measure

    x = torch.tensor([[[1.0], [2.0], [0.0]]]).expand(4, 3, 1)
    measure = atoms_measure(x, torch.tensor([[True, True, False]]).expand(4, 3))
    assert KernelDensity(measure, torch.zeros(4, 3)).draw()[2].comp.lt(2).all()
    for bad in (float("nan"), float("inf")):
        logits = torch.zeros(4, 3)
        logits[1:3, 0] = bad
        with pytest.raises(ContractError, match="not finite at 2 of 4 states: a diverged policy"):
            KernelDensity(measure, logits).draw()
