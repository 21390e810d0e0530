"""Baselines the GFlowNets are compared with, outside the core: annealed SMC and HMC-AIS (:mod:`.smc`, Lahlou et al. 2023, Table 2)."""
