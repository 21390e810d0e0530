"""The SDE samplers' baselines, outside the core: annealed SMC and HMC-AIS (:mod:`~gflownet_measure.baselines.smc`,
Lahlou et al. 2023, Table 2). JSP-GFN's baselines are in its own folder, :mod:`gflownet_measure.jsp_gfn.baselines`."""
