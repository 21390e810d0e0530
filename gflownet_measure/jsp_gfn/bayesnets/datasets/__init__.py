"""Data for Bayesian networks, in one place: :mod:`.simulated` (Erdos-Renyi graphs with linear-Gaussian, MLP-Gaussian or
zero-inflated CPDs), :mod:`.csv_files` (a user's CSV and its interventions), :mod:`gflownet_measure.jsp_gfn.bayesnets.datasets.sachs` (the Sachs et al. 2005
flow-cytometry data, shipped in ``data/``) and :mod:`.pgmpy_networks` (rows simulated from pgmpy's discrete networks).
"""
