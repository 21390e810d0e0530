"""KernelDensity (gflownet_measure.densities): the density at a drawn support point, and the Gumbel-max component draw."""
import torch

from gflownet_measure.densities import gumbel_max


def test_the_density_of_a_draw_is_the_density_at_its_point():
    """``log_prob_at(point)`` at the drawn support point (no chart inverse) equals ``log_prob(x)`` (``point_of``, which
    inverts the charts) on a space with atoms and two kinds of charted pieces, with and without uniform exploration."""
    from environments import quarter_disc
    from gflownet_measure.rollout import sample_forward

    torch.manual_seed(0)
    cfg = quarter_disc.QuarterDiscConfig()
    g = quarter_disc.make_graph(cfg)
    pf, _ = quarter_disc.make_policies(g, cfg, hidden=16, n_layers=1)
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
