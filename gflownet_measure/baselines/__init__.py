"""Baselines the GFlowNets are compared with, outside the core: annealed SMC and HMC-AIS (:mod:`.smc`, Lahlou et al. 2023, Table 2);
the structure-learning baselines of JSP-GFN's d = 20 table, B-GES, B-PC (:mod:`.bootstrap`) and DiBS (:mod:`.dibs`), optional
(the ``baselines`` extra), and BCD Nets and VBG of its Table D.1 (:mod:`.bcd`, :mod:`.vbg`, no extra needed), found by name through :mod:`.structure`,
which imports them lazily."""
