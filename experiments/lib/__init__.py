"""What every table shares: runs, the sweep runner, progress, grids, tables, verdicts.

:mod:`~experiments.lib.runs` (one run in its own process), :mod:`~.runner` (a
resumable sweep), :mod:`~.progress` (ETA, one-line errors), :mod:`~.grids` (the
TOML grid files), :mod:`~.tables` (the one table writer), :mod:`~.driver` (a
paper's subcommands), :mod:`~.verdict`, :mod:`~.tuning` and :mod:`~.overrides`.
"""
