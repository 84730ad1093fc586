"""Update density and mAP of the sparsifiers: elastic net vs top-k at equal density.

``python -m experiments.project update-density --clients 3 --rounds 5 --l1 0.01``

runs FedAvg in process (no Flower engine) through the real client path: each round
every client trains with :func:`strategies.fedavg.trainer.dpsh_trainer` and its
reply goes through :func:`clients.train_reply.finish_train_reply`; the server
step is Flower's FedAvg, the mean of the local models weighted by ``num-examples``.
It measures the *density* of every sent update (fraction of non-zero values of
``w_local - w_global``, mean over clients and rounds) and, after the last round,
mAP@ALL and mAP@K of the server's queries against the database (the union of the
clients' data; the same split as the simulation), for:

* ``dense``: no sparsifier;
* ``elastic-net``: ``updates.sparsifier = "elastic-net"`` with each ``--l1``
  (``elastic-net-l2`` = ``--l2``);
* ``read-off only``: the same support read-off with a negligible penalty
  (``l1 = 1e-12``): the sparsity the threshold makes without the penalty;
* ``top-k``: ``updates.sparsity`` = the elastic-net run's mean sparsity (same
  density).

Prints a Markdown table (``--out`` also writes the rows as JSON).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from clients.data import load_local_data
from clients.train_reply import finish_train_reply
from clients.trainers import TrainContext
from experiments.centralized import split_retrieval, train_centralized
from experiments.lib.grids import POSITIVE, flag_list
from experiments.lib.overrides import parse_overrides, resolved_settings
from experiments.lib.tables import MISSING, table_head, table_row
from hashdata import load_split
from hashing.train import select_device
from hashing.update_sparsity import flatten_arrays, unflatten_arrays
from settings import keys as K
from settings.run_model import build_run_model
from settings.run_settings import RunSettings
from strategies.fedavg.trainer import dpsh_trainer


def run_fedavg(settings: RunSettings, num_clients: int) -> dict[str, Any]:
    """FedAvg rounds through the real client path; density per update and mAP."""
    split = load_split(settings.dataset, **settings.split_options())
    parts = [
        load_local_data(settings, partition_id=p, num_partitions=num_clients)
        for p in range(num_clients)
    ]
    device = select_device(settings.device, deterministic=settings.cuda_deterministic)
    torch.manual_seed(settings.seed)
    model = build_run_model(settings, parts[0].input_shape)
    initial = split_retrieval(model, split, settings, device)
    state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    densities: list[float] = []
    for server_round in range(1, settings.rounds + 1):
        reference, layout = flatten_arrays(state)
        total = np.zeros_like(reference)
        weight = 0
        for pid, data in enumerate(parts):
            arrays = {k: torch.from_numpy(v) for k, v in state.items()}
            global_arrays = ArrayRecord(arrays)
            content = RecordDict(
                {
                    K.ARRAYS: global_arrays,
                    K.CONFIG: ConfigRecord({K.SERVER_ROUND: server_round}),
                }
            )
            seed = settings.seed * 1_000_003 + server_round * 101 + pid
            ctx = TrainContext(
                settings=settings,
                data=data.training_view(),
                device=device,
                partition_id=pid,
                server_round=server_round,
                generator=torch.Generator().manual_seed(seed),
            )
            reply = finish_train_reply(
                dpsh_trainer(content, ctx),
                global_arrays=global_arrays,
                settings=settings,
                partition_id=pid,
                rng=np.random.default_rng(seed),
            )
            local, _ = flatten_arrays(
                {k: a.numpy() for k, a in reply[K.ARRAYS].items()}
            )
            update = local - reference
            densities.append(np.count_nonzero(update) / update.size)
            n = int(reply[K.METRICS][K.NUM_EXAMPLES])
            total += n * local
            weight += n
        state = unflatten_arrays(total / weight, layout)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    report = split_retrieval(model, split, settings, device)
    return {
        "initial_map_all": initial.map_all,
        "initial_map_at_k": initial.map_at_k,
        "density": float(np.mean(densities)),
        "density_min": float(np.min(densities)),
        "density_max": float(np.max(densities)),
        "map_all": report.map_all,
        "map_at_k": report.map_at_k,
        "dimension": int(reference.size),
    }


def main() -> None:
    """CLI; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--l1", default="0.01", help="comma-separated lambda_1")
    parser.add_argument("--l2", type=float, default=0.0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    base = {"rounds": args.rounds, "min-train-nodes": args.clients}
    base.update(parse_overrides(args.set))

    def run(label: str, extra: dict[str, Any]) -> dict[str, Any]:
        settings = resolved_settings({**base, **extra})
        row = {"run": label, **extra, **run_fedavg(settings, args.clients)}
        print(json.dumps(row), flush=True)
        return row

    net = {"updates.sparsifier": "elastic-net", "updates.elastic-net-l2": 0.0}
    rows = [
        run("dense", {}),
        run("read-off only (l1=1e-12)", {**net, "updates.elastic-net-l1": 1e-12}),
    ]
    for l1 in flag_list(parser, "--l1", args.l1, POSITIVE):
        net = {**net, "updates.elastic-net-l1": l1, "updates.elastic-net-l2": args.l2}
        elastic = run(f"elastic-net l1={l1:g} l2={args.l2:g}", net)
        rows.append(elastic)
        sparsity = round(1.0 - elastic["density"], 4)
        rows.append(run(f"top-k sparsity={sparsity:g}", {"updates.sparsity": sparsity}))
    # beside them: the untrained network (round 0, the same for every run) and the
    # same network trained centrally on the whole database for rounds x local epochs
    ceiling = train_centralized(resolved_settings(base))["final"]
    rows.append(
        {
            "run": "untrained (round 0)",
            "map_all": rows[0]["initial_map_all"],
            "map_at_k": rows[0]["initial_map_at_k"],
        }
    )
    rows.append(
        {
            "run": "centralized (ceiling)",
            "map_all": ceiling["map_all"],
            "map_at_k": ceiling["map_at_k"],
        }
    )
    print()
    print(
        "\n".join(
            table_head("run", "update density % (min-max)", "mAP@ALL %", "mAP@K %")
        )
    )
    for r in rows:
        density = (
            f"{100 * r['density']:.1f} ({100 * r['density_min']:.1f}-"
            f"{100 * r['density_max']:.1f})"
            if "density" in r
            else MISSING
        )
        maps = f"{100 * r['map_all']:.1f}", f"{100 * r['map_at_k']:.1f}"
        print(table_row(r["run"], density, *maps))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
