"""Does FedHAP's trained discriminator look at the class? Scores from finished runs.

``python -m experiments.discriminator_audit docs/results/fedhap-discriminator``
reads every run under ``<folder>/runs/`` that has a discriminator (``model.pt``
and ``config.json`` of a FedHAP run), rebuilds its network and its global
discriminator from the final global arrays, encodes the run's database (the same
split, scaling and seed as the run) and reports
:func:`hashing.fedhap.discriminator.class_scores`: the mean probability of "real"
for each class prototype with its own class (``real``) and with another class
(``wrong_class``), and for the database's relaxed codes (``relaxed``) and their
signs (``sign``) with their own labels. The prototypes are Eq. 5's class
prototypes over the whole database (sign of the class mean of the relaxed codes),
what the server's aggregate approximates; the final round's aggregate itself is
not stored. Writes ``<folder>/class_scores.jsonl`` (one line per run; the rows of
runs no longer on disk are kept, a run audited again replaces its row) and
``<folder>/class_scores.md`` (the means per option, mean probabilities over seeds).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch

from clients.data import data_key, load_key_split
from experiments.lib.runner import load_rows, rewrite_rows
from hashing.fedhap.discriminator import class_scores
from hashing.prototypes import class_prototypes
from hashing.train import encode
from settings.run_model import (
    build_run_discriminator,
    build_run_model,
    split_global_state,
)
from settings.run_settings import RunSettings

SCORES = ("real", "wrong_class", "relaxed", "sign")


def run_scores(run_dir: Path) -> dict[str, Any] | None:
    """Return the run's config keys of interest and its four scores (``None``: no D)."""
    config = json.loads((run_dir / "config.json").read_text())["config"]
    settings = RunSettings.from_config(config)
    if settings.strategy != "fedhap" or not settings.fedhap.uses_discriminator:
        return None
    split = load_key_split(data_key(settings))
    db = split.database_index
    inputs = torch.from_numpy(split.inputs[db])
    labels = torch.from_numpy(split.dataset.labels[db])
    num_classes = split.dataset.num_classes
    model_state, disc_state = split_global_state(
        torch.load(run_dir / "model.pt", weights_only=True)
    )
    model = build_run_model(settings, tuple(inputs.shape[1:]))
    model.load_state_dict(model_state)
    disc = build_run_discriminator(settings, num_classes)
    disc.load_state_dict(disc_state)
    disc.eval()
    relaxed = torch.from_numpy(encode(model, inputs, device=torch.device("cpu")))
    protos = class_prototypes(relaxed, labels, num_classes=num_classes)
    codes = torch.sign(torch.from_numpy(protos.vectors))
    return {
        "run": run_dir.name,
        "seed": settings.seed,
        "discriminator": getattr(settings.fedhap, "discriminator", "concat"),
        "discriminator_input": getattr(
            settings.fedhap, "discriminator_input", "relaxed"
        ),
        **class_scores(disc, codes, torch.from_numpy(protos.classes), relaxed, labels),
    }


def merge_scores(
    old: list[dict[str, Any]], new: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Rows of ``old`` whose run is not in ``new``, then ``new``; sorted.

    Run folders are not kept in git (``docs/results/**/runs/``), so the scores of
    runs audited on another checkout stay in ``class_scores.jsonl``; a run audited
    again replaces its row.
    """
    fresh = {r["run"] for r in new}
    rows = [r for r in old if r["run"] not in fresh] + new
    return sorted(
        rows, key=lambda r: (r["discriminator"], r["discriminator_input"], r["seed"])
    )


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    runs = sorted(p.parent for p in (args.folder / "runs").glob("*/*/model.pt"))
    if not runs:
        parser.error(f"{args.folder}: no runs/*/*/model.pt under it")
    out = args.folder / "class_scores.jsonl"
    rows = merge_scores(
        load_rows(out), [r for r in map(run_scores, runs) if r is not None]
    )
    rewrite_rows(out, rows)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["discriminator"], r["discriminator_input"]), []).append(r)
    lines = [
        "| discriminator | input | seeds | " + " | ".join(SCORES) + " |",
        "|---|---|---|" + "---|" * len(SCORES),
    ]
    for (kind, given), rs in sorted(groups.items()):
        cells = [f"{statistics.fmean(r[s] for r in rs):.3f}" for s in SCORES]
        seeds = ", ".join(str(r["seed"]) for r in sorted(rs, key=lambda r: r["seed"]))
        lines.append(f"| {kind} | {given} | {seeds} | " + " | ".join(cells) + " |")
    (args.folder / "class_scores.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out} and class_scores.md")


if __name__ == "__main__":
    main()
