"""Sweeps: sweep files (:mod:`hetsim.sweep.spec`), running the grid on local processes or Dask
(:mod:`hetsim.sweep.run`), and the results folders they leave (:mod:`hetsim.sweep.results`).
"""
