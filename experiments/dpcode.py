"""DPcode: the paper's figures, one subcommand each.

``python -m experiments.dpcode figures [flags]``: Figs. 3-8, DPcode vs the direct
approach and NoisyCut, centrally (:mod:`experiments.tables.dpcode_table`).
``federated``: DPcode through Flower (:mod:`experiments.tables.dpcode_federated`).
Default grids: ``experiments/grids/dpcode.toml``.
"""

import sys

from experiments.lib.driver import Table, run_driver

TABLES: dict[str, Table] = {
    "figures": ("experiments.tables.dpcode_table", ()),
    "federated": ("experiments.tables.dpcode_federated", ()),
}

if __name__ == "__main__":
    run_driver("experiments.dpcode", __doc__, TABLES, sys.argv[1:])
