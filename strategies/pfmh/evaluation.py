"""PFMH's retrieval evaluation: the global protocol (primary) and ours (per-client).

Three numbers, each averaged the way its protocol says (docs/methods/pfmh.md). The
paper fixes global query / retrieval splits (Wikipedia: 693 queries, 2,173
retrieval = training samples) and encodes a query "with the trained model on each
client"; the **global protocol** below is the closest we have to that and is the
primary number. The per-client local protocol is **ours**, secondary: the paper
does not describe it.

``server_queries_client_db_map_all`` / ``..._map_at_k`` / ``..._precision_at_<K>``
    -- global protocol, per client
    (primary) The server's held-out query set ranked against *each client's own*
    database (its whole partition), both encoded with that client's own model,
    then averaged over clients without weights. In personalized mode the server
    sends the query *inputs* with the request (they are the held-out test split,
    not any client's data), the client returns the query codes and publishes its
    database codes through ``publish_codes``, and the server computes the mAPs. In
    fedavg mode the same number is computed from the codes of the union protocol
    below.
``map_all`` / ``map_at_k`` -- global protocol, union (fedavg mode only)
    Server queries encoded with the global model against the union of all
    published partitions (:meth:`server.evaluation.RetrievalEvaluator.collect`,
    the base class of :class:`PFMHEvaluator`). It needs
    one model that encodes every database item: personalized PFMH has one model per
    client, whose codes live in different Hamming spaces, so a union ranking would
    compare incomparable codes and is not computed (the report is ``None``).
``local_map_all`` / ``local_map_at_k`` -- ours (per-client, local queries), secondary
    Every client ranks its *local database* (its partition minus its local queries,
    which is also what it trains on) for its *local queries* (a seeded stratified
    ``query-fraction`` of its partition, never trained on) with its own model:
    the personal model from ``context.state`` in personalized mode, the sent global
    model in fedavg mode. Only the two mAPs leave the node (``query.pfmh_eval``);
    the server averages them over clients **without weights**. Under label skew a
    client's database holds few classes, so this number is high even for an
    untrained network.
"""

from __future__ import annotations

import time
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message
from flwr.common.logger import log

