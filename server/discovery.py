"""Learn which partition each connected node holds, before any training.

Every node answers a ``query`` message with ``op=describe`` with its
``partition-id``, ``num-partitions`` and local database size. Nodes whose reply is an
error (e.g. a SuperNode started without a partition id, or without the data or DPHE
key bundle its node config names: ``clients/node_inputs.py``), a node whose privacy
policy refuses the run (``clients/node_policy.py``: each refusal is logged with the
node's reasons) or a duplicate partition are logged and left out; the run goes on if
at least ``min_nodes`` remain, else it stops with :class:`NodesRefusedError`, one line
that counts the reasons.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from logging import INFO, WARNING

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from privacy.policy import REFUSAL_PREFIX, split_refusal
from settings import keys as K


class NodesRefusedError(RuntimeError):
    """Too few nodes accept the run; the message counts their reasons (one line)."""


def is_policy_refusal(reason: str | None) -> bool:
    """Whether an error reply is a node's privacy-policy refusal."""
    return (reason or "").lstrip().startswith(REFUSAL_PREFIX)


@dataclass(frozen=True)
class NodeInfo:
    """What discovery learnt about one node."""

    node_id: int
    partition_id: int
    num_partitions: int
    num_database: int
    device: str


def describe_nodes(
    grid: Grid, *, min_nodes: int, wait_s: float = 120.0, timeout_s: float = 600.0
) -> dict[int, NodeInfo]:
    """Describe connected nodes until all ``num-partitions`` answered or time is up.

    Parameters
    ----------
    grid : Grid
        The ServerApp's grid.
    min_nodes : int
        Fewest usable nodes to go on with.
    wait_s : float
        How long to wait for the remaining partitions to connect.
    timeout_s : float
        Reply timeout of one describe round.

    Returns
    -------
    dict
        ``{node_id: NodeInfo}`` of usable nodes.

    Raises
    ------
    NodesRefusedError
        If fewer than ``min_nodes`` usable nodes answered in time; the message
        gives the refusals' reasons, most common first, with their counts.
    """
    found: dict[int, NodeInfo] = {}
    refused: set[int] = set()
    reasons: Counter[str] = Counter()
    expected: int | None = None
    deadline = time.monotonic() + wait_s
    while True:
        new = [n for n in grid.get_node_ids() if n not in found and n not in refused]
        if new:
            replies = grid.send_and_receive(
                [_describe_message(n) for n in new], timeout=timeout_s
            )
            for reply in replies:
                info = _read_describe_reply(reply, found, reasons)
                node_id = reply.metadata.src_node_id
                if info is None:
                    refused.add(node_id)
                    # a policy refusal says how many partitions there are: when
                    # every node refuses, discovery need not wait for more
                    part = _refused_partition(reply)
                    if expected is None and part is not None:
                        expected = part[1]
                    continue
                if expected is None:
                    expected = info.num_partitions
                elif info.num_partitions != expected:
                    log(
                        WARNING,
                        "node %d says num-partitions=%d, others %d: left out",
                        node_id,
                        info.num_partitions,
                        expected,
                    )
                    reasons["num-partitions differs from the first node's"] += 1
                    refused.add(node_id)
                    continue
                found[node_id] = info
        done = expected is not None and len(found) + len(refused) >= expected
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if len(found) < min_nodes:
        raise NodesRefusedError(
            f"only {len(found)} usable node(s) answered discovery (need "
            f"min-train-nodes={min_nodes}); {len(refused)} refused"
            + refusal_summary(reasons)
        )
    ordered = sorted(found.values(), key=lambda i: i.partition_id)
    log(
        INFO,
        "Discovery: %d node(s), partitions %s, database sizes %s, devices %s",
        len(found),
        _ranges([i.partition_id for i in ordered]),
        _sizes([i.num_database for i in ordered]),
        sorted({i.device for i in found.values()}),
    )
    return found


#: a discovery error quotes this many distinct refusal reasons
_REASONS = 3
#: a reason longer than this keeps its end: a ClientApp's error from the
#: simulation engine is a traceback whose message comes last
_REASON_CHARS = 400


def refusal_summary(reasons: Counter[str]) -> str:
    """``": 100 x <reason>; 2 x <reason>"``: the most common refusals, or ``""``."""
    if not reasons:
        return ""
    shown = [f"{n} x {reason}" for reason, n in reasons.most_common(_REASONS)]
    rest = len(reasons) - len(shown)
    more = f"; and {rest} other reason(s) in the log" if rest > 0 else ""
    return ": " + "; ".join(shown) + more


def refusal_reason(reason: str) -> str:
    """One line, its last ``_REASON_CHARS`` characters: the key refusals count by.

    The end is kept, so the same error from many nodes counts as one reason even
    where each traceback's start names another process.
    """
    one_line = " ".join(reason.split())
    if len(one_line) <= _REASON_CHARS:
        return one_line
    return "..." + one_line[-(_REASON_CHARS - 3) :]


#: up to this many nodes, the log lists every database size
_LISTED = 20


def _ranges(ids: list[int]) -> str:
    """``[0..9, 12, 14..15]``: sorted ids with consecutive runs collapsed."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return "[" + ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in runs) + "]"


def _sizes(sizes: list[int]) -> str:
    """Every size for a few nodes; ``min/mean/max`` for many (1,000 nodes)."""
    if len(sizes) <= _LISTED:
        return str(sizes)
    return f"min {min(sizes)}, mean {sum(sizes) / len(sizes):.1f}, max {max(sizes)}"


def _refused_partition(reply: Message) -> tuple[int, int] | None:
    """``(partition id, partitions)`` a policy refusal states, or ``None``."""
    if not reply.has_error() or not is_policy_refusal(reply.error.reason):
        return None
    return split_refusal(reply.error.reason or "")[1]


def _describe_message(node_id: int) -> Message:
    return Message(
        content=RecordDict({K.CONFIG: ConfigRecord()}),
        message_type=K.QUERY_DESCRIBE,
        dst_node_id=node_id,
    )


def _read_describe_reply(
    reply: Message, found: dict[int, NodeInfo], reasons: Counter[str]
) -> NodeInfo | None:
    """Return the node's description, or ``None`` (logged, counted in ``reasons``)."""
    node_id = reply.metadata.src_node_id
    if reply.has_error() and is_policy_refusal(reply.error.reason):
        log(WARNING, "node %d refuses the run: %s", node_id, reply.error.reason)
        text, _ = split_refusal(reply.error.reason)
        reasons[refusal_reason(text)] += 1
        return None
    if reply.has_error():
        log(WARNING, "node %d failed discovery: %s", node_id, reply.error.reason)
        reasons[refusal_reason(reply.error.reason)] += 1
        return None
    try:
        cfg = reply.content[K.CONFIG]
        info = NodeInfo(
            node_id=node_id,
            partition_id=int(cfg[K.PARTITION_ID]),
            num_partitions=int(cfg[K.NUM_PARTITIONS]),
            num_database=int(cfg[K.NUM_DATABASE]),
            device=str(cfg.get(K.NODE_DEVICE, "?")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        log(WARNING, "node %d sent a malformed describe reply: %r", node_id, exc)
        reasons["a malformed describe reply"] += 1
        return None
    taken = {i.partition_id: i.node_id for i in found.values()}
    if info.partition_id in taken:
        log(
            WARNING,
            "node %d claims partition %d, already held by node %d: left out",
            node_id,
            info.partition_id,
            taken[info.partition_id],
        )
        reasons["a partition another node already holds"] += 1
        return None
    return info
