"""Retrieval evaluation of the global model.

The server encodes its held-out query set with the global model; every client
encodes its database partition with the same model and publishes the codes (packed
bits) and their labels -- never raw data. The server then ranks the whole database
by Hamming distance for each query (``hashing.retrieval``).

:class:`RetrievalEvaluator` is also the base of PFMH's evaluator
(``strategies/pfmh/evaluation.py``): both send their query to every node and read
the replies in partition order (:meth:`RetrievalEvaluator.ask`), validate published
codes the same way (:meth:`RetrievalEvaluator.read_codes`) and rank with the same
metrics (:meth:`RetrievalEvaluator.rank`). PFMH's per-client protocols report
through :attr:`Evaluation.per_client`, and in PFMH's personalized mode (no global
model) :attr:`Evaluation.report` is ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from logging import WARNING

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from hashing.codes import sign_codes, unpack_bytes
from hashing.retrieval import RetrievalReport, evaluate_retrieval
from hashing.train import encode
from privacy.ledger import MechanismUse
from server.discovery import NodeInfo
from settings import keys as K
from settings.privacy_records import missing_mechanisms, read_privacy


@dataclass(frozen=True)
class QuerySet:
    """The server's held-out queries.

    Attributes
    ----------
    inputs : torch.Tensor or dict of str to torch.Tensor
        (nq, ...) float32 samples; for a multi-modal model (PFMH) a dict modality
        name -> (nq, ...) samples.
    labels : np.ndarray
        (nq,) int64 or (nq, C) multi-hot.
    num_classes : int
        Size of the label space C.
    """

    inputs: torch.Tensor | dict[str, torch.Tensor]
    labels: np.ndarray
    num_classes: int


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of the global model.

    Holds the report (``None`` when there is no global model to rank the union
    database with: personalized PFMH), how many clients contributed codes, the
    privacy mechanisms each contributing client (partition id) applied to its codes,
    and metrics averaged over clients (``per_client``, name -> value; PFMH).
    """

    report: RetrievalReport | None
    clients: int
    seconds: float
    disclosures: tuple[tuple[int, tuple[MechanismUse, ...]], ...] = ()
    per_client: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class CollectedCodes:
    """Query codes and every contributing client's published database codes.

    ``partitions[i]``, ``db_codes[i]`` and ``db_labels[i]`` belong together, in
    partition-id order.
    """

    query_codes: np.ndarray
    partitions: list[int]
    db_codes: list[np.ndarray]
    db_labels: list[np.ndarray]
    disclosures: list[tuple[int, tuple[MechanismUse, ...]]]


@dataclass(frozen=True)
class PublishedCodes:
    """One client's published codes, validated and unpacked.

    Attributes
    ----------
    db_codes : np.ndarray
        (n, bits) int8 in {-1, +1}: the client's database partition.
    labels : np.ndarray
        (n,) class ids or (n, C) multi-hot of those codes.
    uses : list of MechanismUse
        The privacy mechanisms the client applied to them.
    query_codes : np.ndarray or None
        (nq, bits) the server's queries encoded by the client's own model (PFMH's
        personalized mode), else ``None``.
    """

    db_codes: np.ndarray
    labels: np.ndarray
    uses: list[MechanismUse]
    query_codes: np.ndarray | None = None


