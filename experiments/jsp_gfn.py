"""`gflownet-measure run jsp-gfn` and `jsp-table`: the joint posterior over DAGs and linear-Gaussian weights (JSP-GFN).

One run (Deleu et al. 2023, Algorithm 1; docs/references.md, 'Loss (eq. 8)' and 'Training loop'): ``num_envs`` graphs grow under the
behaviour policy (uniform with probability :math:`1 - \\epsilon`, :math:`\\epsilon` rising linearly from 0 to
``1 - min_exploration`` over the first ``anneal_fraction`` of training, half by default; 100% uniform during ``prefill``); their edge transitions
fill a replay buffer; each update draws ``batch_size`` transitions and ``theta_samples`` fresh parameters at both
ends and minimises the undirected SubTB loss (eq. 8). The final sampler is scored against the exact posterior
(:mod:`environments.dag_params.evaluation`), optionally beside a structure-MCMC baseline on the same data.

``samples.npz``: ``graphs [K, d, d]`` uint8 (``A[i, j] = 1`` for i -> j) and ``thetas [K, d, d]`` (weight of
i -> j, 0 where absent) from ``posterior_samples`` pure-policy rollouts of the core.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from environments import dag_params as env
from environments.dag_params.evaluation import fit_metrics, graph_metrics, heldout_metrics, mean_field_metrics, posterior_metrics, sample_metrics
from environments.dag_params.exact import ExactPosterior
from environments.dag_params.mcmc import gibbs_mc3, mh_mc3
from environments.dag_params.metrics import feature_metrics
from environments.dag_params.dags import MAX_ENUMERATE
from environments.dag_params.objective import UNDIRECTED_SUBTB, Transitions
from environments.dag_params.states import join, split
from gflownet_measure.buffers import TransitionBuffer
from gflownet_measure.objectives import GFlowNet
from gflownet_measure.options import Setting
from gflownet_measure.rollout import sample_forward
from gflownet_measure.training import Trainer, make_optimizer
from gflownet_measure.walkers import Walkers

from .common import JOBS_SETTING, TRAINING_SETTINGS, SubRun, make_scheduler, run_id, run_many
from .memory import require_memory
from .plots import copy_figure, optional_figure, plot_fit, plot_history, plot_per_dataset, plot_scatter_panels
from .registry import Experiment, register
from .settings import ConfigError, build

BASELINES = {"gibbs": gibbs_mc3, "mh": mh_mc3}
BASELINE_NAMES = {"gibbs": "Gibbs-MC3", "mh": "MH-MC3"}

SETTINGS = {
    **env.SETTINGS,
    **{k: TRAINING_SETTINGS[k] for k in ("steps", "batch_size", "lr", "lr_milestone", "lr_gamma", "grad_clip", "eval_every")},
    "theta_samples": Setting(16, "S: fresh theta samples at each end of a transition (S x S pairs per transition)", low=1),
    "prefill": Setting(1000, "uniform-policy environment steps that fill the replay buffer before training", low=1),
    "replay_capacity": Setting(100000, "edge transitions kept (FIFO)", low=1),
    "num_envs": Setting(8, "graphs grown in parallel; one step each per update", low=1),
    "min_exploration": Setting(0.1, "final probability of a uniform move (1 during prefill, then linear to this over anneal_fraction of the steps)", low=0.0, high=1.0),
    "anneal_fraction": Setting(0.5, "share of the steps over which uniform moves decay from 1 to min_exploration (the public code: half of 100,000)", low=1e-6, high=1.0),
    "delta": Setting(1.0, "Huber threshold of eq. 8 (> 0)", low=1e-6),
    "penalty": Setting(False, "add the length-2 score-matching penalty of eq. C.21", choices=(True, False)),
    "batch_size_data": Setting(0, "rows of the data per log-reward estimate (eq. 13; 0 = all N)", low=0),
    "posterior_samples": Setting(1000, "K: final (G, theta) samples from the learned policy", low=2),
    "exact": Setting("auto", "score against the exact posterior (enumerated DAGs; d <= 5): auto = where d <= 5, on, off (sample metrics: held-out NLL, E-SHD, AUROC, log P_T vs log R)", choices=("auto", "on", "off")),
    "eval_samples": Setting(200, "posterior samples per evaluation during training where the exact posterior is not used", low=2),
    "fit_samples": Setting(1000, "samples whose log P_T is estimated (beam search + importance sampling) for the log P_T vs log R fit, where the exact posterior is not used", low=2),
    "baseline": Setting("none", "structure MCMC on the same data: gibbs (Gibbs-MC3), mh (MH-MC3, joint theta moves) or none", choices=("none", *BASELINES)),
    "mcmc_steps": Setting(20000, "MCMC iterations per chain after burn-in (4 chains, thinned to posterior_samples in all)", low=1),
    "ema": Setting(0.999, "decay of an exponential moving average of the policy's weights; when on, the average is the sampler (scored, sampled, saved) and the last iterate is scored beside it (last_* metrics); 0 = off: the last iterate is the sampler", low=0.0, high=0.999999),
}
SETTINGS["steps"] = Setting(2000, "gradient updates (one per environment step of every graph)", low=1)
SETTINGS["batch_size"] = Setting(64, "replayed edge transitions per update", low=1)
SETTINGS["lr"] = Setting(1e-4, "Adam learning rate", low=0.0)
SETTINGS["grad_clip"] = Setting(0.0, "max global gradient norm (0 = off)", low=0.0)

PRESETS = {
    # ema: the weight average's horizon 1 / (1 - decay): 100 updates (5%) in quick, 1,000 (2.5%) in paper (longer horizons
    # scored worse at 20,000 updates: edge RMSE 0.029, 0.039, 0.151 for 2,000, 4,000, 8,000 against 0.028 on datasets 0-1)
    "quick": {"d": 3, "steps": 2000, "batch_size": 64, "theta_samples": 16, "prefill": 200, "lr": 3e-4, "eval_every": 500, "ema": 0.99},
    # the paper's d = 5 problem (N = 100, sigma^2 = 0.01, uniform prior) at a CPU budget: the public code's README trains
    # 100,000 updates of 256 transitions x 64 theta samples at lr 1e-4 (0.47 s/update here, 13 h); these cost 0.04 s/update.
    # Measured on the hardest simulated dataset (data_seed 1, edge RMSE at 20,000 updates): lingauss-diag 0.062 (its
    # mean-field bias alone is 0.030), lingauss-full 0.073 -> 0.038 with the replay buffer cut to the paper's share of the
    # transitions seen (100k of 800k there, 20k of ~130k here) -> 0.034 with the logits scaled by 10 at lr 1e-4 (the
    # public code scales them by N = 100: log R spans 450 nats over the DAGs of that dataset). theta_samples: the public
    # code's 64; against 16 on the same 20 datasets and seeds (jsp-table), edge / path / Markov RMSE 0.0169 / 0.0218 / 0.0197
    # against 0.0188 / 0.0235 / 0.0189, better on 13 / 12 / 11 of the 20, for 15% more time per update. steps: 40,000 with
    # the schedule stretched to match (lr halved every 10,000, uniform moves decaying over the first 10,000) against the
    # 20,000 of that table (halved every 5,000, the same decay), on its first 18 datasets and seeds: edge / path / Markov RMSE 0.0109 / 0.0147 / 0.0109
    # against 0.0164 / 0.0211 / 0.0176, better on 17 / 15 / 16 of the 18, for twice the time
    "paper": {"d": 5, "model": "lingauss-full", "steps": 40000, "batch_size": 64, "theta_samples": 64, "prefill": 1000, "replay_capacity": 20000, "logit_scale": 10.0, "lr": 1e-4, "lr_milestone": 10000, "lr_gamma": 0.5, "anneal_fraction": 0.25, "eval_every": 2000},
}


def exploration(cfg: dict, step: int) -> float:
    """Probability of a uniform move at update ``step``: :math:`1 - \\min(1, k / (fK))\\,(1 - \\epsilon_{min})`, ``f = anneal_fraction``."""
    return 1.0 - min(1.0, step / max(1.0, cfg["steps"] * cfg["anneal_fraction"])) * (1.0 - cfg["min_exploration"])


def _exact(cfg: dict, d: int) -> bool:
    """Whether a run scores against the exact posterior: ``exact=on``, or ``auto`` with ``d <= 5`` (setting ``exact``)."""
    return cfg["exact"] == "on" or (cfg["exact"] == "auto" and d <= MAX_ENUMERATE)


def _problem(space: env.DagParamsConfig) -> env.Problem:
    """The data and model ``space`` names; data that cannot be read or modelled is a :class:`ConfigError`."""
    try:
        return env.make_problem(space)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _log_reward(model, cfg: dict):
    """``(adj, theta) -> log R`` for one update: the full-data reward, or the mini-batch estimate of eq. 13 on fresh rows (the same for both ends)."""
    M = cfg["batch_size_data"]
    rows = torch.randperm(model.n)[:M] if 0 < M < model.n else None
    return lambda adj, theta: model.log_reward(adj, theta.double(), rows)


def posterior_samples(graph, pf, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` pure-policy rollouts of the core: ``(graphs [n, d, d] bool, thetas [n, P])``, in chunks whose kernel atoms
    (``d^2`` states of ``D`` numbers per state) stay near 2^25 numbers."""
    d, D = graph.kappa.d, graph.state_dim
    chunk = max(1, min(1000, 2**25 // (d * d * D)))
    gs, ts = [], []
    for k in range(0, n, chunk):
        adj, theta, _ = split(sample_forward(graph, pf, min(chunk, n - k)).terminal, d)
        gs.append(adj)
        ts.append(theta)
    return torch.cat(gs), torch.cat(ts)


def _baseline(cfg: dict, problem, exact: ExactPosterior | None, seed: int) -> dict:
    """The structure-MCMC baseline's metrics (``mcmc_`` prefix) on the same data: against the exact posterior where it
    is used, and always the sample metrics (held-out NLL, E-SHD, AUROC) of :func:`sample_metrics`."""
    per_chain = max(1, cfg["posterior_samples"] // 4)  # 4 chains, posterior_samples in all
    thin = max(1, cfg["mcmc_steps"] // per_chain)  # mcmc_steps iterations per chain after burn-in
    r = BASELINES[cfg["baseline"]](problem.model, n_samples=per_chain, burn_in=cfg["mcmc_steps"] // 4, thin=thin, n_chains=4, seed=seed, max_parents=cfg["max_parents"] or None)
    m = sample_metrics(problem, r.graphs, r.thetas)
    if exact is not None:
        m |= feature_metrics(r.graphs, exact.features())
        m["theta_nll"] = float(exact.theta_metric(r.graphs, r.thetas.double()).mean())
    return {f"mcmc_{k}": v for k, v in m.items()} | {"mcmc_acceptance": r.acceptance, "mcmc_seconds": r.seconds}


def run(cfg: dict, out: Path, resume: bool) -> dict:
    space = build(env.DagParamsConfig, cfg)
    problem = _problem(space)
    graph = env.make_graph(space, problem)
    pf, pb = env.make_policies(graph, space, problem)
    gfn, hyper = GFlowNet(pf, pb), UNDIRECTED_SUBTB.options(cfg)  # the objective's view of the policies; state holds what is trained
    model, d, P = problem.model, graph.kappa.d, problem.model.n_params
    replay = TransitionBuffer(cfg["replay_capacity"], d * d)  # edge transitions: the graphs alone (theta is 0 at (G, #))
    walkers = Walkers(graph, cfg["num_envs"])
    state = nn.ModuleDict({"pf": pf, "replay": replay, "walkers": walkers})  # the checkpoint restores the replay buffer and the graphs being built too
    ema = None
    if cfg["ema"] > 0:  # Polyak averaging of the weights: steadier than the last iterate of a noisy optimiser
        ema = state["ema"] = AveragedModel(pf, multi_avg_fn=get_ema_multi_avg_fn(cfg["ema"]))
    sampler = pf if ema is None else ema.module
    optimizer = make_optimizer(pf, cfg["lr"], lr_logZ=cfg["lr"])  # the policy has no log Z: one group at lr
    exact = ExactPosterior(model, cfg["max_parents"] or None) if _exact(cfg, d) else None  # the posterior over the DAGs the kernel reaches

    def collect(epsilon: float) -> None:
        """One move of every walker (Algorithm 1's environments); the moves between intermediate states enter the replay."""
        s, x, sink = walkers.step(pf, epsilon)
        adj, _, _ = split(s, d)
        adj_next, _, stopped = split(x, d)
        edge = ~sink & ~stopped
        replay.add(adj[edge].flatten(1), adj_next[edge].flatten(1))

    if not resume:
        for _ in range(cfg["prefill"]):
            collect(1.0)

    def step_fn(step: int):
        if ema is not None:
            ema.update_parameters(pf)  # the weights after the previous update
        collect(exploration(cfg, step))
        adj, adj_next = replay.sample(cfg["batch_size"])
        s, s_next = join(adj.view(-1, d, d), P), join(adj_next.view(-1, d, d), P)
        return UNDIRECTED_SUBTB(gfn, Transitions(s, s_next, _log_reward(model, cfg), model.n), **hyper)

    def scores(policy, prefix: str = "") -> dict:
        if exact is not None:
            m = graph_metrics(policy, exact)[0]
            return {prefix + k: m[k] for k in ("graph_kl", "edge_rmse", "path_rmse", "markov_rmse")}
        with torch.no_grad():
            graphs, thetas = posterior_samples(graph, policy, cfg["eval_samples"])
        return {prefix + k: v for k, v in sample_metrics(problem, graphs, thetas).items()}

    def evaluate() -> dict:
        return scores(sampler) | (scores(pf, "last_") if ema is not None else {})

    trainer = Trainer(state, optimizer, make_scheduler(optimizer, cfg), step_fn, evaluate, out, cfg["steps"], cfg["eval_every"], cfg["batch_size"], cfg["grad_clip"], run_id(cfg))
    history = trainer.run(resume)
    with torch.no_grad():
        graphs, thetas = posterior_samples(graph, sampler, cfg["posterior_samples"])
    np.savez(out / "samples.npz", graphs=graphs.numpy().astype(np.uint8), thetas=thetas.numpy())
    with torch.no_grad():
        if exact is not None:
            metrics, arrays = posterior_metrics(sampler, exact, graphs, thetas, problem.true_adj)
        else:
            n_fit = min(cfg["fit_samples"], len(graphs))
            metrics = sample_metrics(problem, graphs, thetas)
            fit, arrays = fit_metrics(sampler, model, graphs[:n_fit], thetas[:n_fit], generator=torch.Generator().manual_seed(0))
            metrics |= fit
    metrics |= {k: v for k, v in history[-1].items() if k.startswith("last_")}  # the last evaluation scored the final weights
    metrics |= {"seconds": history[-1]["seconds"], "seconds_per_step": history[-1]["seconds"] / cfg["steps"], "steps": cfg["steps"], "d": d, "n_params": P}
    if exact is not None:
        metrics |= mean_field_metrics(exact) | {"log_evidence": exact.log_normaliser()}
        if problem.heldout is not None:  # simulated data: the held-out rows, scored beside as many exact draws
            exact_draws = exact.sample(cfg["posterior_samples"], torch.Generator().manual_seed(int(torch.initial_seed())))
            metrics |= heldout_metrics(problem.heldout, graphs, thetas) | {f"{k}_exact": v for k, v in heldout_metrics(problem.heldout, *exact_draws).items()}
    if cfg["baseline"] != "none":
        metrics |= _baseline(cfg, problem, exact, int(torch.initial_seed()))
    # a Pearson r (or an AUROC, a slope) is undefined when one side is constant, e.g. every sampled graph has the same
    # Markov blankets: such keys are left out, as metrics.json holds finite numbers only
    metrics = {k: v for k, v in metrics.items() if math.isfinite(v)}
    _figures(cfg, history, exact, arrays, out, d, model.n)
    return metrics


def _figures(cfg: dict, history: list[dict], exact, arrays: dict, out: Path, d: int, n: int) -> None:
    """``edge_rmse.png`` (or ``heldout_nll.png``) over training, and ``posterior.png``: the learned marginals against the exact
    ones and log P_T against log R (or, beyond the exact posterior, log P_T against log R coloured by edge count)."""
    title = f"JSP-GFN, d = {d}, N = {n}, {cfg['model']}"
    if exact is not None:
        plot_history(history, "edge_rmse", out / "edge_rmse.png", f"edge-marginal RMSE to the exact posterior (d = {d})")
        off = ~np.eye(d, dtype=bool)
        plot_scatter_panels(
            [
                ("edge marginals", arrays["edge_exact"][off], arrays["edge_model"][off], "exact P(i -> j | D)", "learned P_T(i -> j)", True),
                ("terminal states", arrays["log_r"] - exact.log_normaliser(), arrays["log_pt"], "log R(G, theta) - log Z", "log P_T(G, theta)", False),
            ],
            out / "posterior.png",
            title,
        )
        return
    if any("heldout_nll" in h for h in history):
        plot_history(history, "heldout_nll", out / "heldout_nll.png", f"expected held-out NLL of posterior samples (d = {d})", log_y=False)
    plot_fit(arrays, out / "posterior.png", title)


def validate(cfg: dict, d: int | None = None) -> None:
    """The data (a user's CSV is read and checked), the replay batch against the buffer, and the memory of one update:
    about 3.3 d^2 bytes per replayed transition and pair of theta samples (measured at d = 3, 64 transitions, S from
    64 to 256: 29.5 bytes per pair)."""
    d = d or (_problem(build(env.DagParamsConfig, cfg)).model.d if cfg["data"] else cfg["d"])
    if cfg["exact"] == "on" and d > MAX_ENUMERATE:
        raise ConfigError(f"exact=on scores against the exact posterior, which enumerates the DAGs for d <= {MAX_ENUMERATE}; d = {d}: use exact=auto or off (held-out NLL, E-SHD, AUROC and the log P_T vs log R fit)")
    if cfg["batch_size"] > cfg["replay_capacity"]:
        raise ConfigError(f"batch_size={cfg['batch_size']} exceeds replay_capacity={cfg['replay_capacity']}: an update replays batch_size transitions from the buffer; lower batch_size or raise replay_capacity")
    if cfg["batch_size"] > cfg["prefill"] * cfg["num_envs"]:
        raise ConfigError(f"batch_size={cfg['batch_size']} exceeds the {cfg['prefill'] * cfg['num_envs']} transitions of prefill={cfg['prefill']} x num_envs={cfg['num_envs']}: the first updates would replay fewer; raise prefill to at least {-(-cfg['batch_size'] // cfg['num_envs'])}")
    require_memory(3.3 * d * d * cfg["batch_size"] * cfg["theta_samples"] ** 2, f"theta_samples={cfg['theta_samples']} with batch_size={cfg['batch_size']}")


register(Experiment("jsp-gfn", "JSP-GFN: joint posterior over DAGs and linear-Gaussian weights, scored against the exact posterior (d <= 5)", SETTINGS, PRESETS, run, validate))

# --- Table 3 / C.2 and D.1: d = 3, 4, 5 over datasets, beside the paper -------------------------------------

PAPER = {  # Lahlou et al. 2023, Table 3 (GFlowNet row) and Deleu et al. 2023, Table D.1 (d = 5); docs/references.md, 'Table 3 and Table D.1'
    "lahlou_table3": {
        3: {"edge_rmse": 0.0150, "path_rmse": 0.00339, "markov_rmse": 0.0214, "theta_nll": -1.75},
        4: {"edge_rmse": 0.0161, "path_rmse": 0.0107, "markov_rmse": 0.0238, "theta_nll": -3.06},
        5: {"edge_rmse": 0.0180, "path_rmse": 0.0199, "markov_rmse": 0.0283, "theta_nll": -5.17},
    },
    "deleu_d1": {"edge_rmse": (0.018, 0.005), "path_rmse": (0.022, 0.005), "markov_rmse": (0.019, 0.006)},
    "deleu_d1_mcmc": {"mh": {"edge_rmse": 0.357, "path_rmse": 0.368, "markov_rmse": 0.341}, "gibbs": {"edge_rmse": 0.357, "path_rmse": 0.367, "markov_rmse": 0.341}},
}
TABLE_KEYS = ("edge_rmse", "path_rmse", "markov_rmse", "theta_nll", "theta_nll_exact")

TABLE_SETTINGS = {k: v for k, v in SETTINGS.items() if k not in ("d", "data", "data_seed")} | {
    "dims": Setting("3,4,5", "comma-separated numbers of variables", choices=("3,4,5", "3", "4", "5", "3,4", "4,5", "3,5")),
    "datasets": Setting(3, "simulated ER datasets per d (data_seed 0, 1, ...)", low=1),
    "jobs": JOBS_SETTING,
}
TABLE_PRESETS = {
    "quick": {k: v for k, v in PRESETS["quick"].items() if k != "d"} | {"dims": "3", "datasets": 1, "steps": 500},
    "paper": {k: v for k, v in PRESETS["paper"].items() if k != "d"} | {"datasets": 20},
}


def run_table(cfg: dict, out: Path, resume: bool) -> dict:
    """One jsp-gfn run per (d, dataset) in ``out/d<d>/data<k>`` (finished ones kept on resume), then the table beside the paper."""
    seed = torch.initial_seed()
    dims = [int(v) for v in cfg["dims"].split(",")]
    sub_cfg = {key: v for key, v in cfg.items() if key not in ("dims", "datasets", "jobs")} | {"data": ""}
    jobs = [SubRun(out / f"d{d}" / f"data{k}", seed + k, sub_cfg | {"d": d, "data_seed": k}) for d in dims for k in range(cfg["datasets"])]
    results = iter(run_many(run, jobs, resume, cfg["jobs"]))
    rows = {d: [next(results) for _ in range(cfg["datasets"])] for d in dims}
    history = []
    for d, ms in rows.items():
        for k, m in enumerate(ms):
            history.append({"step": len(history) + 1, "trajectories": 0, "d": d, "dataset": k} | {key: m[key] for key in TABLE_KEYS})
    lines, metrics = [], {}
    optional = ("last_edge_rmse", "last_path_rmse", "last_markov_rmse", "mean_field_edge_rmse", "mean_field_path_rmse", "mean_field_markov_rmse", "mcmc_edge_rmse", "mcmc_path_rmse", "mcmc_markov_rmse", "seconds")
    extra = [key for key in optional if all(key in m for ms in rows.values() for m in ms)]
    for d, ms in rows.items():
        _plot_table(d, ms, extra, cfg["baseline"], out / f"table_d{d}.png")
        lines += [f"\nd = {d}: {len(ms)} ER1 datasets of N = {ms[0].get('n_data', cfg['n_data'])} (mean ± 95% CI over datasets)", f"{'metric':<22} {'ours':>20} {'paper (Lahlou T3)':>18} {'paper (Deleu D.1)':>18}"]
        for key in TABLE_KEYS + tuple(extra):
            v = np.array([m[key] for m in ms])
            metrics[f"{key}/d{d}/mean"] = float(v.mean())
            cell = f"{v.mean():.4g}"
            if len(v) > 1:  # one dataset has no spread: the key is left out (metrics.json holds finite numbers only)
                ci = metrics[f"{key}/d{d}/ci95"] = float(1.96 * v.std(ddof=1) / np.sqrt(len(v)))
                cell += f" ± {ci:.2g}"
            t3 = PAPER["lahlou_table3"][d].get(key)
            d1 = PAPER["deleu_d1"].get(key) if d == 5 else None
            if key.startswith("mcmc_") and d == 5 and cfg["baseline"] in PAPER["deleu_d1_mcmc"]:
                d1 = (PAPER["deleu_d1_mcmc"][cfg["baseline"]][key[5:]], None)  # the paper gives no spread for these rows
            paper_d1 = "" if d1 is None else f"{d1[0]:.3g}" + ("" if d1[1] is None else f" ± {d1[1]:.2g}")
            lines.append(f"{key:<22} {cell:>20} {'' if t3 is None else f'{t3:.4g}':>18} {paper_d1:>18}")
    lines.append("\nThe sampler is the exponential moving average of the policy's weights (setting ema); last_*: the last iterate, scored the same way." if cfg["ema"] > 0 else "\nThe sampler is the last iterate (ema = 0).")
    lines.append("mean_field_*: the fixed point of a perfectly trained diagonal theta density (lingauss-diag) against the exact posterior, a bias of that model (ExactPosterior.mean_field_log_prob).")
    lines.append("seconds: training time of one dataset (its updates and evaluations, summed over resumed sessions; sampling, scoring and the baseline not included).")
    lines.append("theta_nll: mean of -log P(theta_k | G_k, D) over samples, without the 1/N factor (the scale of the paper's numbers, docs/references.md, 'Metrics'); theta_nll_exact: what an exact sampler scores (not a bound: a theta density narrower than the posterior scores lower).")
    table = "\n".join(lines).strip() + "\n"
    (out / "table.txt").write_text(table)
    print(table)
    with (out / "history.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in history)
    first = out / f"d{next(iter(rows))}" / "data0"
    with np.load(first / "samples.npz") as z:
        np.savez(out / "samples.npz", graphs=z["graphs"], thetas=z["thetas"])
    copy_figure(first / "posterior.png", out / "posterior.png")
    return metrics | {"datasets": cfg["datasets"]}


@optional_figure
def _plot_table(d: int, ms: list[dict], extra: list[str], baseline: str, path: Path) -> None:
    """``table_d<d>.png``: per dataset, the three RMSEs (the sampler, its last iterate, the MCMC baseline) beside the papers' means, and Params beside the exact sampler's."""
    panels = []
    for feature, title in (("edge", "edge"), ("path", "path"), ("markov", "Markov-blanket")):
        names = {"JSP-GFN": f"{feature}_rmse", "last iterate": f"last_{feature}_rmse", BASELINE_NAMES.get(baseline, ""): f"mcmc_{feature}_rmse"}
        series = {label: [m[key] for m in ms] for label, key in names.items() if key == f"{feature}_rmse" or key in extra}
        references = {"Lahlou et al. T3": (PAPER["lahlou_table3"][d][f"{feature}_rmse"], 0.0)}
        if d == 5:
            references["Deleu et al. D.1"] = PAPER["deleu_d1"][f"{feature}_rmse"]
        panels.append((f"{title} features: RMSE against the exact posterior", series, references))
    series = {"JSP-GFN": [m["theta_nll"] for m in ms], "exact sampler": [m["theta_nll_exact"] for m in ms]}
    panels.append(("Params: mean -log P(theta | G, D) (no 1/N)", series, {"Lahlou et al. T3": (PAPER["lahlou_table3"][d]["theta_nll"], 0.0)}))
    plot_per_dataset(panels, path, f"JSP-GFN, d = {d}: {len(ms)} ER1 datasets (lines: means)")


register(Experiment("jsp-table", "Table 3 / C.2 and D.1: JSP-GFN against the exact posterior for d = 3, 4, 5 over datasets, beside the papers", TABLE_SETTINGS, TABLE_PRESETS, run_table, lambda cfg: validate(cfg | {"data": ""}, max(int(v) for v in cfg["dims"].split(","))), multi_run=True))
