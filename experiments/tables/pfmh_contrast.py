"""PFMH's two contrast forms (``pfmh.contrast``) compared with paired seeds.

``python -m experiments.pfmh contrast --seeds 0,1,2,3,4 --rounds 8 --out
docs/results/pfmh-contrast --set dataset=npz --set 'data-path="wiki.npz"'
--set 'modalities="image,text"'`` runs, per seed and form, one in-process
mini-federation of personalized PFMH built on the library (no Flower, no Ray:
:func:`hashing.pfmh.train.train_pfmh` per client, then the server step
:func:`hashing.pfmh.prototypes.aggregate_and_enhance`, as Algorithm 1; the same
partitions, local splits and initial weights as a Flower run of that config), and
scores every client's model on two query sets:

* **validation** (the choice is made here): the union of the clients' local
  queries -- drawn from the training side (``clients.data.local_query_split``,
  seeded), never trained on -- ranked against each client's local database with
  that client's model, mAP@ALL averaged over clients without weights;
* **test** (reported, not used for the choice): the server's queries (the file's
  fixed split) ranked against each client's whole partition, as PFMH's global
  protocol (``server_queries_client_db_map_all``).

The paired verdict (:mod:`experiments.lib.verdict`) of InfoNCE against decoupled on
each query set goes to ``<out>/summary.json`` and ``<out>/table.md``; rows to
``<out>/rows.jsonl`` (``--resume`` skips those there). One process, torch
``--threads`` threads.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clients.data import load_local_data
from experiments.lib.grids import SEEDS, csv, flag_list, load_grids
from experiments.lib.overrides import parse_overrides, resolved_settings
from experiments.lib.runner import load_rows, run_sweep, write_tables
from experiments.lib.tables import MISSING, table_head, table_row
from experiments.lib.verdict import paired_verdict
from hashdata import load_split
from hashing.codes import sign_codes
from hashing.pfmh.forms import CONTRASTS
from hashing.pfmh.prototypes import aggregate_and_enhance
from hashing.pfmh.train import local_prototypes, train_pfmh
from hashing.retrieval import evaluate_retrieval
from hashing.train import encode, select_device
from settings.run_settings import RunSettings
from strategies.pfmh.model import build_pfmh_model, pfmh_loss_config

#: Defaults of the comparison (the issue's mini-federation, fewer rounds).
BASE = {
    "strategy": "pfmh",
    "partitioning": "dirichlet",
    "dirichlet-alpha": 0.1,
    "pfmh.mode": "personalized",
    "pfmh.variant": "full",
    "learning-rate": 1e-4,
    "weight-decay": 1e-6,
    "batch-size": 64,
    "local-epochs": 3,
    "code-length": 32,
}


def mini_federation(
    settings: RunSettings, clients: int, *, train: bool = True
) -> dict[str, Any]:
    """Train PFMH in-process; return validation and test mAP@ALL (two protocols).

    ``pfmh.mode = "personalized"``: each client keeps its model (Algorithm 1);
    ``"fedavg"``: after every round the models are averaged, weighted by each
    client's training rows (FedAvg of the same model; with ``pfmh.variant =
    "wo-p"`` plain FedAvg of the multi-modal hashing model). Returned:
    ``validation_map_all`` (local queries against each client's local database),
    ``test_map_all`` (PFMH's global protocol: the server's queries against each
    client's partition) and ``paper_map_all`` (the paper's protocol: the server's
    queries against every training item of the file, 2,173 on Wikipedia), each
    with that client's model and averaged over clients without weights.
    ``train=False`` scores the initial models (the untrained floor).
    """
    device = select_device(settings.device)
    parts = [
        load_local_data(settings, partition_id=p, num_partitions=clients)
        for p in range(clients)
    ]
    num_classes = parts[0].num_classes
    models = [build_pfmh_model(settings, parts[0].input_shape) for _ in parts]
    config = pfmh_loss_config(settings)
    gens = [
        torch.Generator().manual_seed(settings.seed * 1000 + p) for p in range(clients)
    ]
    personal: list[Any] = [None] * clients
    central = None
    t0 = time.perf_counter()
    for _ in range(settings.rounds if train else 0):
        uploads = []
        for p, (part, model) in enumerate(zip(parts, models, strict=True)):
            x, y = part.take(part.local_database())
            train_pfmh(
                model,
                x,
                y,
                personal_prototypes=personal[p],
                global_prototypes=central,
                config=config,
                num_classes=num_classes,
                epochs=settings.local_epochs,
                batch_size=settings.batch_size,
                learning_rate=settings.learning_rate,
                weight_decay=settings.weight_decay,
                device=device,
                generator=gens[p],
            )
            uploads.append(
                local_prototypes(model, x, y, num_classes=num_classes, device=device)
            )
        if not settings.pfmh.personalized:
            _average_models(models, [len(p.local_database()) for p in parts])
        if config.uses_prototypes:
            central, personal = aggregate_and_enhance(
                uploads,
                num_classes=num_classes,
                dim=models[0].k,
                weighting=settings.prototype_weighting,
                complete=config.use_completion,
            )
    seconds = time.perf_counter() - t0
    # validation: every client's local queries (never trained on), against each
    # client's local database, with that client's model
    vq_x = {
        m: torch.cat([p.take(p.local_queries)[0][m] for p in parts])
        for m in parts[0].inputs
    }
    vq_y = torch.cat([p.labels[p.local_queries] for p in parts]).numpy()
    # test: the server's queries against each client's whole partition
    split = load_split(settings.dataset, **settings.split_options())
    q = split.query_index
    tq_x = {m: torch.from_numpy(split.dataset.inputs[m][q]) for m in vq_x}
    tq_y = split.dataset.labels[q]
    train = split.database_index
    train_x = {m: torch.from_numpy(split.dataset.inputs[m][train]) for m in vq_x}
    train_y = split.dataset.labels[train]
    val, test, paper = [], [], []
    for part, model in zip(parts, models, strict=True):
        db_x, db_y = part.take(part.local_database())
        db = sign_codes(encode(model, db_x, device=device))
        vq = sign_codes(encode(model, vq_x, device=device))
        val.append(_map_all(vq, db, vq_y, db_y.numpy()))
        full = sign_codes(encode(model, part.inputs, device=device))
        tq = sign_codes(encode(model, tq_x, device=device))
        test.append(_map_all(tq, full, tq_y, part.labels.numpy()))
        everything = sign_codes(encode(model, train_x, device=device))
        paper.append(_map_all(tq, everything, tq_y, train_y))
    return {
        "validation_map_all": float(np.mean(val)),
        "test_map_all": float(np.mean(test)),
        "paper_map_all": float(np.mean(paper)),
        "validation_queries": int(len(vq_y)),
        "test_queries": int(len(q)),
        "paper_retrieval_items": int(len(train)),
        "train_seconds": seconds,
    }


def _average_models(models: list[Any], weights: list[int]) -> None:
    """FedAvg in place: every model gets the weighted mean of their parameters."""
    total = float(sum(weights))
    states = [m.state_dict() for m in models]
    mean = {
        name: sum(
            st[name].double() * (w / total)
            for st, w in zip(states, weights, strict=True)
        )
        if states[0][name].is_floating_point()
        else states[0][name]
        for name in states[0]
    }
    for m in models:
        m.load_state_dict(
            {k: v.to(states[0][k].dtype) for k, v in mean.items()}, strict=True
        )


def _map_all(q: Any, db: Any, q_labels: Any, db_labels: Any) -> float:
    return evaluate_retrieval(q, db, q_labels, db_labels, top_k=100, ks=(10,)).map_all


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("pfmh", "contrast", ("seeds",))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    base = {**BASE, "rounds": args.rounds, **parse_overrides(args.set)}
    resolved_settings({**base, "seed": seeds[0]})  # a bad value fails here
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(form, s) for s in seeds for form in CONTRASTS]

    def run(job: tuple[str, int]) -> dict[str, Any]:
        form, seed = job
        settings = resolved_settings({**base, "seed": seed, "pfmh.contrast": form})
        return {
            "name": f"{form} s{seed}",
            "contrast": form,
            "seed": seed,
            **mini_federation(settings, args.clients),
        }

    rows, _ = run_sweep(
        jobs,
        run,
        rows_path=args.out / "rows.jsonl",
        resume=args.resume,
        name=lambda j: f"{j[0]} s{j[1]}",
        describe=lambda r: (
            f"val {r['validation_map_all']:.4f} test "
            f"{r['test_map_all']:.4f} ({r['train_seconds']:.0f} s)"
        ),
    )
    rows = load_rows(args.out / "rows.jsonl")
    write(rows, base, args)


def write(rows: list[dict[str, Any]], base: dict[str, Any], args: Any) -> None:
    """Table and summary: per-form means and the paired InfoNCE - decoupled verdict."""
    lines = [
        f"Protocol: in-process personalized PFMH (library, no Flower), "
        f"{args.clients} clients, {base}; validation = the clients' local queries "
        "against each client's local database (choice made here); test = the "
        "server's queries against each client's partition (PFMH's global "
        "protocol, reported only). mAP@ALL %.",
        "",
        *table_head(
            "seed", *(f"{f} {part}" for f in CONTRASTS for part in ("val", "test"))
        ),
    ]
    for seed in sorted({r["seed"] for r in rows}):
        cells = []
        for f in CONTRASTS:
            r = next(
                (r for r in rows if r["seed"] == seed and r["contrast"] == f), None
            )
            cells += (
                [MISSING, MISSING]
                if r is None
                else [
                    f"{100 * r['validation_map_all']:.2f}",
                    f"{100 * r['test_map_all']:.2f}",
                ]
            )
        lines.append(table_row(seed, *cells))
    verdicts = {}
    for metric in ("validation_map_all", "test_map_all"):
        by = {
            f: {r["seed"]: 100 * r[metric] for r in rows if r["contrast"] == f}
            for f in CONTRASTS
        }
        if by["infonce"] and by["decoupled"]:
            v = paired_verdict(by["infonce"], by["decoupled"], "greater")
            verdicts[metric] = v.to_dict()
            lines += ["", f"InfoNCE > decoupled on {metric}: {v.text()}."]
    secs = sum(r["train_seconds"] for r in rows)
    lines += ["", f"Training wall time: {secs / 60:.1f} min over {len(rows)} runs."]
    summary = {
        "setup": {**base, "clients": args.clients},
        "rows": rows,
        "verdicts": verdicts,
    }
    print(write_tables(args.out, summary, "\n".join(lines)))
