"""JSP-GFN (Deleu et al. 2023): a joint posterior over the structure of a Bayesian network and its parameters, in one
folder. Its command, ``gflownet-measure run jsp-gfn`` (and ``jsp-table``), is :mod:`gflownet_measure.experiments.jsp_gfn`,
beside the other experiments' runners, which the command line finds in one registry.

- :mod:`gflownet_measure.jsp_gfn.bayesnets`: the model side, no GFlowNet in it: DAGs, the CPD models, their scores and
  priors, data (simulated, CSV files with interventions, Sachs, pgmpy's networks), the exact posterior for d <= 5, the
  structure metrics.
- :mod:`gflownet_measure.jsp_gfn.dag_params`: the hybrid DAG x Theta space (the measurable pointed graph, its
  reference measures), the policy and its heads, the transition loss, replay, sampling and the policy's exact marginals;
  ``check dag-params`` checks it.
- :mod:`gflownet_measure.jsp_gfn.baselines`: what JSP-GFN is compared with on the same data: Gibbs- and MH-MC3, the
  collapsed structure MC3 (also the gold standard beyond enumeration), B-GES, B-PC, DiBS, BCD Nets, VBG, found by
  name through :mod:`gflownet_measure.jsp_gfn.baselines.structure`.
"""
