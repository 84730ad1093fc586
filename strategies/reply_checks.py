"""Screening of client replies before Flower's aggregation sees them.

Flower's ``FedAvg.aggregate_train`` raises if replies disagree in structure, so one
malformed reply would end the run. Each reply is checked here against the arrays the
server sent; a bad one is dropped with a log line naming the client, and the round
goes on with the rest.
"""

from __future__ import annotations

import math

import numpy as np
from flwr.app import Array, ArrayRecord, Message

from hashing.prototypes import ClassPrototypes, prototype_problem
from settings import keys as K
from settings.prototype_records import PrototypeFormat, read_prototype_record


def array_signature(arrays: ArrayRecord) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{name: (shape, dtype)}`` of an ArrayRecord."""
    return {name: (tuple(arr.shape), str(arr.dtype)) for name, arr in arrays.items()}


def restore_dtypes(
    arrays: ArrayRecord, expected: dict[str, tuple[tuple[int, ...], str]]
) -> ArrayRecord:
    """``arrays`` with each array cast back to the dtype the server sent.

    Flower's FedAvg averages every array in floating point, so integer buffers
    (BatchNorm's ``num_batches_tracked``, int64) come back as floats; the next
    round's replies, int64 again, would then no longer match the global model and
    every one of them would be dropped. Integer arrays are rounded to the nearest
    integer (the weighted mean of counts); the others are cast. Arrays whose dtype
    already matches are kept as they are.
    """
    if not expected or all(
        str(arr.dtype) == expected.get(name, ((), str(arr.dtype)))[1]
        for name, arr in arrays.items()
    ):
        return arrays
    out = {}
    for name, arr in arrays.items():
        want = np.dtype(expected[name][1]) if name in expected else None
        if want is None or str(arr.dtype) == str(want):
            out[name] = arr
            continue
        values = arr.numpy()
        if want.kind in "iub":
            values = np.asarray(np.rint(values))  # rint of a 0-d array is a scalar
        out[name] = Array(values.astype(want, order="C"))
    return ArrayRecord(out)


def take_prototype_upload(
    msg: Message,
    fmt: PrototypeFormat[ClassPrototypes],
    *,
    num_classes: int,
    dim: int,
    unit_norm: bool = False,
) -> tuple[str | None, ClassPrototypes | None]:
    """Take a prototype upload out of a reply and check it.

    Returns ``(None, upload)`` for a usable upload, else ``(problem, None)``:
    the record is missing, malformed, or its values are unusable
    (:func:`hashing.prototypes.prototype_problem`). The record is removed from
    ``msg`` either way, so that Flower's FedAvg sees only the model's records.
    """
    record = msg.content.pop(fmt.record, None)
    if record is None:
        return f"no '{fmt.record}' record", None
    try:
        upload = read_prototype_record(record, fmt)
    except (KeyError, TypeError, ValueError) as exc:
        return f"malformed '{fmt.record}' record ({exc!r})", None
    problem = prototype_problem(
        upload, num_classes=num_classes, dim=dim, unit_norm=unit_norm
    )
    if problem is not None:
        return f"prototypes: {problem}", None
    return None, upload


def train_reply_problem(
    msg: Message, expected: dict[str, tuple[tuple[int, ...], str]]
) -> str | None:
    """Why a (non-error) train reply is unusable, or ``None`` if it is fine.

    Checks: exactly one ArrayRecord and one MetricRecord; a positive, finite
    ``num-examples``; the same array names, shapes and dtypes as the global model
    the server sent; only finite values.
    """
    content = msg.content
    if len(content.array_records) != 1 or len(content.metric_records) != 1:
        return (
            f"expected one ArrayRecord and one MetricRecord, got "
            f"{len(content.array_records)} and {len(content.metric_records)}"
        )
    metrics = next(iter(content.metric_records.values()))
    n = metrics.get(K.NUM_EXAMPLES)
    if not isinstance(n, int | float) or not math.isfinite(n) or n <= 0:
        return f"'{K.NUM_EXAMPLES}' is {n!r}, expected a positive number"
    arrays = next(iter(content.array_records.values()))
    got = array_signature(arrays)
    if expected and got != expected:
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        wrong = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
        return (
            f"arrays differ from the global model (missing {missing[:3]}, "
            f"unexpected {extra[:3]}, wrong shape/dtype {wrong[:3]})"
        )
    for name, arr in arrays.items():
        values = arr.numpy()
        if values.dtype.kind in "fc" and not np.isfinite(values).all():
            return f"array {name!r} has non-finite values"
    return None
