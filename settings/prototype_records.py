"""FedHAP prototypes <-> Flower ArrayRecord, for both directions of the wire.

Upload (client -> server), record ``prototypes``: ``classes`` (m,) int64,
``codes`` (m, bits) float32 relaxed class means, ``counts`` (m,) int64.
Broadcast (server -> client), record ``prototypes``: ``classes`` (m,) int64 and
``codes`` (m, bits) float32 in {-1, +1}.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord

from hashing.prototypes import ClassPrototypes, GlobalPrototypes
from settings import keys as K


def upload_record(protos: ClassPrototypes) -> ArrayRecord:
    """Pack a client's prototype upload into an ArrayRecord."""
    return ArrayRecord(
        {
            K.PROTO_CLASSES: Array(np.ascontiguousarray(protos.classes)),
            K.PROTO_CODES: Array(np.ascontiguousarray(protos.means)),
            K.PROTO_COUNTS: Array(np.ascontiguousarray(protos.counts)),
        }
    )


def read_upload(record: ArrayRecord) -> ClassPrototypes:
    """Inverse of :func:`upload_record` (KeyError/TypeError if malformed)."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"'{K.PROTOTYPES}' is a {type(record).__name__}")
    return ClassPrototypes(
        classes=record[K.PROTO_CLASSES].numpy(),
        means=record[K.PROTO_CODES].numpy(),
        counts=record[K.PROTO_COUNTS].numpy(),
    )


def broadcast_record(protos: GlobalPrototypes) -> ArrayRecord:
    """Pack the server's global prototype codes into an ArrayRecord."""
    return ArrayRecord(
        {
            K.PROTO_CLASSES: Array(np.ascontiguousarray(protos.classes)),
            K.PROTO_CODES: Array(np.ascontiguousarray(protos.codes)),
        }
    )


def read_broadcast(record: ArrayRecord) -> tuple[np.ndarray, np.ndarray]:
    """``(classes (m,) int64, codes (m, bits) float32)`` from a broadcast record."""
    return record[K.PROTO_CLASSES].numpy(), record[K.PROTO_CODES].numpy()
