"""DPcode: the paper's figures, one subcommand each.

``python -m experiments.dpcode figures [flags]``: Figs. 3-8, DPcode vs the direct
approach and NoisyCut, centrally (:mod:`experiments.tables.dpcode_table`).
``federated``: DPcode through Flower (:mod:`experiments.tables.dpcode_federated`).
Default grids: ``experiments/grids/dpcode.toml``.
"""

import sys

from experiments.lib.driver import run_paper

if __name__ == "__main__":
    run_paper(__spec__.name, __doc__, sys.argv[1:])