class RetrievalEvaluator:
    """Evaluate a global model by federated retrieval.

    Also the base of the other evaluators: :meth:`ask`, :meth:`read_codes` and
    :meth:`rank` are the steps every protocol shares.

    Parameters
    ----------
    grid : Grid
        The ServerApp's grid.
    nodes : dict
        ``{node_id: NodeInfo}`` from discovery; asked in partition-id order.
    queries : QuerySet
        The server's query set.
    model_factory : callable
        Returns a fresh hashing network of this run.
    bits : int
        Code length.
    top_k : int
        K of mAP@K.
    ks : tuple of int
        Cut-offs of precision@K.
    device : torch.device
        Where the server encodes its queries.
    """

    def __init__(
        self,
        grid: Grid,
        nodes: dict[int, NodeInfo],
        queries: QuerySet,
        model_factory: Callable[[], torch.nn.Module],
        *,
        bits: int,
        top_k: int,
        ks: tuple[int, ...],
        device: torch.device,
        required_mechanisms: tuple[str, ...] = (),
        timeout_s: float = 3600.0,
    ) -> None:
        self.grid = grid
        self.nodes = dict(sorted(nodes.items(), key=lambda kv: kv[1].partition_id))
        self.queries = queries
        self.model_factory = model_factory
        self.bits = bits
        self.top_k = top_k
        self.ks = ks
        self.device = device
        self.timeout_s = timeout_s
        self.required_mechanisms = tuple(required_mechanisms)

    def evaluate(self, server_round: int, arrays: ArrayRecord) -> Evaluation:
        """Encode queries here and databases on the clients; compute the metrics."""
        start = time.perf_counter()
        got = self.collect(server_round, arrays)
        report = self.rank(
            got.query_codes, np.concatenate(got.db_codes), np.concatenate(got.db_labels)
        )
        return Evaluation(
            report=report,
            clients=len(got.db_codes),
            seconds=time.perf_counter() - start,
            disclosures=tuple(got.disclosures),
        )

    def collect(self, server_round: int, arrays: ArrayRecord) -> CollectedCodes:
        """Encode the queries here and collect every client's published codes.

        Raises
        ------
        RuntimeError
            If no client published usable codes.
        """
        # only the hashing network encodes; FedHAP's discriminator stays home
        arrays = ArrayRecord(
            {
                k: v
                for k, v in arrays.items()
                if not k.startswith(K.DISCRIMINATOR_PREFIX)
            }
        )
        model = self.model_factory()
        model.load_state_dict(arrays.to_torch_state_dict())
        query_codes = sign_codes(encode(model, self.queries.inputs, device=self.device))
        partitions, db_codes, db_labels, disclosures = self._collect_codes(
            server_round, arrays
        )
        if not db_codes:
            raise RuntimeError(f"round {server_round}: no client published codes")
        return CollectedCodes(
            query_codes=query_codes,
            partitions=partitions,
            db_codes=db_codes,
            db_labels=db_labels,
            disclosures=disclosures,
        )

    def _collect_codes(
        self, server_round: int, arrays: ArrayRecord
    ) -> tuple[list[int], list[np.ndarray], list[np.ndarray], list]:
        config = ConfigRecord({K.SERVER_ROUND: server_round})
        replies = self.ask(
            server_round,
            {K.ARRAYS: arrays, K.CONFIG: config},
            K.QUERY_ENCODE,
            what="codes",
        )
        partitions, codes, labels, disclosures = [], [], [], []
        for info, reply in replies:  # partition order, reproducible
            got = self.read_codes(reply, info)
            if got is not None:
                partitions.append(info.partition_id)
                codes.append(got.db_codes)
                labels.append(got.labels)
                if got.uses:
                    disclosures.append((info.partition_id, tuple(got.uses)))
        return partitions, codes, labels, disclosures

    def ask(
        self,
        server_round: int,
        records: Mapping[str, ArrayRecord | ConfigRecord],
        message_type: str,
        *,
        what: str,
    ) -> list[tuple[NodeInfo, Message]]:
        """Send ``records`` to every node as a ``message_type`` message; gather replies.

        Returns
        -------
        list of (NodeInfo, Message)
            In partition-id order. A node that does not answer is logged
            (``round R: no <what> from partition P (node N)``) and left out.
        """
        messages = [
            Message(
                content=RecordDict(dict(records)),
                message_type=message_type,
                dst_node_id=node_id,
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
                    "round %d: no %s from partition %d (node %d)",
                    server_round,
                    what,
                    info.partition_id,
                    node_id,
                )
                continue
            out.append((info, reply))
        return out

    def read_codes(
        self, reply: Message, info: NodeInfo, *, with_queries: bool = False
    ) -> PublishedCodes | None:
        """Validate and unpack one client's published codes, or log and drop them.

        ``with_queries``: the reply also carries the server's queries encoded by the
        client's own model (``query-codes``, PFMH's personalized mode).
        """
        who = f"partition {info.partition_id} (node {info.node_id})"
        if reply.has_error():
            log(WARNING, "codes from %s rejected: %s", who, reply.error.reason)
            return None
        try:
            record = reply.content[K.CODES]
            packed = record[K.PACKED_CODES].numpy()
            labels = record[K.CODE_LABELS].numpy()
            packed_q = record[K.QUERY_CODES].numpy() if with_queries else None
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
        if not problem and packed_q is not None:
            nq, width = len(self.queries.labels), (bits + 7) // 8
            if packed_q.dtype != np.uint8 or packed_q.shape != (nq, width):
                problem = (
                    f"query codes {packed_q.dtype} {packed_q.shape}, expected uint8 "
                    f"({nq}, {width})"
                )
        if problem:
            log(WARNING, "codes from %s rejected: %s", who, problem)
            return None
        return PublishedCodes(
            db_codes=unpack_bytes(packed, bits),
            labels=labels,
            uses=uses,
            query_codes=None if packed_q is None else unpack_bytes(packed_q, bits),
        )

    def rank(
        self, query_codes: np.ndarray, db_codes: np.ndarray, db_labels: np.ndarray
    ) -> RetrievalReport:
        """Rank ``db_codes`` for the server's queries by Hamming distance.

        Parameters
        ----------
        query_codes : np.ndarray
            (nq, bits) int8 codes of the server's query set, in its order.
        db_codes : np.ndarray
            (n, bits) int8 database codes.
        db_labels : np.ndarray
            Their labels.

        Returns
        -------
        RetrievalReport
            mAP@ALL, mAP@``top_k``, precision@``ks`` and the PR curve.
        """
        return evaluate_retrieval(
            query_codes,
            db_codes,
            self.queries.labels,
            db_labels,
            top_k=self.top_k,
            ks=self.ks,
        )


def _codes_problem(
    packed: np.ndarray,
    labels: np.ndarray,
    bits: int,
    expected_bits: int,
    query_labels: np.ndarray,
    num_classes: int,
) -> str | None:
    """Why a client's published codes (packed bytes + labels) are unusable, or None."""
    if bits != expected_bits:
        return f"{bits}-bit codes, expected {expected_bits}"
    if packed.dtype != np.uint8 or packed.ndim != 2:
        return f"packed codes must be 2-D uint8, got {packed.dtype} {packed.shape}"
    if packed.shape[1] != (bits + 7) // 8:
        return f"packed width {packed.shape[1]} != ceil({bits}/8)"
    if len(labels) != len(packed):
        return f"{len(labels)} labels for {len(packed)} codes"
    if labels.shape[1:] != query_labels.shape[1:] or labels.dtype.kind not in "iub":
        return f"labels {labels.dtype} {labels.shape} do not match the label space"
    if (
        labels.size
        and labels.ndim == 1
        and not 0 <= labels.min() <= labels.max() < num_classes
    ):
        return f"class ids outside 0..{num_classes - 1}"
    if labels.size and labels.ndim == 2 and not np.isin(labels, (0, 1)).all():
        return "multi-hot labels with values other than 0/1"
    return None
