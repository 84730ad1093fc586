"""Centralized training of the same model: the ceiling for the federated runs.

Same data protocol (query set held out with the same seed; the database is the union
of all client partitions), same model, loss and optimiser, and the same epoch budget
as a federated run: ``rounds * local-epochs`` passes over the whole database.

Usage: ``python -m experiments.centralized [--set key=value ...] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from experiments.overrides import parse_overrides, resolved_settings
from hashdata import load_split
from hashing.codes import sign_codes
from hashing.retrieval import evaluate_retrieval
from hashing.train import LocalTrainConfig, encode, select_device, train_dpsh
from settings.run_model import build_run_model
from settings.run_settings import RunSettings


def train_centralized(settings: RunSettings) -> dict[str, Any]:
    """Train on the whole database and evaluate retrieval; returns a JSON-able dict."""
    split = load_split(
        settings.dataset,
        data_path=settings.data_path,
        download=settings.download,
        query_fraction=settings.query_fraction,
        seed=settings.seed,
    )
    data, q_idx, db_idx = split.dataset, split.query_index, split.database_index
    x = torch.from_numpy(split.inputs)
    y = torch.from_numpy(data.labels)
    torch.manual_seed(settings.seed)
    model = build_run_model(settings, tuple(x.shape[1:]))
    device = select_device(settings.device)
    epochs = settings.rounds * settings.local_epochs
    start = time.perf_counter()
    stats = train_dpsh(
        model,
        x[db_idx],
        y[db_idx],
        config=LocalTrainConfig(
            epochs=epochs,
            learning_rate=settings.learning_rate,
            batch_size=settings.batch_size,
            weight_decay=settings.weight_decay,
            quantization_weight=settings.quantization_weight,
        ),
        device=device,
        generator=torch.Generator().manual_seed(settings.seed),
    )
    seconds = time.perf_counter() - start
    report = evaluate_retrieval(
        sign_codes(encode(model, x[q_idx], device=device)),
        sign_codes(encode(model, x[db_idx], device=device)),
        data.labels[q_idx],
        data.labels[db_idx],
        top_k=settings.map_top_k,
        ks=settings.precision_ks(),
    )
    return {
        "method": "centralized",
        "config": settings.to_dict(),
        "epochs": epochs,
        "train_loss": stats["loss"],
        "train_seconds": seconds,
        "final": report.to_dict(),
    }


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, help="write the result JSON here")
    args = parser.parse_args()
    settings = resolved_settings(parse_overrides(args.set))
    result = train_centralized(settings)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    rep = result["final"]
    print(
        f"centralized {settings.code_length} bits, {result['epochs']} epochs: "
        f"mAP@ALL {rep['map_all']:.4f}, mAP@{rep['top_k']} {rep['map_at_k']:.4f}"
    )


if __name__ == "__main__":
    main()
