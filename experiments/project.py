"""The project's own tables (no paper behind them), one subcommand each.

``python -m experiments.project foundation [flags]``: FedAvg / FedProx / centralized
seed sweep (:mod:`experiments.tables.foundation`). ``faults``: mAP with failing clients
(:mod:`experiments.tables.fault_table`). ``dp-sgd``: mAP against DP-SGD noise
(:mod:`experiments.tables.dp_table`). ``update-density``: elastic net vs top-k
(:mod:`experiments.tables.update_density`). Default grids:
``experiments/grids/project.toml``.
"""

import sys

from experiments.lib.driver import Table, run_driver

TABLES: dict[str, Table] = {
    "foundation": ("experiments.tables.foundation", ()),
    "faults": ("experiments.tables.fault_table", ()),
    "dp-sgd": ("experiments.tables.dp_table", ()),
    "update-density": ("experiments.tables.update_density", ()),
}

if __name__ == "__main__":
    run_driver("experiments.project", __doc__, TABLES, sys.argv[1:])
