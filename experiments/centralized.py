"""Centralized training of the same model: the ceiling for the federated runs.

Same data protocol (query set held out with the same seed; the database is the union
of all client partitions), same model, loss and optimiser, and the same epoch budget
as a federated run: ``rounds * local-epochs`` passes over the whole database, or over
its ``train-size`` training rows when that key is set (the clients' training rows).

For ``strategy = "pfmh"`` (:func:`train_centralized_pfmh`) the same multi-modal
network is trained on the union of the ``--clients`` clients' local databases with
PFMH's objective as one client, and evaluated by PFMH's per-client protocol too.

Usage: ``python -m experiments.centralized [--clients N] [--set key=value ...]
[--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clients.data import LocalData, load_local_data
from experiments.lib.overrides import parse_overrides, resolved_settings
from hashdata import load_split
from hashing.codes import sign_codes
from hashing.pfmh.evaluation import (
    local_retrieval,
    mean_over_clients,
    precision_over_clients,
)
from hashing.pfmh.metric_names import (
    LOCAL_CLIENTS,
    LOCAL_MAP_ALL,
    LOCAL_MAP_AT_K,
    SQ_CLIENT_DB_MAP_ALL,
    SQ_CLIENT_DB_MAP_AT_K,
)
from hashing.pfmh.train import local_prototypes, train_pfmh
from hashing.prototypes import PrototypeSet
from hashing.retrieval import evaluate_retrieval
from hashing.train import LocalTrainConfig, encode, select_device, train_local
from settings.run_model import build_hash_loss, build_run_model
from settings.run_settings import RunSettings
from strategies.pfmh.model import build_pfmh_model, pfmh_loss_config


def split_retrieval(
    model: torch.nn.Module, split: Any, settings: RunSettings, device: torch.device
) -> Any:
    """Return the report of the split's queries against its whole database."""
    x = torch.from_numpy(split.inputs)
    q, db = split.query_index, split.database_index
    return evaluate_retrieval(
        sign_codes(encode(model, x[q], device=device)),
        sign_codes(encode(model, x[db], device=device)),
        split.dataset.labels[q],
        split.dataset.labels[db],
        top_k=settings.map_top_k,
        ks=settings.precision_ks(),
    )


