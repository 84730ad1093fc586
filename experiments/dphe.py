"""DPHE: the paper's experiments, one subcommand each.

``python -m experiments.dphe map [flags]``: plaintext vs DPHE FedAvg per seed and
sparsity (:mod:`experiments.tables.dphe_map`). ``users``: against the number of users,
Fig. 4 (:mod:`experiments.tables.dphe_users`). Default grids:
``experiments/grids/dphe.toml``.
"""

import sys

from experiments.lib.driver import Table, run_driver

TABLES: dict[str, Table] = {
    "map": ("experiments.tables.dphe_map", ()),
    "users": ("experiments.tables.dphe_users", ()),
}

if __name__ == "__main__":
    run_driver("experiments.dphe", __doc__, TABLES, sys.argv[1:])
