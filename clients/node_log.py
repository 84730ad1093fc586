"""Which Ray node ran each ClientApp message (``experiments.simulate --node-log``).

A Flower lifespan that appends one JSON line per message: partition id, Ray node id,
host name and pid. It is written on the node that ran the message, so on separate
machines each one has its own file at that path; on one machine, or a shared
filesystem, it is one file. Used to show that a simulation on a Ray cluster spread
its clients over the nodes (docs/ray-cluster.md).
"""

from __future__ import annotations

import json
import os
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from flwr.app import Context
from flwr.clientapp import ClientApp


def record_nodes(app: ClientApp, node_log: Path) -> ClientApp:
    """Make ``app`` append one JSON line per message it handles to ``node_log``."""
    inner = app._lifespan  # the app's own lifespan, if any, still runs inside

    @app.lifespan()
    def _record(context: Context) -> Iterator[None]:
        import ray

        line = {
            "partition_id": int(context.node_config.get("partition-id", -1)),
            "ray_node_id": ray.get_runtime_context().get_node_id(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        with node_log.open("a") as f:  # one short line per write: O_APPEND
            f.write(json.dumps(line) + "\n")
        with inner(context):
            yield

    return app


def node_counts(node_log: Path) -> Counter[str]:
    """ClientApp messages per Ray node id in a :func:`record_nodes` log."""
    rows = [json.loads(x) for x in node_log.read_text().splitlines() if x]
    return Counter(r["ray_node_id"] for r in rows)
