"""The sparsification mod: the trained model leaves as ``w_global + sparse update``.

Every trainer returns its full local model in the ``arrays`` record. For a run with
``updates.sparsity > 0`` or ``updates.sparsifier = "soft-threshold"``,
:func:`sparsify_reply` replaces it, before anything else sees it, with
``w_global + s`` where ``s`` is the sparsified update ``d = w_local - w_global``
(soft threshold, then top-k with ``updates.sparsity``), so Flower's FedAvg
aggregates it unchanged and DPHE (:mod:`clients.dphe_updates`, the next mod)
encrypts ``s``; with ``elastic-net`` the trainer already returns a model whose
update is exactly 0 off its support (:mod:`hashing.elastic_net`), and only a top-k
follows if ``updates.sparsity > 0``.

* Under DPHE with ``dphe.sparsity-layout = "block"`` the top-k keeps
  whole packed blocks of the round's phi-permuted space
  (:func:`hashing.update_sparsity.block_top_k_sparsify`; the loss and weight
  coordinates' blocks always), so DPHE encrypts only ``num_blocks - floor(sparsity
  * num_blocks)`` blocks. The block of each coordinate comes from the client's own
  DPHE bundle (``blocks_of``, wired by the app).
* With ``dphe.sparsity-layout = "shared"`` (the default) every client keeps the same
  blocks (:func:`hashing.update_sparsity.shared_blocks`: the loss's and weight's,
  then the lowest phi-space ids), so the keyholder decrypts one set of blocks a
  round.
* **Error feedback** (``updates.error-feedback``; ``auto``: on under secure
  aggregation): the client keeps the residual ``e = (d + e_prev) - s`` of what it
  did not send in its node-local state (``Context.state``, record
  :data:`RESIDUAL_RECORD`; it never leaves the node) and adds it to the next
  round's update before sparsifying (Seide et al. 2014; Stich et al., "Sparsified
  SGD with memory", NeurIPS 2018). ``s`` is what actually travels: the float32
  model ``w_global + s`` minus ``w_global``, so rounding stays in the residual.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable, Mod

from hashing.update_sparsity import (
    block_top_k_sparsify,
    flatten_arrays,
    keep_blocks,
    shared_blocks,
    sparsify_update,
    unflatten_arrays,
)
from settings import keys as K
from settings.run_settings import RunSettings

RESIDUAL_RECORD = "update-residual"
"""ArrayRecord of the node's state: the residual error feedback carries over."""
_RESIDUAL = "residual"

BlockLayout = tuple[np.ndarray, int]
"""``(block id of each coordinate, the loss's and weight's last; number of blocks)``."""


def sparsifies(settings: RunSettings) -> bool:
    """Whether the reply's model update is sparsified (top-k or soft threshold)."""
    return settings.updates.sparsity > 0 or settings.updates.soft_threshold > 0


def residual_of(node_state: RecordDict | None, size: int) -> np.ndarray:
    """Return the residual kept from the last round (zeros if none or resized)."""
    if node_state is None or RESIDUAL_RECORD not in node_state:
        return np.zeros(size, dtype=np.float64)
    record = node_state[RESIDUAL_RECORD]
    value = record[_RESIDUAL].numpy() if isinstance(record, ArrayRecord) else None
    if value is None or value.shape != (size,):
        return np.zeros(size, dtype=np.float64)
    return np.asarray(value, dtype=np.float64)


def sparsify_reply(
    reply: RecordDict,
    *,
    global_arrays: ArrayRecord,
    settings: RunSettings,
    blocks: BlockLayout | None = None,
    node_state: RecordDict | None = None,
) -> RecordDict:
    """Replace the reply's model by ``w_global + sparse update``, in place.

    Parameters
    ----------
    reply : RecordDict
        The trainer's reply, with the local model in ``arrays``.
    global_arrays : ArrayRecord
        The model the server sent this round (the update's reference).
    settings : RunSettings
        The run's settings.
    blocks : tuple, optional
        DPHE's block layout of this round (:data:`BlockLayout`): the top-k then
        keeps whole blocks.
    node_state : RecordDict, optional
        The node's state for this run (``Context.state``): where error feedback
        keeps its residual (without it, none is kept).
    """
    if not sparsifies(settings):
        return reply
    local, layout = flatten_arrays(_numpy(reply[K.ARRAYS]))
    reference, ref_layout = flatten_arrays(_numpy(global_arrays))
    if layout != ref_layout:
        raise ValueError("the trained model's arrays differ from the global model's")
    feedback = node_state is not None and settings.updates.feeds_back(
        settings.secure_aggregation
    )
    update = local - reference
    if feedback:
        update = update + residual_of(node_state, update.size)
    l1 = settings.updates.soft_threshold  # the elastic net's prox with l2 = 0
    if blocks is None:
        sent = sparsify_update(update, sparsity=settings.updates.sparsity, l1=l1)
    else:
        ids, num_blocks = blocks
        # one more coordinate for the loss (its block, and the weight's, are kept)
        padded = np.append(sparsify_update(update, sparsity=0.0, l1=l1), 0.0)
        if settings.dphe.sparsity_layout == "shared":
            kept = shared_blocks(num_blocks, settings.updates.sparsity, always=ids[-2:])
            sent = keep_blocks(padded, blocks=ids, kept=kept)[:-1]
        else:
            sent = block_top_k_sparsify(
                padded,
                sparsity=settings.updates.sparsity,
                blocks=ids,
                num_blocks=num_blocks,
                always=ids[-2:],
            )[:-1]
    arrays = unflatten_arrays(reference + sent, layout)
    reply[K.ARRAYS] = ArrayRecord(
        {name: Array(np.ascontiguousarray(value)) for name, value in arrays.items()}
    )
    if feedback:
        assert node_state is not None
        travelled = flatten_arrays(arrays)[0] - reference
        node_state[RESIDUAL_RECORD] = ArrayRecord(
            {_RESIDUAL: Array(np.ascontiguousarray(update - travelled))}
        )
    return reply


def _numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: arr.numpy() for name, arr in record.items()}


def sparsify_mod(
    settings_of: Callable[[Context], RunSettings],
    blocks_of: Callable[[Message, Context, RunSettings, int], BlockLayout | None],
) -> Mod:
    """Build the Flower mod for ``train``: the reply's update is sparsified.

    ``blocks_of(msg, context, settings, dimension)`` returns DPHE's block layout of
    the round for a model of ``dimension`` values, or ``None`` (element-wise).
    """

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        settings = settings_of(context)
        if reply.has_error() or not sparsifies(settings):
            return reply
        global_arrays = msg.content[K.ARRAYS]
        dimension = sum(int(np.prod(a.shape)) for a in global_arrays.values())
        sparsify_reply(
            reply.content,
            global_arrays=global_arrays,
            settings=settings,
            blocks=blocks_of(msg, context, settings, dimension),
            node_state=context.state,
        )
        return reply

    return mod
