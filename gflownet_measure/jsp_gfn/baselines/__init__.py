"""The baselines JSP-GFN is compared with on the same data: Gibbs- and MH-MC3 (:mod:`~gflownet_measure.jsp_gfn.baselines.mcmc`),
the collapsed structure MC3 (:mod:`~gflownet_measure.jsp_gfn.baselines.collapsed_mc3`, the gold standard beyond enumeration), the
structure-learning baselines of the d = 20 table, B-GES, B-PC (:mod:`~gflownet_measure.jsp_gfn.baselines.bootstrap`) and DiBS
(:mod:`~gflownet_measure.jsp_gfn.baselines.dibs`), optional (the ``baselines`` extra), and BCD Nets and VBG of its Table D.1
(:mod:`~gflownet_measure.jsp_gfn.baselines.bcd`, :mod:`~gflownet_measure.jsp_gfn.baselines.vbg`, no extra needed), found by name
through :mod:`~gflownet_measure.jsp_gfn.baselines.structure`, which imports them lazily."""
