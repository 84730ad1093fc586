"""A trained model's reply as it leaves the client: sparsified, then DPHE-encrypted.

The ClientApp runs the two steps as mods (:func:`clients.sparse_updates.sparsify_mod`
inside :func:`clients.dphe_updates.dphe_mod`); :func:`finish_train_reply` runs them
in the same order on one reply, for tests and experiments that drive a trainer
without Flower.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from clients.dphe_updates import encrypt_reply, model_blocks
from clients.sparse_updates import sparsifies, sparsify_reply
from crypto.obfuscator_store import ObfuscatorStore
from settings.run_settings import RunSettings


def transforms_update(settings: RunSettings) -> bool:
    """Whether the reply's model must be sparsified or encrypted."""
    return settings.secure_aggregation == "dphe" or sparsifies(settings)


def finish_train_reply(
    reply: RecordDict,
    *,
    global_arrays: ArrayRecord,
    settings: RunSettings,
    partition_id: int,
    rng: np.random.Generator,
    node_bundle: str = "",
    num_classes: int = 0,
    train_config: ConfigRecord | None = None,
    run_id: int | None = None,
    node_state: RecordDict | None = None,
    pool: ObfuscatorStore | None = None,
) -> RecordDict:
    """Sparsify, then encrypt the reply, in place; return it.

    :func:`~clients.sparse_updates.sparsify_reply`, then
    :func:`~clients.dphe_updates.encrypt_reply`.
    The arguments are those of the two steps; ``node_state`` keeps error feedback's
    residual and the encryptions made.
    """
    if not transforms_update(settings):
        return reply
    dimension = sum(int(np.prod(a.shape)) for a in global_arrays.values())
    blocks = model_blocks(
        settings,
        partition_id=partition_id,
        node_bundle=node_bundle,
        train_config=train_config,
        dimension=dimension,
    )
    sparsify_reply(
        reply,
        global_arrays=global_arrays,
        settings=settings,
        blocks=blocks,
        node_state=node_state,
    )
    return encrypt_reply(
        reply,
        global_arrays=global_arrays,
        settings=settings,
        partition_id=partition_id,
        rng=rng,
        node_bundle=node_bundle,
        num_classes=num_classes,
        train_config=train_config,
        run_id=run_id,
        node_state=node_state,
        pool=pool,
    )
