"""Prototypes <-> Flower ArrayRecord, for both directions of the wire.

FedHAP. Upload (client -> server), record ``prototypes``: ``classes`` (m,) int64,
``codes`` (m, bits) float32 relaxed class means, ``counts`` (m,) int64.
Broadcast (server -> client), record ``prototypes``: ``classes`` (m,) int64 and
``codes`` (m, bits) float32 in {-1, +1}.

PFMH (prototypes in the k-dim space of H, never inside the model's ArrayRecord).
Upload, record ``pfmh-prototypes``: ``classes`` (m,) int64, ``vectors`` (m, k)
float32 unit-norm class means (Eq. 5), ``counts`` (m,) int64. Down, two records per
client: ``pfmh-personal`` (its completed set, Eq. 7) and ``pfmh-centralized``
(Eq. 6), each ``classes`` (m,) int64 and ``vectors`` (m, k) float32.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord

from hashing.fedhap.prototypes import GlobalPrototypes
from hashing.prototypes import ClassPrototypes, PrototypeSet
from settings import keys as K


def upload_record(protos: ClassPrototypes) -> ArrayRecord:
    """Pack a client's prototype upload into an ArrayRecord."""
    return ArrayRecord(
        {
            K.PROTO_CLASSES: Array(np.ascontiguousarray(protos.classes)),
            K.PROTO_CODES: Array(np.ascontiguousarray(protos.vectors)),
            K.PROTO_COUNTS: Array(np.ascontiguousarray(protos.counts)),
        }
    )


def read_upload(record: ArrayRecord) -> ClassPrototypes:
    """Inverse of :func:`upload_record` (KeyError/TypeError if malformed)."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"'{K.PROTOTYPES}' is a {type(record).__name__}")
    return ClassPrototypes(
        classes=record[K.PROTO_CLASSES].numpy(),
        vectors=record[K.PROTO_CODES].numpy(),
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


def pfmh_upload_record(protos: ClassPrototypes) -> ArrayRecord:
    """Pack a client's PFMH upload (Eq. 5) into an ArrayRecord."""
    return ArrayRecord(
        {
            K.PROTO_CLASSES: Array(np.ascontiguousarray(protos.classes)),
            K.PROTO_VECTORS: Array(np.ascontiguousarray(protos.vectors)),
            K.PROTO_COUNTS: Array(np.ascontiguousarray(protos.counts)),
        }
    )


def read_pfmh_upload(record: ArrayRecord) -> ClassPrototypes:
    """Inverse of :func:`pfmh_upload_record` (KeyError/TypeError if malformed)."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"'{K.PFMH_UPLOAD}' is a {type(record).__name__}")
    return ClassPrototypes(
        classes=record[K.PROTO_CLASSES].numpy(),
        vectors=record[K.PROTO_VECTORS].numpy(),
        counts=record[K.PROTO_COUNTS].numpy(),
    )


def pfmh_set_record(protos: PrototypeSet) -> ArrayRecord:
    """Pack a PFMH prototype set (personal or centralized) into an ArrayRecord."""
    return ArrayRecord(
        {
            K.PROTO_CLASSES: Array(np.ascontiguousarray(protos.classes)),
            K.PROTO_VECTORS: Array(np.ascontiguousarray(protos.vectors)),
        }
    )


def read_pfmh_set(record: ArrayRecord) -> PrototypeSet:
    """Inverse of :func:`pfmh_set_record` (KeyError/TypeError if malformed)."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"a PFMH prototype set is a {type(record).__name__}")
    return PrototypeSet(
        classes=record[K.PROTO_CLASSES].numpy(),
        vectors=record[K.PROTO_VECTORS].numpy(),
    )
