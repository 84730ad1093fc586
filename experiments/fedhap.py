"""FedHAP: the paper's tables, one subcommand each.

``python -m experiments.fedhap tables [flags]``: Tables 2-6 on digits
(:mod:`experiments.tables.fedhap_sweep`). ``real-data``: FedHAP against tuned FedAvg
baselines on a real dataset (:mod:`experiments.tables.real_data_table`). ``rounds``:
mAP against rounds (:mod:`experiments.tables.rounds_sweep`). ``across``: one table
across code lengths or client counts (:mod:`experiments.tables.across_table`).
Default grids: ``experiments/grids/fedhap.toml``.
"""

import sys

from experiments.lib.driver import run_paper

if __name__ == "__main__":
    run_paper(__spec__.name, __doc__, sys.argv[1:])
