"""PFMH's per-client retrieval protocol (ours: local queries; secondary), no Flower.

Each client ranks its own *local database* for its own *local queries* (a seeded,
stratified split of its partition, ``clients.data.local_query_split``) with its own
model -- its personal one in personalized mode, the global one otherwise -- and the
mAPs are averaged over clients without weights (:func:`mean_over_clients`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from hashing.codes import sign_codes
from hashing.retrieval import RetrievalReport, evaluate_retrieval
from hashing.train import encode


def local_retrieval(
    model: torch.nn.Module,
    inputs: Mapping[str, torch.Tensor],
    labels: torch.Tensor,
    *,
    queries: torch.Tensor,
    database: torch.Tensor,
    top_k: int,
    ks: Sequence[int],
    device: torch.device,
) -> RetrievalReport | None:
    """Rank one client's local database for its local queries (Hamming).

    Parameters
    ----------
    model : torch.nn.Module
        The client's multi-modal hashing network.
    inputs : mapping of str to torch.Tensor
        Modality -> (n, ...) samples of the client's partition.
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot.
    queries, database : torch.Tensor
        int64 positions into the partition (disjoint).
    top_k : int
        K of mAP@K (clipped to the database size).
    ks : sequence of int
        Cut-offs of precision@K.
    device : torch.device
        Where to encode.

    Returns
    -------
    RetrievalReport or None
        ``None`` when there is no query or no database item.
    """
    if len(queries) == 0 or len(database) == 0:
        return None
    codes = sign_codes(encode(model, dict(inputs), device=device))
    y = labels.numpy()
    q, db = queries.numpy(), database.numpy()
    return evaluate_retrieval(codes[q], codes[db], y[q], y[db], top_k=top_k, ks=ks)


def mean_over_clients(values: Sequence[float]) -> float | None:
    """Unweighted mean over clients (our per-client protocol); ``None`` if empty."""
    return float(np.mean(values)) if len(values) else None


#: Prefix of the global protocol's per-client precision@K metrics (K appended).
PRECISION_PREFIX = "server_queries_client_db_precision_at_"


def precision_over_clients(
    reports: Sequence[RetrievalReport],
) -> dict[str, float | None]:
    """Precision@K of the server's queries, averaged over clients, for every K.

    One report per client (the server's queries against that client's database);
    the PFMH paper's Fig. 4 (top-K precision) in the global per-client protocol.
    K above a client's database size is clipped to it (``precision_at_k``).

    Returns
    -------
    dict
        ``{PRECISION_PREFIX + str(K): unweighted mean over clients}``; empty when
        there is no report.
    """
    if not reports:
        return {}
    ks = reports[0].ks
    if any(r.ks != ks for r in reports):
        raise ValueError(
            f"clients' reports have different K: {[r.ks for r in reports]}"
        )
    return {
        f"{PRECISION_PREFIX}{k}": mean_over_clients(
            [r.precision_at_k[i] for r in reports]
        )
        for i, k in enumerate(ks)
    }
