r"""A strategy's state as plain JSON plus named numpy arrays (for checkpoints).

No pickle: a checkpoint is read back with ``json`` and ``numpy.load(...,
allow_pickle=False)``, so a results directory someone hands you cannot run code
when it is resumed. :func:`pack` turns a value made of dicts, lists, numbers,
strings, numpy arrays, Flower ``MetricRecord``\\ s and the prototype dataclasses
into JSON, moving every array into ``arrays`` under a path-like name;
:func:`unpack` is its inverse. Anything else is a ``TypeError`` at save time, not
a surprise at resume time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from flwr.app import MetricRecord

from hashing.fedhap.prototypes import GlobalPrototypes
from hashing.prototypes import ClassPrototypes, PrototypeSet
from privacy.ledger import MechanismUse

_TYPES: dict[str, type] = {
    t.__name__: t
    for t in (ClassPrototypes, PrototypeSet, GlobalPrototypes, MechanismUse)
}


def pack(value: Any, arrays: dict[str, np.ndarray], path: str = "state") -> Any:
    """JSON-able form of ``value``; arrays go into ``arrays`` (name = ``path``)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(f"{path}: object arrays cannot be checkpointed")
        arrays[path] = value
        return {"__array__": path}
    if isinstance(value, MetricRecord):
        return {"__metrics__": pack(dict(value), arrays, path)}
    if dataclasses.is_dataclass(value) and type(value).__name__ in _TYPES:
        fields = {
            f.name: pack(getattr(value, f.name), arrays, f"{path}.{f.name}")
            for f in dataclasses.fields(value)
        }
        return {"__type__": type(value).__name__, "fields": fields}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            if any(k.startswith("__") for k in value):
                raise TypeError(f"{path}: keys starting with '__' are reserved")
            return {k: pack(v, arrays, f"{path}.{k}") for k, v in value.items()}
        if all(isinstance(k, int) for k in value):
            return {
                "__intkeys__": [
                    [k, pack(v, arrays, f"{path}.{k}")] for k, v in value.items()
                ]
            }
        raise TypeError(f"{path}: dict keys must be all str or all int")
    if isinstance(value, list | tuple):
        return [pack(v, arrays, f"{path}.{i}") for i, v in enumerate(value)]
    raise TypeError(f"{path}: cannot checkpoint a {type(value).__name__}")


def unpack(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of :func:`pack` (tuples come back as lists)."""
    if isinstance(value, list):
        return [unpack(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        return arrays[value["__array__"]]
    if "__metrics__" in value:
        return MetricRecord(unpack(value["__metrics__"], arrays))
    if "__type__" in value:
        cls = _TYPES[value["__type__"]]
        return cls(**{k: unpack(v, arrays) for k, v in value["fields"].items()})
    if "__intkeys__" in value:
        return {int(k): unpack(v, arrays) for k, v in value["__intkeys__"]}
    return {k: unpack(v, arrays) for k, v in value.items()}
