"""Does DPHE change what FedAvg learns? Plaintext vs DPHE, same seed and sparsity.

``python -m experiments.dphe map --seeds 0,1,2 --sparsity 0.9,0.0`` runs, on digits
with ``--clients`` IID clients, FedAvg (DPSH, 32 bits, the ``mlp``) twice per
(seed, sparsity):
with plaintext sparsified updates, and with the same updates summed under DPHE
with a fresh 2048-bit key (packed, ``num-examples`` weights encrypted). The only
difference between the two is DPHE's fixed-point quantization (2^-20 per value),
so the final mAP@ALL should agree; the target is within 0.5 points. (The DPHE run
uses the simulation-only ``privacy.noise = "seeded"``: it keeps the plaintext run's
batch order, which a DPHE run otherwise mixes with fresh node entropy.) Each row also
keeps the mean training wall time per round and the upload bytes per client.
Beside the pairs, per seed, one centralized run of the same ``mlp`` gives the
untrained floor (the model every run starts from, before training) and the centralized
ceiling (DPSH on the whole database for ``rounds * local-epochs`` epochs, dense, no
DPHE).
Results: ``<out>/rows.jsonl`` (appended after every pair; reruns skip done pairs),
``<out>/reference.jsonl`` (floor and ceiling per seed), ``<out>/table.md``.

The DPHE run sparsifies as the app does by default (``--layout shared``:
``dphe.sparsity-layout = "shared"``, the same ``updates.sparsity`` applied to whole
packed blocks of the phi-permuted space, the same blocks for every client, so packed
DPHE encrypts only the kept blocks; ``--layout block``: each client's own top-k
blocks; ``updates.error-feedback = "auto"``: on under DPHE, each client carries what
it did not send into its next update) while the plaintext run keeps element-wise
top-k without error feedback: the difference is then the accuracy cost of the
default layout (plus the quantization, which is 0.000 points above).
``--layout element`` is element-wise top-k; ``--error-feedback off`` a block layout
without feedback; ``--dense`` adds, per seed, the dense plaintext run (no
sparsity). ``--obfuscators djn`` uses DJN short-exponent obfuscators (README
"DPHE"). ``python -m experiments.dphe map --sparsity 0.9 --dense
--out docs/results/dphe-default``.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crypto import generate_keys
from crypto.keys import PRODUCTION_KEY_BITS
from experiments.lib.grids import FRACTIONS, SEEDS, csv, flag_list, load_grids
from experiments.lib.runner import exit_if_failed, run_sweep
from experiments.lib.runs import ROOT, run_centralized, run_federated
from experiments.lib.tables import mean_sd_cell, table_head, table_row

# the mlp (24,864 values): the default cnn (289,632) costs ~90 s of 2048-bit
# encryption per client per round on this machine (benchmarks/dphe.py)
COMMON = {
    "strategy": "fedavg",
    "model": "mlp",
    "code-length": 32,
    "min-train-nodes": 3,
}


def run_pair(
    seed: int,
    sparsity: float,
    args: argparse.Namespace,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Plaintext and DPHE runs of one (seed, sparsity); their row.

    ``config``: further run-config keys of both runs (e.g. ``partition-repeats``).
    """
    base = {
        **COMMON,
        "seed": seed,
        "rounds": args.rounds,
        "eval-every": args.rounds,
        "updates.sparsity": sparsity,
        **data_config(args),
        **(config or {}),
    }
    tag = pair_name(seed, sparsity)
    plain = run_federated(base, args.clients, args.out / "runs" / f"plain-{tag}")
    extra = {
        "dphe.obfuscators": args.obfuscators,
        "dphe.sparsity-layout": args.layout,
        "updates.error-feedback": args.error_feedback,
    }
    with tempfile.TemporaryDirectory() as tmp:  # keys never leave this run
        keys = Path(tmp) / "keys"
        generate_keys(keys, num_clients=args.clients, key_bits=args.key_bits)
        secure = run_federated(
            {
                **base,
                **extra,
                "secure-aggregation": "dphe",
                "dphe.key-dir": str(keys),
                # a run that claims privacy mixes fresh node entropy into batch
                # order and dropout; the simulation-only seeded mode keeps the
                # plaintext run's, so the pair differs by DPHE's quantization only
                "privacy.noise": "seeded",
            },
            args.clients,
            args.out / "runs" / f"dphe-{tag}",
        )
    row = {
        "seed": seed,
        "sparsity": sparsity,
        "key_bits": args.key_bits,
        "dphe_sparsity": args.layout if sparsity > 0 else "dense",
        "error_feedback": args.error_feedback,
        "obfuscators": args.obfuscators,
    }
    if args.dense and sparsity > 0:
        dense = run_federated(
            {**base, "updates.sparsity": 0.0},
            args.clients,
            args.out / "runs" / f"dense-s{seed}",
        )
        row["dense_map_all"] = dense["final"]["map_all"]
    for name, summary in (("plain", plain), ("dphe", secure)):
        row[f"{name}_map_all"] = summary["final"]["map_all"]
        row[f"{name}_initial_map_all"] = summary.get("initial_map_all")
        row[f"{name}_train_round_s"] = summary.get("train_round_s_mean")
        row[f"{name}_up_bytes_per_client"] = summary.get("up_bytes_per_client_mean")
    row["diff_points"] = 100 * (row["dphe_map_all"] - row["plain_map_all"])
    return row


