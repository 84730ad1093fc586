"""DPcode's server side: ask every node for its release, merge, account, write.

One query round: the server sends ``query.dpcode`` to every node, screens each
reply (a malformed release, a missing or wrong privacy report, or an epsilon above
the configured one is rejected and logged; the run goes on with the rest), charges
each accepted release to the privacy ledger (epsilon per frame, once per client),
and merges them with :func:`privacy.dpcode.merge_releases` (post-processing: the
merged list is eps-DP per frame for each client's frames).

Evaluation only: the merged top-k is compared with the exact (non-private) top-k
of the pooled client data, which the simulation lets the server rebuild from the
same partitioning; in a deployment whose server lacks the data this part is
skipped and said so.
"""

from __future__ import annotations

import time
from logging import INFO, WARNING
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from clients.data import load_local_data
from privacy.dpcode import (
    Frames,
    Release,
    Transactions,
    f_score,
    frames_to_transactions,
    ground_truth,
    merge_releases,
    relative_error,
)
from privacy.dpcode.itemsets import Pattern, occurring_supports
from privacy.ledger import PrivacyLedger
from privacy.noise import SEEDED_WARNING
from server.discovery import NodeInfo, describe_nodes
from server.results import RunResults
from server.run_id import default_run_id
from settings import keys as K
from settings.privacy_records import read_privacy
from settings.run_settings import RunSettings
from strategies.dpcode.client import DPCODE, MECHANISM
from strategies.dpcode.items import client_items, codebook
from strategies.dpcode.records import read_release

QUERY_ROUND = 1


def run_dpcode(grid: Grid, settings: RunSettings, *, simulation: bool) -> RunResults:
    """Run DPcode over every node; write ``results/<run-id>/``; return the results."""
    cfg = settings.dpcode
    model_state = codes_model_state(settings)  # a missing model fails first
    nodes = describe_nodes(grid, min_nodes=settings.min_train_nodes)
    results = RunResults(settings.results_dir, default_run_id(settings))
    started = time.perf_counter()
    records: dict[str, Any] = {K.CONFIG: ConfigRecord({K.SERVER_ROUND: QUERY_ROUND})}
    if model_state is not None:
        records[K.ARRAYS] = ArrayRecord(model_state)
    messages = [
        Message(
            content=RecordDict(records),
            message_type=K.QUERY_DPCODE,
            dst_node_id=node_id,
        )
        for node_id in nodes
    ]
    replies = {
        r.metadata.src_node_id: r
        for r in grid.send_and_receive(messages, timeout=settings.round_timeout)
    }
    ledger = PrivacyLedger()
    accepted: dict[int, Release] = {}
    for node_id, info in sorted(nodes.items(), key=lambda n: n[1].partition_id):
        release = _screen(replies.get(node_id), info, settings)
        if release is None:
            continue
        accepted[info.partition_id] = release
        ledger.charge(
            info.partition_id,
            QUERY_ROUND,
            MECHANISM,
            epsilon=release.epsilon_spent,
            delta=release.delta,
            unit=release.unit,
            note=SEEDED_WARNING if settings.seeded_noise else "",
        )
    if not accepted:
        raise RuntimeError("no node returned a valid DPcode release")
    merged = merge_releases(list(accepted.values()), cfg.k)
    quality = _evaluate(settings, merged, nodes, model_state) if simulation else None
    elapsed = time.perf_counter() - started
    results.write_json(
        "config.json",
        {
            "config": settings.to_dict(),
            "protocol": _protocol(settings, len(nodes)),
            "nodes": sorted(i.partition_id for i in nodes.values()),
        },
    )
    results.write_json(
        "releases.json",
        {
            "merged": merged.as_dict(),
            "clients": {str(p): r.as_dict() for p, r in accepted.items()},
        },
    )
    ledger.write(results.path("privacy_ledger.json"))
    results.write_json(
        "summary.json",
        {
            "strategy": "dpcode",
            "clients": len(accepted),
            "rejected": len(nodes) - len(accepted),
            "published": len(merged.patterns),
            "evaluation": quality
            or "skipped: the server has no copy of the clients' data outside "
            "the simulation",
            "privacy": {
                "mechanism": MECHANISM,
                "max_client_epsilon": max(r.epsilon_spent for r in accepted.values()),
                "unit": merged.unit,
                "delta": merged.delta,
                "merged_guarantee": "post-processing: eps-DP per frame for each "
                "client's frames, eps = that client's epsilon (frames on several "
                "clients: their epsilons add)",
                "seeded_noise": settings.seeded_noise,
            },
            "seconds": elapsed,
        },
    )
    log(
        INFO,
        "DPcode: %d releases merged into %d patterns",
        len(accepted),
        len(merged.patterns),
    )
    if quality is not None:
        log(
            INFO,
            "DPcode vs the exact pooled top-%d: F-score %.4f, median RE %.4f",
            cfg.k,
            quality["f_score"],
            quality["relative_error"],
        )
    log(INFO, "Privacy ledger (per frame):\n%s", ledger.table())
    final = results.finish()
    log(INFO, "Results: %s", final)
    return results


