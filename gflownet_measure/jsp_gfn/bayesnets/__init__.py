"""Bayesian networks for structure learning: the model side of JSP-GFN (Deleu et al. 2023), with no GFlowNet in it.

Modules: :mod:`gflownet_measure.jsp_gfn.bayesnets.dags` (closures, masks, enumeration, the features of Table D.1) and :mod:`gflownet_measure.jsp_gfn.bayesnets.weighted_dags` (exact draws of
DAGs weighted by their edge count, Robinson 1973); :mod:`gflownet_measure.jsp_gfn.bayesnets.cpd_base` (:class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel`, the one contract of a
CPD model: data checks, the priors, the reward), :mod:`.linear_gaussian` and :mod:`gflownet_measure.jsp_gfn.bayesnets.cpds` (the models, named in
:data:`~gflownet_measure.jsp_gfn.bayesnets.cpds.CPD_MODELS`; docs/cpd_models.md); :mod:`gflownet_measure.jsp_gfn.bayesnets.scores` (closed-form local scores: the linear-Gaussian marginal,
BDeu); :mod:`.exact_posterior` (the exact posterior for ``d <= 5``); :mod:`.structure_metrics` (edge / path / Markov
features, E-SHD, AUROC); :mod:`.datasets` (simulated networks, CSV files with interventions, the Sachs data, pgmpy's
networks). The GFlowNet on these models is :mod:`gflownet_measure.jsp_gfn.dag_params`; MCMC over them is
:mod:`gflownet_measure.jsp_gfn.baselines.mcmc`.
"""
