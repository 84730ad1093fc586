"""PFMH: the paper's tables, one subcommand each.

``python -m experiments.pfmh tables [flags]``: Tables 1-2 and Figs. 4, 6, 7
(:mod:`experiments.tables.pfmh_sweep`). ``contrast``: the two contrast forms with
paired seeds (:mod:`experiments.tables.pfmh_contrast`). Default grids:
``experiments/grids/pfmh.toml``.
"""

import sys

from experiments.lib.driver import Table, run_driver

TABLES: dict[str, Table] = {
    "tables": ("experiments.tables.pfmh_sweep", ()),
    "contrast": ("experiments.tables.pfmh_contrast", ()),
}

if __name__ == "__main__":
    run_driver("experiments.pfmh", __doc__, TABLES, sys.argv[1:])
