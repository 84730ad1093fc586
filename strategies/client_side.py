"""The client half of every method: its trainer and its own query actions.

The ClientApp imports only this table; the side of a run's method (its trainer
module and what that imports) is loaded when a message of that run first arrives
(:func:`client_side`), so a FedAvg node never imports PFMH's or DPcode's code, and
no node imports the server half (:mod:`strategies.server_side`). Each module named
here defines ``CLIENT_SIDE``; a test keeps the names equal to
:mod:`strategies.catalog`'s.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from clients.trainers import Trainer

QueryHandler = Callable[..., Any]
"""``handler(content, *, settings, data, state, partition_id, device, noise)`` ->
the reply's RecordDict, for one method-specific ``query.<action>`` message."""


def _single_modal_model(*args: Any, **kwargs: Any) -> nn.Module:
    from settings.run_model import build_run_model

    return build_run_model(*args, **kwargs)


@dataclass(frozen=True)
class ClientSide:
    """One method's client half: what the ClientApp needs to run it."""

    trainer: Trainer | None
    """The client's local training for one ``train`` message (``None``: the method
    trains nothing)."""
    queries: Mapping[str, QueryHandler] = field(default_factory=dict)
    """Its own ClientApp query actions (``@app.query(action)``), if any."""
    build_model: Callable[..., nn.Module] = _single_modal_model
    """``build(settings, input_shape, num_classes=None)``: the network a
    ``query.encode`` message's arrays load into (default: the single-modal one)."""


MODULES: dict[str, str] = {
    "fedavg": "strategies.fedavg.trainer",
    "fedprox": "strategies.fedavg.trainer",
    "fedhap": "strategies.fedhap.trainer",
    "pfmh": "strategies.pfmh.trainer",
    "dpcode": "strategies.dpcode.client",
}
"""``{method: module defining its CLIENT_SIDE}``."""


def client_side(name: str) -> ClientSide:
    """Return the client side of method ``name``, importing it on first use.

    Raises
    ------
    ValueError
        For a name no method has (the settings refuse it before).
    """
    try:
        module = MODULES[name]
    except KeyError:
        raise ValueError(
            f"strategy {name!r}: accepted are {', '.join(sorted(MODULES))}"
        ) from None
    side = importlib.import_module(module).CLIENT_SIDE
    if not isinstance(side, ClientSide):
        raise TypeError(f"{module}.CLIENT_SIDE is no ClientSide")
    return side
