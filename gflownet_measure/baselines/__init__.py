"""Baselines the GFlowNets are compared with, outside the core: annealed SMC and HMC-AIS (:mod:`~gflownet_measure.baselines.smc`, Lahlou et al. 2023, Table 2);
the structure-learning baselines of JSP-GFN's d = 20 table, B-GES, B-PC (:mod:`~gflownet_measure.baselines.bootstrap`) and DiBS (:mod:`~gflownet_measure.baselines.dibs`), optional
(the ``baselines`` extra), and BCD Nets and VBG of its Table D.1 (:mod:`~gflownet_measure.baselines.bcd`, :mod:`~gflownet_measure.baselines.vbg`, no extra needed), found by name through :mod:`~gflownet_measure.baselines.structure`,
which imports them lazily."""
