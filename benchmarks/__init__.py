"""Cost benchmarks: each script measures a cost and writes JSON beside a baseline.

The paper-shaped suite over the experiment drivers is ``experiments/suite.py``.
A regular package on purpose: Opacus installs a top-level ``benchmarks`` package
into site-packages, which would shadow a namespace package here and break
``from benchmarks import ...`` in the tests. The scripts run as
``python benchmarks/<name>.py``.
"""
