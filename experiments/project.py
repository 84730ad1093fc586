"""The project's own tables (no paper behind them), one subcommand each.

``python -m experiments.project foundation [flags]``: FedAvg / FedProx / centralized
seed sweep (:mod:`experiments.tables.foundation`). ``faults``: mAP with failing clients
(:mod:`experiments.tables.fault_table`). ``dp-sgd``: mAP against DP-SGD noise
(:mod:`experiments.tables.dp_table`). ``update-density``: elastic net vs top-k
(:mod:`experiments.tables.update_density`). Default grids:
``experiments/grids/project.toml``.
"""

import sys

from experiments.lib.driver import run_paper

if __name__ == "__main__":
    run_paper(__spec__.name, __doc__, sys.argv[1:])