from hashing.pfmh.evaluation import (
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
from hashing.retrieval import RetrievalReport
from privacy.ledger import MechanismUse
from server.discovery import NodeInfo
from server.evaluation import Evaluation, RetrievalEvaluator
from settings import keys as K


class PFMHEvaluator(RetrievalEvaluator):
    """Evaluate PFMH by the global protocol (primary) and ours (per-client, local).

    A :class:`server.evaluation.RetrievalEvaluator` (its union protocol, code
    validation and ranking) that also asks every node for ``pfmh_eval``.

    Parameters
    ----------
    *args, **kwargs
        As :class:`server.evaluation.RetrievalEvaluator`; the query inputs are a
        dict modality -> (nq, d) tensor, and ``model_factory`` builds the
        multi-modal network (used in fedavg mode only).
    personalized : bool
        ``pfmh.mode = "personalized"``: no global model.
    """

    def __init__(self, *args: Any, personalized: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        inputs = self.queries.inputs
        if not isinstance(inputs, dict):
            raise ValueError("PFMH evaluation needs multi-modal query inputs (a dict)")
        self.personalized = personalized
        self._query_record = ArrayRecord(
            {m: Array(np.ascontiguousarray(x.numpy())) for m, x in inputs.items()}
        )

    def evaluate(self, server_round: int, arrays: ArrayRecord) -> Evaluation:
        """Run the protocols of this mode; see the module docstring."""
        start = time.perf_counter()
        config = ConfigRecord({K.SERVER_ROUND: server_round})
        replies = self.ask(
            server_round,
            {K.CONFIG: config, K.PFMH_QUERIES: self._query_record}
            if self.personalized
            else {K.CONFIG: config, K.ARRAYS: arrays},
            K.QUERY_PFMH_EVAL,
            what="query.pfmh_eval reply",
        )
        local_all, local_k = [], []
        per_db: list[RetrievalReport] = []
        disclosures: list[tuple[int, tuple[MechanismUse, ...]]] = []
        for info, reply in replies:
            got = self._read_local(reply, info)
            if got is not None:
                local_all.append(got[0])
                local_k.append(got[1])
            if self.personalized and not reply.has_error():  # errors: logged above
                codes = self.read_codes(reply, info, with_queries=True)
                if codes is not None:
                    assert codes.query_codes is not None
                    per_db.append(
                        self.rank(codes.query_codes, codes.db_codes, codes.labels)
                    )
                    if codes.uses:
                        disclosures.append((info.partition_id, tuple(codes.uses)))
        report = None
        clients = len(per_db)
        if not self.personalized:
            got_codes = self.collect(server_round, arrays)
            report = self.rank(
                got_codes.query_codes,
                np.concatenate(got_codes.db_codes),
                np.concatenate(got_codes.db_labels),
            )
            per_db = [
                self.rank(got_codes.query_codes, db, labels)
                for db, labels in zip(
                    got_codes.db_codes, got_codes.db_labels, strict=True
                )
            ]
            disclosures = list(got_codes.disclosures)
            clients = len(got_codes.db_codes)
        if not per_db and not local_all:
            raise RuntimeError(
                f"round {server_round}: no client answered query.pfmh_eval"
            )
        per_client = {
            LOCAL_MAP_ALL: mean_over_clients(local_all),
            LOCAL_MAP_AT_K: mean_over_clients(local_k),
            LOCAL_CLIENTS: float(len(local_all)),
            SQ_CLIENT_DB_MAP_ALL: mean_over_clients([r.map_all for r in per_db]),
            SQ_CLIENT_DB_MAP_AT_K: mean_over_clients([r.map_at_k for r in per_db]),
            **precision_over_clients(per_db),
        }
        return Evaluation(
            report=report,
            clients=clients,
            seconds=time.perf_counter() - start,
            disclosures=tuple(disclosures),
            per_client=per_client,
        )

    def _read_local(self, reply: Message, info: NodeInfo) -> tuple[float, float] | None:
        """Return the client's local mAP@ALL and mAP@K, or None (logged if bad)."""
        who = f"partition {info.partition_id} (node {info.node_id})"
        if reply.has_error():
            log(WARNING, "query.pfmh_eval from %s failed: %s", who, reply.error.reason)
            return None
        try:
            metrics = reply.content[K.METRICS]
            if K.LOCAL_MAP_ALL not in metrics:  # no local query on this client
                return None
            values = (float(metrics[K.LOCAL_MAP_ALL]), float(metrics[K.LOCAL_MAP_AT_K]))
        except (KeyError, TypeError, ValueError) as exc:
            log(WARNING, "query.pfmh_eval from %s rejected: malformed (%r)", who, exc)
            return None
        if not all(0.0 <= v <= 1.0 for v in values):
            log(
                WARNING,
                "query.pfmh_eval from %s rejected: mAP %s not in [0, 1]",
                who,
                values,
            )
            return None
        return values


def build_pfmh_evaluator(settings: Any, *args: Any, **kwargs: Any) -> PFMHEvaluator:
    """PFMH's evaluator for the run (personalized or fedavg mode)."""
    return PFMHEvaluator(*args, personalized=settings.pfmh.personalized, **kwargs)


def pfmh_protocol(settings: Any, text: str) -> str:
    """Extend the foundation protocol text with PFMH's global and local protocols."""
    top_k = settings.map_top_k
    local = (
        "Secondary, ours (per-client protocol, local queries; local_map_*): each "
        "client splits its partition (seeded, stratified) into "
        f"{settings.query_fraction:.0%} local queries and a local database, trains "
        "on the local database only, ranks it for its local queries with its own "
        f"model; mAP@ALL and mAP@{top_k} averaged over clients without weights"
    )
    per_db = (
        "the server's queries ranked against each client's own partition, both "
        "encoded with that client's own model, mAP@ALL and "
        f"mAP@{top_k} averaged over clients without weights "
        "(server_queries_client_db_*)"
    )
    if settings.pfmh.mode == "personalized":
        return (
            "PFMH global protocol (primary, the closest to the paper's fixed query "
            f"/ retrieval split): {per_db}; the query inputs are sent to the "
            "clients. No union ranking: personalized models encode into different "
            f"Hamming spaces. {local}. Data: {text}"
        )
    return (
        f"{text}. PFMH global protocol (primary, the closest to the paper's fixed "
        f"query / retrieval split): the union ranking above (map_*) and {per_db}. "
        f"{local}"
    )


def pfmh_table(rows: list[dict[str, Any]]) -> str:
    """PFMH mAP@ALL: global (union, fedavg mode; per client db), then ours (local)."""

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.4f}"

    # mAP@ALL; "global" = the server's queries (primary), "ours" = local queries
    head = (
        f"{'round':>5} | {'global union':>12} | {'global per-client db':>20} | "
        "ours: local queries"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if LOCAL_MAP_ALL in r:
            lines.append(
                f"{r['round']:>5} | {fmt(r.get('map_all')):>12} | "
                f"{fmt(r.get(SQ_CLIENT_DB_MAP_ALL)):>20} | "
                f"{fmt(r.get(LOCAL_MAP_ALL))}"
            )
    return "\n".join(lines)