def train_centralized(settings: RunSettings) -> dict[str, Any]:
    """Train on the whole database and evaluate retrieval; returns a JSON-able dict."""
    split = load_split(settings.dataset, **settings.split_options())
    data, db_idx = split.dataset, split.database_index
    x = torch.from_numpy(split.inputs)
    y = torch.from_numpy(data.labels)
    torch.manual_seed(settings.seed)
    model = build_run_model(settings, tuple(x.shape[1:]), data.num_classes)
    device = select_device(settings.device, deterministic=settings.cuda_deterministic)
    epochs = settings.rounds * settings.local_epochs
    # the same network before training: the untrained floor (at the same seed the
    # federated runs start from this model, so it equals their round-0 mAP)
    initial = split_retrieval(model, split, settings, device)
    start = time.perf_counter()
    train_idx = db_idx if split.train_mask is None else db_idx[split.train_mask]
    stats = train_local(
        model,
        x[train_idx],
        y[train_idx],
        loss_fn=build_hash_loss(settings, data.num_classes, model=model),
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
    report = split_retrieval(model, split, settings, device)
    return {
        "method": "centralized",
        "training": split.train_text,
        "config": settings.to_dict(),
        "epochs": epochs,
        "train_loss": stats["loss"],
        "train_seconds": seconds,
        "initial": initial.to_dict(),
        "final": report.to_dict(),
    }


def train_centralized_pfmh(settings: RunSettings, num_clients: int) -> dict[str, Any]:
    """PFMH's network trained centrally; evaluated by PFMH's protocols.

    Training data: the union, in partition order, of the ``num_clients`` clients'
    local databases (each partition minus its local queries, exactly what the
    federated clients train on). Objective: Eq. 12 as a single client -- after
    every "round" of ``local-epochs`` epochs the prototypes (Eq. 5) are recomputed
    on all training data and serve as both the personal and the centralized set
    (there is nothing to complete); the first round, like the federated ones, has
    none. Budget: ``rounds * local-epochs`` epochs. Evaluation: the per-client
    protocol (each client's local queries against its local database, with this
    one model, averaged over clients without weights), the server queries against
    each client's partition, and the union protocol (server queries against all
    partitions).
    """
    split = load_split(settings.dataset, **settings.split_options())
    parts: list[LocalData] = [
        load_local_data(settings, partition_id=p, num_partitions=num_clients)
        for p in range(num_clients)
    ]
    train = [p.take(p.local_database()) for p in parts]
    modalities = list(parts[0].input_shape)
    x = {m: torch.cat([t[0][m] for t in train]) for m in modalities}
    y = torch.cat([t[1] for t in train])
    model = build_pfmh_model(settings, parts[0].input_shape)
    device = select_device(settings.device, deterministic=settings.cuda_deterministic)
    loss_config = pfmh_loss_config(settings)
    generator = torch.Generator().manual_seed(settings.seed)
    num_classes = split.dataset.num_classes
    protos = None
    start = time.perf_counter()
    losses = []
    for _ in range(settings.rounds):
        stats = train_pfmh(
            model,
            x,
            y,
            personal_prototypes=protos,
            global_prototypes=protos,
            config=loss_config,
            num_classes=num_classes,
            epochs=settings.local_epochs,
            batch_size=settings.batch_size,
            learning_rate=settings.learning_rate,
            weight_decay=settings.weight_decay,
            device=device,
            generator=generator,
        )
        losses.append(stats["loss"])
        if loss_config.uses_prototypes:
            up = local_prototypes(model, x, y, num_classes=num_classes, device=device)
            protos = PrototypeSet(classes=up.classes, vectors=up.vectors)
    seconds = time.perf_counter() - start
    ks = settings.precision_ks()
    local = [
        local_retrieval(
            model,
            p.inputs,  # type: ignore[arg-type]
            p.labels,
            queries=p.local_queries,  # type: ignore[arg-type]
            database=p.local_database(),
            top_k=settings.map_top_k,
            ks=ks,
            device=device,
        )
        for p in parts
    ]
    local = [r for r in local if r is not None]
    data = split.dataset
    q_idx = split.query_index
    queries = {m: torch.from_numpy(data.inputs[m][q_idx]) for m in modalities}
    q_codes = sign_codes(encode(model, queries, device=device))
    q_labels = data.labels[q_idx]
    db = [sign_codes(encode(model, p.inputs, device=device)) for p in parts]
    db_labels = [p.labels.numpy() for p in parts]
    per_db = [
        evaluate_retrieval(q_codes, c, q_labels, lab, top_k=settings.map_top_k, ks=ks)
        for c, lab in zip(db, db_labels, strict=True)
    ]
    union = evaluate_retrieval(
        q_codes,
        np.concatenate(db),
        q_labels,
        np.concatenate(db_labels),
        top_k=settings.map_top_k,
        ks=ks,
    )
    return {
        "method": "centralized-pfmh",
        "config": settings.to_dict(),
        "clients": num_clients,
        "epochs": settings.rounds * settings.local_epochs,
        "train_samples": len(y),
        "train_loss": losses[-1] if losses else None,
        "train_seconds": seconds,
        "final": union.to_dict(),
        "final_per_client": {
            LOCAL_MAP_ALL: mean_over_clients([r.map_all for r in local]),
            LOCAL_MAP_AT_K: mean_over_clients([r.map_at_k for r in local]),
            LOCAL_CLIENTS: float(len(local)),
            SQ_CLIENT_DB_MAP_ALL: mean_over_clients([r.map_all for r in per_db]),
            SQ_CLIENT_DB_MAP_AT_K: mean_over_clients([r.map_at_k for r in per_db]),
            **precision_over_clients(per_db),
        },
    }


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, help="write the result JSON here")
    parser.add_argument(
        "--clients", type=int, default=10, help="PFMH: clients of the protocol"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads (0: torch's default)"
    )
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    settings = resolved_settings(parse_overrides(args.set))
    if settings.strategy == "pfmh":
        result = train_centralized_pfmh(settings, args.clients)
    else:
        result = train_centralized(settings)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    rep = result["final"]
    local = result.get("final_per_client", {}).get(LOCAL_MAP_ALL)
    print(
        f"centralized {settings.code_length} bits, {result['epochs']} epochs: "
        f"mAP@ALL {rep['map_all']:.4f}, mAP@{rep['top_k']} {rep['map_at_k']:.4f}"
        + ("" if local is None else f", per-client mAP@ALL {local:.4f}")
    )


if __name__ == "__main__":
    from experiments.lib.progress import cli

    cli(main)
