"""FedHAP: the paper's tables, one subcommand each.

``python -m experiments.fedhap tables [flags]``: Tables 2-6 on digits
(:mod:`experiments.tables.fedhap_sweep`). ``real-data``: FedHAP against tuned FedAvg
baselines on a real dataset (:mod:`experiments.tables.real_data_table`). ``rounds``:
mAP against rounds (:mod:`experiments.tables.rounds_sweep`). ``across``: one table
across code lengths or client counts (:mod:`experiments.tables.across_table`).
Default grids: ``experiments/grids/fedhap.toml``.
"""

import sys

from experiments.lib.driver import Table, run_driver

TABLES: dict[str, Table] = {
    "tables": ("experiments.tables.fedhap_sweep", ()),
    "real-data": ("experiments.tables.real_data_table", ()),
    "rounds": ("experiments.tables.rounds_sweep", ()),
    "across": ("experiments.tables.across_table", ()),
}

if __name__ == "__main__":
    run_driver("experiments.fedhap", __doc__, TABLES, sys.argv[1:])
