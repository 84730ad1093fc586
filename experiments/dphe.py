"""DPHE: the paper's experiments, one subcommand each.

``python -m experiments.dphe map [flags]``: plaintext vs DPHE FedAvg per seed and
sparsity (:mod:`experiments.tables.dphe_map`). ``users``: against the number of users,
Fig. 4 (:mod:`experiments.tables.dphe_users`). Default grids:
``experiments/grids/dphe.toml``.
"""

import sys

from experiments.lib.driver import run_paper

if __name__ == "__main__":
    run_paper(__spec__.name, __doc__, sys.argv[1:])
