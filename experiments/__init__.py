"""Experiments: one driver per paper, the tables they run, and the tools beside them.

``python -m experiments.<paper> <table>`` (``phashing``, ``fedhap``, ``pfmh``,
``dphe``, ``dpcode``, ``project``) runs one table of :mod:`experiments.tables` with
its default grids from ``experiments/grids/<paper>.toml``; ``python -m
experiments.suite`` runs the papers' tables as one suite. :mod:`experiments.lib`
holds what the tables share; ``simulate``, ``centralized``, ``loopback``, ``claims``,
``cifar_subset`` and ``linear_probe`` are runnable tools.
"""
