"""A trained model's reply as it leaves the client: sparsified, then DPHE-encrypted.

The ClientApp runs the two steps as mods (:func:`clients.sparse_updates.sparsify_mod`
inside :func:`clients.dphe_updates.dphe_mod`); :func:`finish_train_reply` runs them
in the same order on one reply, for tests and experiments that drive a trainer
without Flower.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from clients.dphe_updates import encrypt_reply, model_blocks
from clients.sparse_updates import sparsifies, sparsify_reply
from settings.run_settings import RunSettings


def transforms_update(settings: RunSettings) -> bool:
    """Whether the reply's model must be sparsified or encrypted."""
    return settings.secure_aggregation == "dphe" or sparsifies(settings)


def finish_train_reply(reply: RecordDict, **kwargs: Any) -> RecordDict:
    """Sparsify, then encrypt the reply, in place; return it.

    :func:`~clients.sparse_updates.sparsify_reply`, then
    :func:`~clients.dphe_updates.encrypt_reply`, whose keyword arguments these are
    (``global_arrays``, ``settings``, ``partition_id``, ``rng``, ...; a wrong one is
    its ``TypeError``); ``node_state`` keeps error feedback's residual and the
    encryptions made.
    """
    bound = inspect.signature(encrypt_reply).bind(reply, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    settings: RunSettings = a["settings"]
    if not transforms_update(settings):
        return reply
    global_arrays: ArrayRecord = a["global_arrays"]
    dimension = sum(int(np.prod(x.shape)) for x in global_arrays.values())
    blocks = model_blocks(
        settings,
        partition_id=a["partition_id"],
        node_bundle=a["node_bundle"],
        train_config=a["train_config"],
        dimension=dimension,
    )
    sparsify_reply(
        reply,
        global_arrays=global_arrays,
        settings=settings,
        blocks=blocks,
        node_state=a["node_state"],
    )
    return encrypt_reply(*bound.args, **bound.kwargs)