def data_config(args: argparse.Namespace) -> dict[str, Any]:
    """Run-config keys of the data: none for digits, ``dataset``/``data-path`` else."""
    path = getattr(args, "data_path", "")
    return {"dataset": "npz", "data-path": str(path)} if path else {}


def run_reference(
    seed: int, rounds: int, out: Path, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Return the untrained floor and the centralized ceiling of one seed's runs.

    One centralized run of :data:`COMMON`'s network at ``seed`` (the federated runs
    start from the same model): its mAP before training is the floor (their round 0
    agrees within 0.1 points: encoding in other batches flips a few near-zero code
    bits), after ``rounds * local-epochs`` epochs over the whole database (the
    federated runs' budget) the ceiling. Neither depends on the number of clients.
    """
    cfg = {**COMMON, "seed": seed, "rounds": rounds, **(config or {})}
    result = run_centralized(cfg, out / "runs" / f"centralized-s{seed}.json")
    return {
        "seed": seed,
        "epochs": result["epochs"],
        "floor_map_all": result["initial"]["map_all"],
        "ceiling_map_all": result["final"]["map_all"],
    }


def run_references(
    seeds: list[int], rounds: int, out: Path, config: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """:func:`run_reference` for each seed, resumable in ``<out>/reference.jsonl``."""
    rows, failed = run_sweep(
        seeds,
        lambda seed: run_reference(seed, rounds, out, config),
        rows_path=out / "reference.jsonl",
        resume=True,
        name=lambda seed: f"reference-s{seed}",
        row_name=lambda row: f"reference-s{row['seed']}",
        describe=lambda row: (
            f"floor {100 * row['floor_map_all']:.2f}, "
            f"ceiling {100 * row['ceiling_map_all']:.2f}"
        ),
    )
    exit_if_failed(failed)
    return sorted(rows, key=lambda row: row["seed"])


def reference_table(refs: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown lines: the floor and the ceiling beside a DPHE table (none: [])."""
    if not refs:
        return []
    seeds = ",".join(str(r["seed"]) for r in refs)
    epochs = "/".join(sorted({str(r["epochs"]) for r in refs}))
    return [
        "",
        *table_head(f"reference (same `mlp`, 32 bits; seeds {seeds})", "mAP@ALL %"),
        table_row(
            "untrained, the model every run starts from (floor)",
            mean_std(refs, "floor_map_all", 100),
        ),
        table_row(
            f"centralized DPSH, {epochs} epochs over the whole database, dense, no "
            "DPHE (ceiling)",
            mean_std(refs, "ceiling_map_all", 100),
        ),
    ]


def pair_name(seed: int, sparsity: float) -> str:
    """``s<seed>-sp<sparsity>``: a (seed, sparsity) pair's name and run-dir tag."""
    return f"s{seed}-sp{sparsity:g}"


def mean_std(rows: list[dict[str, Any]], key: str, scale: float) -> str:
    """``mean ± sample std`` of ``scale * row[key]`` over the rows that have it."""
    return mean_sd_cell([r[key] for r in rows if r.get(key) is not None], scale=scale)


def protocol(args: argparse.Namespace) -> str:
    """Return the protocol line above the table, from the run's arguments."""
    kept = {
        "block": "its own largest whole packed blocks of the phi-permuted space",
        "shared": "the same whole packed blocks of the phi-permuted space as every "
        "other client (a fresh random set each round)",
    }
    block = (
        f"; each client of the DPHE run keeps {kept[args.layout]} at the same "
        f'sparsity (`dphe.sparsity-layout = "{args.layout}"`; '
        f'`updates.error-feedback = "{args.error_feedback}"`), the '
        "plaintext run stays element-wise without error feedback"
        if args.layout in kept
        else f"; element-wise top-k in both (`updates.error-feedback = "
        f'"{args.error_feedback}"` under DPHE)'
    )
    if args.dense:
        block += "; beside them, per seed, the dense plaintext run (no sparsity)"
    data = (
        f"`{Path(args.data_path).name}` with its own split: its queries are the "
        "server's, ranked against the union of the clients' databases: its database "
        "rows,"
        if getattr(args, "data_path", "")
        else "digits (scikit-learn), a stratified 10% of it the server's queries, "
        "ranked against the union of the clients' databases: the rest,"
    )
    return (
        f"Protocol: {data} split IID into {args.clients} disjoint client "
        "partitions; FedAvg of DPSH, "
        f"`mlp`, 32 bits, {args.rounds} rounds, every client trains each round. Per "
        "(seed, sparsity) two runs from the same model: plaintext FedAvg of "
        "element-wise top-k sparsified updates, and the same updates summed under "
        f"DPHE ({args.key_bits}-bit keys, {args.obfuscators} obfuscators, "
        f"num-examples weights){block}. Flower simulation (Ray) on this machine's "
        "CPU. mAP@ALL % after the last round, mean ± std over seeds."
    )


def table(
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    refs: Sequence[dict[str, Any]] = (),
) -> str:
    """Markdown: the protocol; per sparsity, plain vs DPHE mAP and costs; the refs."""
    lines = [
        protocol(args),
        "",
        *table_head(
            "sparsity",
            "seeds",
            "plaintext dense mAP@ALL %",
            "plaintext mAP@ALL %",
            "DPHE mAP@ALL %",
            "DPHE - plain (points), per seed",
            "train s/round plain -> DPHE",
            "upload KB/client plain -> DPHE",
        ),
    ]
    for sparsity in sorted({r["sparsity"] for r in rows}, reverse=True):
        rs = sorted(
            (r for r in rows if r["sparsity"] == sparsity), key=lambda r: r["seed"]
        )

        def stat(key: str, rs: list = rs, scale: float = 100.0) -> str:
            return mean_std(rs, key, scale)

        diffs = ", ".join(f"{r['diff_points']:+.3f}" for r in rs)
        lines.append(
            table_row(
                f"{sparsity:.0%}",
                ",".join(str(r["seed"]) for r in rs),
                stat("dense_map_all"),
                stat("plain_map_all"),
                stat("dphe_map_all"),
                diffs,
                f"{stat('plain_train_round_s', scale=1)} -> "
                f"{stat('dphe_train_round_s', scale=1)}",
                f"{stat('plain_up_bytes_per_client', scale=1e-3)} -> "
                f"{stat('dphe_up_bytes_per_client', scale=1e-3)}",
            )
        )
    return "\n".join(lines + reference_table(refs))


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("dphe", "map", ("seeds", "sparsity"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--sparsity", default=csv(grids["sparsity"]))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument(
        "--key-bits", type=int, default=2048, choices=PRODUCTION_KEY_BITS
    )
    parser.add_argument(
        "--layout",
        default="shared",
        choices=("block", "shared", "element"),
        help="the DPHE run's dphe.sparsity-layout (plaintext stays element-wise)",
    )
    parser.add_argument(
        "--error-feedback",
        default="auto",
        choices=("auto", "on", "off"),
        help="the DPHE run's updates.error-feedback (auto: on under DPHE)",
    )
    parser.add_argument(
        "--dense",
        action="store_true",
        help="also the dense plaintext run per seed (no sparsity)",
    )
    parser.add_argument("--obfuscators", default="full", choices=("full", "djn"))
    parser.add_argument(
        "--data-path",
        default="",
        help="an .npz with a `split` array (e.g. pretrained features; default: digits)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "dphe")
    args = parser.parse_args()
    if args.data_path and not Path(args.data_path).is_file():
        parser.error(
            f"--data-path {args.data_path}: no such file (an .npz is accepted)"
        )
    seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    sparsities = flag_list(parser, "--sparsity", args.sparsity, FRACTIONS)
    args.out.mkdir(parents=True, exist_ok=True)
    refs = run_references(
        sorted(set(seeds)),
        args.rounds,
        args.out,
        data_config(args),
    )
    pairs = [(seed, sparsity) for sparsity in sparsities for seed in seeds]
    rows, failed = run_sweep(
        pairs,
        lambda pair: run_pair(*pair, args),
        rows_path=args.out / "rows.jsonl",
        resume=True,  # always: a rerun skips the pairs already done
        name=lambda pair: pair_name(*pair),
        row_name=lambda row: pair_name(row["seed"], row["sparsity"]),
        describe=lambda row: f"DPHE - plain {row['diff_points']:+.3f} points",
        after_row=lambda rows: (args.out / "table.md").write_text(
            table(rows, args, refs) + "\n"
        ),
    )
    text = table(rows, args, refs)
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    exit_if_failed(failed)
