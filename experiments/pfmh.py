"""PFMH: the paper's tables, one subcommand each.

``python -m experiments.pfmh tables [flags]``: Tables 1-2 and Figs. 4, 6, 7
(:mod:`experiments.tables.pfmh_sweep`). ``contrast``: the two contrast forms with
paired seeds (:mod:`experiments.tables.pfmh_contrast`). ``protocols``: PFMH against
FedAvg, local-only and the centralized ceiling under the global and the paper's
protocol, rates tuned on validation (:mod:`experiments.tables.pfmh_protocols`).
Default grids:
``experiments/grids/pfmh.toml``.
"""

import sys

from experiments.lib.driver import run_paper

if __name__ == "__main__":
    run_paper(__spec__.name, __doc__, sys.argv[1:])
