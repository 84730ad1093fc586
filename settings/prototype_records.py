"""Prototype sets <-> Flower ArrayRecord: one codec for every prototype record.

A prototype record holds ``classes`` (m,) int64, the prototypes (m, d) float32 under
the format's array key and, for an upload, ``counts`` (m,) int64. The formats
(record key; array key of the prototypes; content):

* ``FEDHAP_UPLOAD``: ``prototypes`` (up); ``codes``; relaxed class means (Eq. 5)
  and counts.
* ``FEDHAP_BROADCAST``: ``prototypes`` (down); ``codes``; the global codes in
  {-1, +1} (Eq. 6, then sign).
* ``PFMH_UPLOAD``: ``pfmh-prototypes`` (up); ``vectors``; unit-norm class means of
  H (Eq. 5) and counts.
* ``PFMH_PERSONAL``: ``pfmh-personal`` (down); ``vectors``; the client's completed
  set (Eq. 7).
* ``PFMH_CENTRALIZED``: ``pfmh-centralized`` (down); ``vectors``; the centralized
  set (Eq. 6).

PFMH's prototypes never travel inside the model's ArrayRecord.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
from flwr.app import Array, ArrayRecord

from hashing.prototypes import ClassPrototypes, PrototypeSet
from settings import keys as K

P = TypeVar("P", ClassPrototypes, PrototypeSet)


@dataclass(frozen=True)
class PrototypeFormat(Generic[P]):
    """Where a prototype set travels and what it carries.

    Attributes
    ----------
    record : str
        Key of the record in the message (for error messages).
    vectors : str
        Key of the (m, d) prototype array inside the record.
    kind : type
        :class:`ClassPrototypes` (with ``counts``: uploads) or
        :class:`PrototypeSet` (without: what the server sends).
    """

    record: str
    vectors: str
    kind: type[P]


FEDHAP_UPLOAD = PrototypeFormat(K.PROTOTYPES, K.PROTO_CODES, ClassPrototypes)
FEDHAP_BROADCAST = PrototypeFormat(K.PROTOTYPES, K.PROTO_CODES, PrototypeSet)
PFMH_UPLOAD = PrototypeFormat(K.PFMH_UPLOAD, K.PROTO_VECTORS, ClassPrototypes)
PFMH_PERSONAL = PrototypeFormat(K.PFMH_PERSONAL, K.PROTO_VECTORS, PrototypeSet)
PFMH_CENTRALIZED = PrototypeFormat(K.PFMH_CENTRALIZED, K.PROTO_VECTORS, PrototypeSet)


def prototype_record(protos: P, fmt: PrototypeFormat[P]) -> ArrayRecord:
    """Pack a prototype set into an ArrayRecord of format ``fmt``."""
    arrays = {
        K.PROTO_CLASSES: Array(np.ascontiguousarray(protos.classes)),
        fmt.vectors: Array(np.ascontiguousarray(protos.vectors)),
    }
    if isinstance(protos, ClassPrototypes):
        arrays[K.PROTO_COUNTS] = Array(np.ascontiguousarray(protos.counts))
    return ArrayRecord(arrays)


def read_prototype_record(record: object, fmt: PrototypeFormat[P]) -> P:
    """Inverse of :func:`prototype_record` (KeyError/TypeError if malformed).

    Only the structure is read; :func:`hashing.prototypes.prototype_problem` says
    whether the values are usable.
    """
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"'{fmt.record}' is a {type(record).__name__}")
    arrays = {
        "classes": record[K.PROTO_CLASSES].numpy(),
        "vectors": record[fmt.vectors].numpy(),
    }
    if fmt.kind is ClassPrototypes:
        arrays["counts"] = record[K.PROTO_COUNTS].numpy()
    return fmt.kind(**arrays)
