"""Benchmarks and the paper-shaped benchmark suite (``python -m benchmarks.suite``).

A regular package on purpose: Opacus installs a top-level ``benchmarks`` package
into site-packages, which would shadow a namespace package here and break
``python -m benchmarks.suite``. The scripts beside this file still run as
``python benchmarks/<name>.py``.
"""
