"""PHashing (Random Flipping): the paper's tables, one subcommand each.

``python -m experiments.phashing table1 [flags]``: Table 1 and Fig. 2, DPSH (FedAvg)
and FedHAP with flipped codes per epsilon (:mod:`experiments.tables.phashing_table`).
``python -m experiments.phashing itq [flags]``: Table 2, ITQ vs PITQ vs PHashing(ITQ)
(:mod:`experiments.tables.itq_table`). Default grids:
``experiments/grids/phashing.toml``.
"""

import sys

from experiments.lib.driver import run_paper

if __name__ == "__main__":
    run_paper(__spec__.name, __doc__, sys.argv[1:])
