"""The objective registry: what each objective declares, one call signature, batches drawn as each objective needs."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gflownet_measure.environments import hypergrid
from gflownet_measure.metrics import log_weights
from gflownet_measure.networks import StateFlow
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet, Objective, get_objective, objective_names, register
from gflownet_measure.rollout import log_densities, sample_forward

pytestmark = pytest.mark.usefixtures("one_thread")


def _hypergrid(seed: int = 0):
    torch.manual_seed(seed)
    space = hypergrid.HypergridConfig(height=4, ndim=2)
    graph = hypergrid.make_graph(space)
    pf, pb = hypergrid.make_policies(graph, replace(space, backward="learned", hidden=16, n_layers=1))
    return graph, GFlowNet(pf, pb)


def test_the_registry_declares_what_each_objective_needs():
    assert {n for n, o in OBJECTIVES.items() if o.needs_flow} >= {"db", "subtb"}
    assert {n for n, o in OBJECTIVES.items() if o.needs_scores} == {"reverse_kl", "forward_kl"}
    assert {n for n, o in OBJECTIVES.items() if o.pathwise} == {"reverse_kl"}
    assert objective_names(divergence=False) == ("db", "fm", "subtb", "tb", "vargrad")
    assert objective_names(divergence=False, continuous=True) == ("db", "subtb", "tb", "vargrad")
    assert objective_names(divergence=True) == ("forward_kl", "reverse_kl")
    assert OBJECTIVES["subtb"].hyper == {"subtb_lambda": 0.9}
    assert all(OBJECTIVES[n].log_Z is None for n in ("vargrad", "reverse_kl", "forward_kl"))


def test_vargrad_is_tb_at_the_log_Z_that_minimises_it():
    """min over log Z of mean (log Z - w)^2 is reached at log Z = mean w, where it is the variance of w: VarGrad.
    Float32 log-densities summed over <= 7 steps: agreement to 1e-5 relative."""
    graph, gfn = _hypergrid()
    batch = Batch(graph, sample_forward(graph, gfn.pf, 128, 0.5))
    with torch.no_grad():
        w = log_weights(batch.traj.log_R, *log_densities(batch.traj, gfn.pf, gfn.pb), batch.traj.mask)
        vargrad = float(OBJECTIVES["vargrad"](gfn, batch))
        gfn.log_Z.fill_(float(w.mean()))
        tb_at_mean = float(OBJECTIVES["tb"](gfn, batch))
        gfn.log_Z.add_(0.3)
        tb_moved = float(OBJECTIVES["tb"](gfn, batch))
    assert vargrad > 0
    assert vargrad == pytest.approx(tb_at_mean, rel=1e-5)
    assert tb_moved == pytest.approx(vargrad + 0.3**2, rel=1e-5)  # the bias-variance split of TB's mean square


def test_hyper_parameters_are_named_and_checked():
    graph, gfn = _hypergrid()
    gfn.log_F = StateFlow(graph.encode, 8, hidden=8, n_layers=1)  # one-hot features of the 4 x 4 grid
    batch = OBJECTIVES["subtb"].sample(graph, gfn, 8)
    a, b = OBJECTIVES["subtb"](gfn, batch), OBJECTIVES["subtb"](gfn, batch, subtb_lambda=0.5)
    assert not torch.equal(a, b)
    with pytest.raises(ValueError, match="objective 'tb' has no hyper-parameter subtb_lambda; valid: none"):
        OBJECTIVES["tb"](gfn, batch, subtb_lambda=0.5)
    assert OBJECTIVES["subtb"].options({"subtb_lambda": 0.2, "lr": 1.0}) == {"subtb_lambda": 0.2}
    assert OBJECTIVES["tb"].options({"subtb_lambda": 0.2}) == {}


def test_sample_draws_what_the_objective_needs():
    graph, gfn = _hypergrid()
    assert OBJECTIVES["tb"].sample(graph, gfn, 4).scores is None
    scored = OBJECTIVES["forward_kl"].sample(graph, gfn, 4, epsilon=0.2)
    assert scored.scores is not None and not scored.pathwise
    assert not torch.equal(scored.scores.log_q, scored.scores.log_pf.detach())  # epsilon-uniform moves: q != P_F
    on_policy = OBJECTIVES["reverse_kl"].sample(graph, gfn, 4)
    assert on_policy.pathwise and on_policy.scores is not None
    assert not OBJECTIVES["reverse_kl"].sample(graph, gfn, 4, epsilon=0.1).pathwise  # off-policy: the importance-weighted estimator


def test_registering_needs_a_new_name_and_unknown_names_are_explained():
    with pytest.raises(ValueError, match="already registered"):
        register(Objective("tb", OBJECTIVES["tb"].loss, "again"))
    with pytest.raises(ValueError, match="unknown objective 'nope'; valid: .*tb"):
        get_objective("nope")


def test_jsp_gfns_loss_is_registered_on_transitions():
    import gflownet_measure.jsp_gfn.dag_params.objective  # noqa: F401

    o = OBJECTIVES["undirected_subtb"]
    assert o.batch == "transitions" and o.log_Z is None and set(o.hyper) == {"theta_samples", "delta", "penalty"}
    assert "undirected_subtb" not in objective_names(divergence=None)  # not offered where trajectories are sampled
    with pytest.raises(ValueError, match="trains on transitions"):
        o.sample(*_hypergrid(), 4)