def codes_model_state(settings: RunSettings) -> dict[str, torch.Tensor] | None:
    """Return the hashing network's arrays of ``dpcode.codes-model`` (None: frames).

    Raises
    ------
    ConfigError
        The file cannot be read; the message names the key and the path.
    """
    cfg = settings.dpcode
    if cfg.source != "codes":
        return None
    try:
        state = torch.load(cfg.codes_model, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as exc:
        from settings.schema import ConfigError

        raise ConfigError(
            f"{cfg.key('codes_model')}={cfg.codes_model!r}: {exc}"
        ) from None
    # a FedHAP model.pt also holds the discriminator: keep the hashing network
    return {k: v for k, v in state.items() if not k.startswith(K.DISCRIMINATOR_PREFIX)}


def _screen(
    reply: Message | None, info: NodeInfo, settings: RunSettings
) -> Release | None:
    who = f"partition {info.partition_id}"
    if reply is None:
        log(WARNING, "DPcode: no reply from %s", who)
        return None
    if reply.has_error():
        log(WARNING, "DPcode: %s failed: %s", who, reply.error.reason)
        return None
    try:
        content = reply.content
        release = read_release(content[DPCODE], content[K.CONFIG], k=settings.dpcode.k)
        uses = read_privacy(content[K.PRIVACY])
    except (KeyError, TypeError, ValueError) as exc:
        log(WARNING, "DPcode: %s rejected: malformed release (%s)", who, exc)
        return None
    reported = [u for u in uses if u.mechanism == MECHANISM]
    limit = settings.dpcode.epsilon * (1 + 1e-9)
    if (
        len(reported) != 1
        or reported[0].unit != release.unit
        or release.unit != "per frame"
        or not 0 < reported[0].epsilon <= limit
        or abs(reported[0].epsilon - release.epsilon_spent) > 1e-9
    ):
        log(
            WARNING,
            "DPcode: %s rejected: its privacy report does not state one release of "
            "epsilon <= %g per frame",
            who,
            settings.dpcode.epsilon,
        )
        return None
    return release


def _evaluate(
    settings: RunSettings,
    merged: Release,
    nodes: dict[int, NodeInfo],
    model_state: dict[str, torch.Tensor] | None,
) -> dict[str, Any]:
    """F-score and median RE of the merged list against the exact pooled top-k."""
    cfg = settings.dpcode
    num = next(iter(nodes.values())).num_partitions
    truth, tx, pooled = pooled_truth(settings, num, model_state)
    exact = occurring_supports(tx, cfg.max_length)
    return {
        "f_score": f_score(truth, merged.patterns),
        "relative_error": relative_error(
            merged.supports, [exact.get(p, 0) for p in merged.patterns]
        )
        if merged.patterns
        else None,
        "pooled_frames": pooled,
        "what": "merged top-k against the exact top-k of all clients' data pooled "
        "(evaluation only: the simulation lets the server rebuild the partitions)",
    }


def pooled_truth(
    settings: RunSettings,
    num_partitions: int,
    model_state: dict[str, torch.Tensor] | None,
) -> tuple[list[Pattern], Transactions, int]:
    """Return the exact top-k of all partitions pooled, their transactions, their size.

    Evaluation only: what the clients count (:func:`client_items`) over the union
    of every partition, as the simulation lets the server rebuild it.
    """
    cfg = settings.dpcode
    inputs = torch.cat(
        [
            load_local_data(
                settings, partition_id=p, num_partitions=num_partitions
            ).inputs
            for p in range(num_partitions)
        ]
    )
    items = client_items(settings, inputs, model_state=model_state)
    book = codebook(settings)
    truth, _ = ground_truth(items, k=cfg.k, max_length=cfg.max_length, codebook=book)
    tx = (
        items
        if book is None
        else frames_to_transactions(Frames.from_arrays(items), book)
    )
    return list(truth), tx, int(inputs.shape[0])


def _protocol(settings: RunSettings, clients: int) -> str:
    cfg = settings.dpcode
    what = (
        f"frames: {cfg.patch}x{cfg.patch} patches (stride {cfg.stride}) of each "
        f"image, words of the public Hadamard codebook of size {2 * cfg.patch**2}"
        if cfg.source == "frames"
        else f"codes: {cfg.chunk_bits}-bit chunks of each item's hash code from "
        f"{cfg.codes_model}"
    )
    return (
        f"DPcode federated analytics over {clients} clients ({settings.dataset} "
        f"database partitioned {settings.partitioning}, seed {settings.seed}); {what}; "
        f"each client publishes its top-{cfg.k} patterns (length <= "
        f"{cfg.max_length}, variant {cfg.variant}) at epsilon {cfg.epsilon} per "
        "frame (split "
        f"{cfg.split} phase 1); the server sums each pattern's noisy supports over "
        f"clients and keeps the top {cfg.k}"
    )
