"""PFMH's retrieval evaluation: per-client protocol and global protocols.

Three numbers, each averaged the way its protocol says (README "PFMH"):

``local_map_all`` / ``local_map_at_k`` -- the paper's per-client protocol
    Every client ranks its *local database* (its partition minus its local queries,
    which is also what it trains on) for its *local queries* (a seeded stratified
    ``query-fraction`` of its partition, never trained on) with its own model:
    the personal model from ``context.state`` in personalized mode, the sent global
    model in fedavg mode. Only the two mAPs leave the node (``op = "pfmh-eval"``);
    the server averages them over clients **without weights**, as the paper.
``server_queries_client_db_map_all`` / ``..._map_at_k`` -- global queries, per client
    The server's held-out query set ranked against *each client's own* database
    (its whole partition), with that client's model, then averaged over clients
    without weights. In personalized mode the server sends the query *inputs* with
    the request (they are the held-out test split, not any client's data), the
    client returns the query codes and publishes its database codes through
    ``publish_codes``, and the server computes the mAPs. In fedavg mode the same
    number is computed from the codes of the union protocol below.
``map_all`` / ``map_at_k`` -- the foundation protocol (fedavg mode only)
    Server queries encoded with the global model against the union of all
    published partitions (:class:`server.evaluation.RetrievalEvaluator`). It needs
    one model that encodes every database item: personalized PFMH has one model per
    client, whose codes live in different Hamming spaces, so a union ranking would
    compare incomparable codes and is not computed (the report is ``None``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from logging import WARNING

import numpy as np
import torch
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    RecordDict,
)
from flwr.common.logger import log
from flwr.serverapp import Grid

from hashing.codes import unpack_bytes
from hashing.pfmh.evaluation import mean_over_clients
from hashing.retrieval import evaluate_retrieval
from privacy.ledger import MechanismUse
from server.discovery import NodeInfo
from server.evaluation import (
    Evaluation,
    QuerySet,
    RetrievalEvaluator,
    _codes_problem,
)
from settings import keys as K
from settings.privacy_records import missing_mechanisms, read_privacy

#: Names of the per-client metrics in rounds.jsonl / summary.json.
LOCAL_MAP_ALL = "local_map_all"
LOCAL_MAP_AT_K = "local_map_at_k"
SQ_CLIENT_DB_MAP_ALL = "server_queries_client_db_map_all"
SQ_CLIENT_DB_MAP_AT_K = "server_queries_client_db_map_at_k"
LOCAL_CLIENTS = "local_clients"  # clients that contributed a local mAP


class PFMHEvaluator:
    """Evaluate PFMH by the per-client protocol and the global protocols.

    Parameters
    ----------
    grid : Grid
        The ServerApp's grid.
    nodes : dict
        ``{node_id: NodeInfo}`` from discovery; asked in partition-id order.
    queries : QuerySet
        The server's query set, inputs as a dict modality -> (nq, d) tensor.
    model_factory : callable
        Returns a fresh multi-modal network of this run (fedavg mode).
    personalized : bool
        ``pfmh.mode = "personalized"``: no global model.
    bits, top_k, ks, device, required_mechanisms, timeout_s
        As :class:`server.evaluation.RetrievalEvaluator`.
    """

    def __init__(
        self,
        grid: Grid,
        nodes: dict[int, NodeInfo],
        queries: QuerySet,
        model_factory: Callable[[], torch.nn.Module],
        *,
        personalized: bool,
        bits: int,
        top_k: int,
        ks: tuple[int, ...],
        device: torch.device,
        required_mechanisms: tuple[str, ...] = (),
        timeout_s: float = 3600.0,
    ) -> None:
        if not isinstance(queries.inputs, dict):
            raise ValueError("PFMH evaluation needs multi-modal query inputs (a dict)")
        self.grid = grid
        self.nodes = dict(sorted(nodes.items(), key=lambda kv: kv[1].partition_id))
        self.queries = queries
        self.personalized = personalized
        self.bits = bits
        self.top_k = top_k
        self.ks = ks
        self.timeout_s = timeout_s
        self.required_mechanisms = tuple(required_mechanisms)
        self.union = (
            None
            if personalized
            else RetrievalEvaluator(
                grid,
                nodes,
                queries,
                model_factory,
                bits=bits,
                top_k=top_k,
                ks=ks,
                device=device,
                required_mechanisms=required_mechanisms,
                timeout_s=timeout_s,
            )
        )
        self._query_record = ArrayRecord(
            {
                m: Array(np.ascontiguousarray(x.numpy()))
                for m, x in queries.inputs.items()
            }
        )

    def evaluate(self, server_round: int, arrays: ArrayRecord) -> Evaluation:
        """Run the protocols of this mode; see the module docstring."""
        start = time.perf_counter()
        replies = self._ask(server_round, arrays)
        local_all, local_k = [], []
        per_db: list[tuple[float, float]] = []
        disclosures: list[tuple[int, tuple[MechanismUse, ...]]] = []
        for info, reply in replies:
            got = self._read_local(reply, info)
            if got is not None:
                local_all.append(got[0])
                local_k.append(got[1])
            if self.personalized:
                codes = self._read_codes(reply, info)
                if codes is not None:
                    per_db.append(self._client_db_map(codes[0], codes[1], codes[2]))
                    if codes[3]:
                        disclosures.append((info.partition_id, tuple(codes[3])))
        report = None
        clients = len(per_db)
        if self.union is not None:
            got_codes = self.union.collect(server_round, arrays)
            report = evaluate_retrieval(
                got_codes.query_codes,
                np.concatenate(got_codes.db_codes),
                self.queries.labels,
                np.concatenate(got_codes.db_labels),
                top_k=self.top_k,
                ks=self.ks,
            )
            per_db = [
                self._client_db_map(got_codes.query_codes, db, labels)
                for db, labels in zip(
                    got_codes.db_codes, got_codes.db_labels, strict=True
                )
            ]
            disclosures = list(got_codes.disclosures)
            clients = len(got_codes.db_codes)
        if not per_db and not local_all:
            raise RuntimeError(f"round {server_round}: no client answered pfmh-eval")
        per_client = {
            LOCAL_MAP_ALL: mean_over_clients(local_all),
            LOCAL_MAP_AT_K: mean_over_clients(local_k),
            LOCAL_CLIENTS: float(len(local_all)),
            SQ_CLIENT_DB_MAP_ALL: mean_over_clients([m for m, _ in per_db]),
            SQ_CLIENT_DB_MAP_AT_K: mean_over_clients([k for _, k in per_db]),
        }
        return Evaluation(
            report=report,
            clients=clients,
            seconds=time.perf_counter() - start,
            disclosures=tuple(disclosures),
            per_client=per_client,
        )

    def _client_db_map(
        self, query_codes: np.ndarray, db_codes: np.ndarray, db_labels: np.ndarray
    ) -> tuple[float, float]:
        rep = evaluate_retrieval(
            query_codes,
            db_codes,
            self.queries.labels,
            db_labels,
            top_k=self.top_k,
            ks=self.ks,
        )
        return rep.map_all, rep.map_at_k

    def _ask(
        self, server_round: int, arrays: ArrayRecord
    ) -> list[tuple[NodeInfo, Message]]:
        """Send ``pfmh-eval`` to every node; (info, reply) in partition order."""
        config = ConfigRecord({K.SERVER_ROUND: server_round})
        content = (
            RecordDict({K.CONFIG: config, K.PFMH_QUERIES: self._query_record})
            if self.personalized
            else RecordDict({K.CONFIG: config, K.ARRAYS: arrays})
        )
        messages = [
            Message(
                content=content, message_type=K.QUERY_PFMH_EVAL, dst_node_id=node_id
            )
            for node_id in self.nodes
        ]
        replies = {
            r.metadata.src_node_id: r
            for r in self.grid.send_and_receive(messages, timeout=self.timeout_s)
        }
        out = []
        for node_id, info in self.nodes.items():
            reply = replies.get(node_id)
            if reply is None:
                log(
                    WARNING,
                    "round %d: no pfmh-eval reply from partition %d (node %d)",
                    server_round,
                    info.partition_id,
                    node_id,
                )
                continue
            out.append((info, reply))
        return out

    def _read_local(self, reply: Message, info: NodeInfo) -> tuple[float, float] | None:
        """Return the client's local mAP@ALL and mAP@K, or None (logged if bad)."""
        who = f"partition {info.partition_id} (node {info.node_id})"
        if reply.has_error():
            log(WARNING, "pfmh-eval from %s failed: %s", who, reply.error.reason)
            return None
        try:
            metrics = reply.content[K.METRICS]
            if K.LOCAL_MAP_ALL not in metrics:  # no local query on this client
                return None
            values = (float(metrics[K.LOCAL_MAP_ALL]), float(metrics[K.LOCAL_MAP_AT_K]))
        except (KeyError, TypeError, ValueError) as exc:
            log(WARNING, "pfmh-eval from %s rejected: malformed (%r)", who, exc)
            return None
        if not all(0.0 <= v <= 1.0 for v in values):
            log(
                WARNING, "pfmh-eval from %s rejected: mAP %s not in [0, 1]", who, values
            )
            return None
        return values

    def _read_codes(
        self, reply: Message, info: NodeInfo
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[MechanismUse]] | None:
        """Return (query codes, database codes, labels, mechanisms) or None."""
        if reply.has_error():
            return None  # already logged by _read_local
        who = f"partition {info.partition_id} (node {info.node_id})"
        try:
            record = reply.content[K.CODES]
            packed = record[K.PACKED_CODES].numpy()
            labels = record[K.CODE_LABELS].numpy()
            packed_q = record[K.QUERY_CODES].numpy()
            bits = int(reply.content[K.CONFIG][K.CODE_BITS])
            uses = (
                read_privacy(reply.content[K.PRIVACY])
                if K.PRIVACY in reply.content
                else []
            )
        except (KeyError, TypeError, ValueError) as exc:
            log(WARNING, "codes from %s rejected: malformed reply (%r)", who, exc)
            return None
        problem = missing_mechanisms(uses, self.required_mechanisms) or _codes_problem(
            packed,
            labels,
            bits,
            self.bits,
            self.queries.labels,
            self.queries.num_classes,
        )
        nq = len(self.queries.labels)
        if problem is None and (
            packed_q.dtype != np.uint8 or packed_q.shape != (nq, (bits + 7) // 8)
        ):
            problem = (
                f"query codes {packed_q.dtype} {packed_q.shape}, expected uint8 "
                f"({nq}, {(bits + 7) // 8})"
            )
        if problem:
            log(WARNING, "codes from %s rejected: %s", who, problem)
            return None
        return unpack_bytes(packed_q, bits), unpack_bytes(packed, bits), labels, uses
