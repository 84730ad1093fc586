"""What every FedHAP real-data table shares: its methods, partitionings and setup.

The methods (FedHAP, the FedAvg and FedProx baselines, the centralized ceiling)
and the config keys that make each, the config every run of a table shares
(:func:`base_config`), the setup a table's numbers depend on (:func:`setup_of`),
the learning-rate choice (:func:`best_tuned_lr`) and its table
(:func:`lr_grid_lines`). Used by :mod:`experiments.tables.real_data_table`,
:mod:`experiments.tables.rounds_sweep`, :mod:`experiments.tables.across_table` and
:mod:`experiments.tables.phashing_table`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib.tables import MISSING, table_head, table_row

CENTRALIZED = "centralized (DPSH)"
#: Our discriminator options for FedHAP, not the paper's (docs/methods/fedhap.md, the
#: discriminator audit): name -> the config keys they set beside FedHAP's. Defined
#: once: this driver runs them only when named in ``--methods`` and tunes them as
#: FedHAP (``--fedhap-lr-grid``); the digits ablation (``fedhap_sweep``) uses them too.
DISCRIMINATOR_OPTIONS: dict[str, dict[str, Any]] = {
    "FedHAP (projection D, sign input)": {
        "fedhap.discriminator": "projection",
        "fedhap.discriminator-input": "sign",
    },
    "FedHAP (projection D)": {"fedhap.discriminator": "projection"},
    "FedHAP (sign input)": {"fedhap.discriminator-input": "sign"},
}
#: FedHAP's ablations run beside it on the real-data tables, only when named in
#: ``--methods``: name -> the config keys they set beside FedHAP's (the paper's
#: FedHAP-3: its prototype triplet term without the discriminator).
FEDHAP_VARIANTS: dict[str, dict[str, Any]] = {
    "FedHAP-3 (no discriminator)": {"fedhap.variant": "fedhap-3"},
}
#: FedHAP, its options and ablations: tuned over FedHAP's grid, never baselines.
FEDHAP_METHODS = ("FedHAP", *DISCRIMINATOR_OPTIONS, *FEDHAP_VARIANTS)
#: Method -> the config keys that make it (``None``: the centralized ceiling).
METHODS: dict[str, dict[str, Any] | None] = {
    "DPSH (FedAvg)": {"strategy": "fedavg", "loss": "dpsh"},
    "FedHAP": {"strategy": "fedhap"},
    CENTRALIZED: None,
    "CSQ (FedAvg)": {"strategy": "fedavg", "loss": "csq"},
    "HashNet (FedAvg)": {"strategy": "fedavg", "loss": "hashnet"},
    "DCH (FedAvg)": {"strategy": "fedavg", "loss": "dch"},
    "GreedyHash (FedAvg)": {"strategy": "fedavg", "loss": "greedyhash"},
    # FedHAP's Table 2 also runs its baselines under FedProx (its Table 6: DPSH and
    # CSQ); the proximal term's mu is the run config's fedprox.mu (default 0.01)
    "DPSH (FedProx)": {"strategy": "fedprox", "loss": "dpsh"},
    "CSQ (FedProx)": {"strategy": "fedprox", "loss": "csq"},
    "DCH (FedProx)": {"strategy": "fedprox", "loss": "dch"},
    "GreedyHash (FedProx)": {"strategy": "fedprox", "loss": "greedyhash"},
    **{m: {"strategy": "fedhap", **keys} for m, keys in DISCRIMINATOR_OPTIONS.items()},
    **{m: {"strategy": "fedhap", **keys} for m, keys in FEDHAP_VARIANTS.items()},
}
#: What ``--methods`` runs by default (the FedProx baselines and FedHAP's
#: discriminator options and ablations only when named).
DEFAULT_METHODS = tuple(
    m
    for m in METHODS
    if "(FedProx)" not in m and m not in (*DISCRIMINATOR_OPTIONS, *FEDHAP_VARIANTS)
)
BASELINES = tuple(m for m in METHODS if m not in (*FEDHAP_METHODS, CENTRALIZED))
#: The methods whose learning rate and local epochs are tuned: the baselines and the
#: centralized ceiling (a ceiling at an untuned rate would be no ceiling); FedHAP and
#: its options are tuned too, over ``--fedhap-lr-grid`` (default: ``--lr-grid``).
TUNED = (*BASELINES, CENTRALIZED)
PARTITIONS = ("iid", "non-iid")
#: P@K / recall@K list lengths of every run (the curves' x axis).
CURVE_KS = "10,50,100,200,500,1000,2000,5000"
DEFAULT_LR = 5e-4


def setup_of(args: argparse.Namespace) -> dict[str, Any]:
    """Return the settings a table's numbers depend on (``summary.json["setup"]``).

    :mod:`experiments.tables.across_table` combines only tables whose setups differ in
    one setting (``bits`` or ``clients``), and :mod:`experiments.tables.rounds_sweep`
    states the code length its learning rates were tuned at.
    """
    return {
        "data": args.data_path.name,
        "clients": args.clients,
        "bits": args.bits,
        "rounds": args.rounds,
        "train_size": args.train_size,
        "classes_per_client": args.classes_per_client,
        **({"untuned": True} if getattr(args, "untuned", False) else {}),
        # recorded only when not the default, so folders tuned IID resume as before
        **(
            {"tune_partitioning": args.tune_partitioning}
            if getattr(args, "tune_partitioning", "iid") != "iid"
            else {}
        ),
        **_tuning_setup(args),
    }


def _tuning_setup(args: argparse.Namespace) -> dict[str, Any]:
    """``{"tuning": ...}`` of a tuned table (its validation draw), else nothing.

    A folder tuned on the reported queries (before validation splits) records no
    such entry, so ``--resume`` into it is refused.
    """
    if getattr(args, "untuned", False) or not hasattr(args, "val_fraction"):
        return {}
    seed = args.val_seed if args.val_seed is not None else args.tune_seed
    return {"tuning": f"validation split {args.val_fraction:g}, seed {seed}"}


def partition_configs(classes_per_client: int) -> dict[str, dict[str, Any]]:
    """Config keys of each ``--partitions`` name (non-iid: FedHAP's label shards)."""
    return {
        "iid": {"partitioning": "iid"},
        "non-iid": {
            "partitioning": "pathological",
            "classes-per-client": classes_per_client,
        },
    }


def base_config(
    data_path: Path, bits: int, rounds: int, train_size: int, eval_every: int = 0
) -> dict[str, Any]:
    """Return the config keys every run of the table shares.

    Evaluated after the last round, or every ``eval_every`` rounds.
    """
    return {
        "dataset": "npz",
        "data-path": str(data_path.resolve()),
        "code-length": bits,
        "rounds": rounds,
        "eval-every": eval_every or rounds,
        "precision-k": CURVE_KS,
        **({"train-size": train_size} if train_size else {}),
    }


def best_tuned_lr(tuning: list[dict[str, Any]], method: str) -> float | None:
    """Learning rate of ``method``'s best tuning run (final mAP@ALL), or ``None``.

    Among equal scores the smallest learning rate wins, whatever the rows' order.
    """
    mine = sorted(
        (r for r in tuning if r["method"] == method), key=lambda r: r["learning_rate"]
    )
    if not mine:
        return None
    return max(mine, key=lambda r: r["map_all"])["learning_rate"]


def lr_grid_lines(
    tuning: list[dict[str, Any]],
    methods: Sequence[str],
    lrs: Sequence[float],
    chosen: Mapping[str, Any],
    *,
    lr_key: str = "learning_rate",
) -> list[str]:
    """Markdown table: final mAP@ALL % per method (rows) and learning rate (columns).

    The chosen rate (``chosen[method]``) is bold; a missing run is ``-``; a method
    without any tuning run is left out. Used by this driver and PHashing's.
    """
    lines = table_head("method", *(f"lr {lr:g}" for lr in lrs))
    for method in methods:
        cells = []
        for lr in lrs:
            got = [
                r["map_all"]
                for r in tuning
                if r["method"] == method and r[lr_key] == lr
            ]
            txt = f"{100 * got[0]:.2f}" if got else MISSING
            cells.append(f"**{txt}**" if chosen.get(method) == lr else txt)
        if any(c != MISSING for c in cells):
            lines.append(table_row(method, *cells))
    return lines
