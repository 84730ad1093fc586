"""DPHE wiring shared by the ClientApp and the ServerApp: parameters and records.

Both sides derive the same :class:`crypto.DPHEParams` from the run config, the
model's size and the key size, so nothing about the encoding travels in messages;
the keyholder gets the same parameters, per stream, from its own configuration
(:func:`stream_params`, ``python -m strategies.dphe.keyholder_streams``).
An encrypted update travels in its own ``dphe`` ArrayRecord (``block-ids``,
``shard-sizes``, ``ciphertexts`` as fixed-width big-endian bytes, ``key-id``,
``touch-mac``), which replaces the ``arrays`` record of a plaintext reply.

Streams: ``model`` is the flattened model update followed by one more coordinate,
the client's train loss divided by :data:`LOSS_SCALE` (so under DPHE the server
learns only the weighted average loss, never a client's); ``prototypes`` (FedHAP
with ``dphe.prototypes``) is :func:`hashing.fedhap.prototypes.prototype_sum_vector`,
encoded with its own fixed point (:func:`prototype_fixed_point`: weight 1, range
``+-PROTOTYPE_BOUND``, never ``dphe.clip``), so the decrypted per-class sums and
holder counts are Eq. (6)'s to ``2**-scale_bits``.

Padding is on by default (``dphe.pad = true``); with ``dphe.capacity = 0`` the
capacity is then :func:`crypto.auto_capacity` of the stream's number of blocks (at
most 4 shard counts), so the aggregator learns ``ceil(touched / M)`` only.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord

from crypto import (
    STREAM_MODEL,
    STREAM_PROTOTYPES,
    AggregatorBundle,
    ClientBundle,
    DPHEParams,
    EncryptedUpdate,
    FixedPointParams,
    KeyholderBundle,
    auto_capacity,
    kept_blocks,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
    max_packing,
)
from hashing.fedhap.prototypes import PROTOTYPE_BOUND
from settings import keys as K
from settings.run_settings import ConfigError, RunSettings
from strategies.dphe.config import DPHEConfig, DPHERun

_key = DPHEConfig.key  # the config key of a dphe field, e.g. dphe.key-dir

AGGREGATOR_BUNDLE = "aggregator.json"
KEYHOLDER_BUNDLE = "keyholder.json"
LOSS_SCALE = 64.0
"""The train loss travels as ``loss / 64`` in the model stream's last coordinate
(clipped to ``[-clip, clip]`` like every coordinate: losses above ``64 * clip`` are
reported as ``64 * clip``; resolution ``64 * 2**-scale_bits``)."""


def with_loss(update: np.ndarray, loss: float) -> np.ndarray:
    """Append the scaled train loss to a flattened model update (model stream)."""
    value = float(loss) / LOSS_SCALE if np.isfinite(loss) else 0.0
    return np.concatenate([np.asarray(update, dtype=np.float64), [value]])


def split_loss(average: np.ndarray) -> tuple[np.ndarray, float]:
    """Inverse of :func:`with_loss` on a decrypted average: (update, mean loss)."""
    return average[:-1], float(average[-1]) * LOSS_SCALE


def stream_params(
    run: DPHERun,
    *,
    model_dimension: int,
    num_classes: int,
    key_bits: int,
) -> dict[str, DPHEParams]:
    """Return the parameters of every DPHE stream of a run, as the keyholder pins.

    Parameters
    ----------
    run : DPHERun
        What DPHE reads of the run's settings (``settings.dphe_run``).
    model_dimension : int
        Number of model values sent to the clients (hashing network plus
        discriminator, if any); the model stream has one more (the loss).
    num_classes : int
        Size of the label space (layout of the prototype sums).
    key_bits : int
        Paillier key size.

    Returns
    -------
    dict of str to DPHEParams
        ``{"model": ...}`` and, with ``dphe.prototypes``, ``"prototypes"``.
    """
    streams = {
        STREAM_MODEL: dphe_params(run, dimension=model_dimension + 1, key_bits=key_bits)
    }
    if run.config.prototypes:
        streams[STREAM_PROTOTYPES] = dphe_params(
            run,
            dimension=num_classes * (run.code_length + 1),
            key_bits=key_bits,
            uniform=True,
        )
    return streams


def client_bundle_name(partition_id: int) -> str:
    """File name of a client's bundle inside the key folder."""
    return f"client-{partition_id}.json"


def fixed_point(dphe: DPHEConfig, *, uniform: bool = False) -> FixedPointParams:
    """Return a stream's fixed-point encoding (scale, clip, weight, summands).

    ``uniform`` True is the prototype stream (:func:`prototype_fixed_point`: weight
    1, range ``PROTOTYPE_BOUND``); otherwise the model stream, clipped at
    ``dphe.clip`` with ``dphe.max-weight`` (1 with ``dphe.weighting = "uniform"``).

    Raises
    ------
    ConfigError
        For the prototype stream, when the configuration cannot hold its sums.
    """
    if uniform:
        return prototype_fixed_point(dphe)
    max_weight = 1 if dphe.weighting == "uniform" else dphe.max_weight
    return FixedPointParams(
        scale_bits=dphe.scale_bits,
        clip=dphe.clip,
        max_weight=max_weight,
        max_summands=dphe.max_contributors,
    )


def prototype_fixed_point(dphe: DPHEConfig) -> FixedPointParams:
    """Return the prototype stream's fixed point: exact holder counts, no clipping.

    Every entry of :func:`hashing.fedhap.prototypes.prototype_sum_vector` lies in
    ``[-PROTOTYPE_BOUND, PROTOTYPE_BOUND]`` (class means beyond it are refused by
    the client, holder indicators are 1), so with ``clip = PROTOTYPE_BOUND`` and
    weight 1 nothing is clipped: a class-mean entry is encoded as
    ``round(x * 2**scale_bits)`` and a holder indicator as exactly
    ``2**scale_bits``. ``dphe.clip`` (a bound on model updates) plays no part. One
    summand is at most ``B = PROTOTYPE_BOUND * 2**scale_bits``; an aggregate has at
    most ``dphe.max-contributors`` summands (the aggregator refuses more), so a slot
    sum is below ``2 * B * max-contributors``, the slot width the encoding reserves:
    no sum can overflow.

    Raises
    ------
    ConfigError
        If ``B`` exceeds ``2**53`` or the slot ``2**63``, naming
        ``dphe.scale-bits`` and ``dphe.max-contributors`` and their values.
    """
    scale_bits = dphe.scale_bits
    summands = dphe.max_contributors
    try:
        return FixedPointParams(
            scale_bits=scale_bits,
            clip=PROTOTYPE_BOUND,
            max_weight=1,
            max_summands=summands,
        )
    except ValueError as exc:
        raise ConfigError(
            f"{_key('prototypes')}=true: the prototype sums (entries up to "
            f"+-{PROTOTYPE_BOUND:g}, holder counts up to {summands}) do not fit the "
            f"fixed point with {_key('scale_bits')}={scale_bits} and "
            f"{_key('max_contributors')}={summands} ({exc}); lower "
            f"{_key('scale_bits')} or {_key('max_contributors')}"
        ) from None


def block_layout(run: DPHERun) -> bool:
    """Whether the model stream's top-k keeps whole phi-space blocks.

    DPHE with ``updates.sparsity > 0`` and ``dphe.sparsity-layout`` ``"block"`` or
    ``"shared"``; a dense update (sparsity 0) encrypts every block either way.
    """
    return run.sparsity > 0 and run.config.sparsity_layout in ("block", "shared")


def dphe_params(
    run: DPHERun, *, dimension: int, key_bits: int, uniform: bool = False
) -> DPHEParams:
    """DPHE parameters for a vector of ``dimension`` values and a ``key_bits`` key.

    ``uniform`` True is the prototype stream (weight 1, :func:`prototype_fixed_point`).
    ``dphe.packing = 0`` packs as many slots per plaintext as the key allows;
    ``dphe.pad = true`` with ``dphe.capacity = 0`` uses :func:`crypto.auto_capacity`,
    or, for the model stream (``uniform`` False) under :func:`block_layout`,
    exactly the blocks a user keeps (:func:`crypto.kept_blocks`; one padded shard,
    ``single_shard``; ``dphe.capacity`` is then ignored).

    Raises
    ------
    ConfigError
        If the packing does not fit the key, naming ``dphe.packing``.
    """
    dphe = run.config
    fp = fixed_point(dphe, uniform=uniform)
    most = max_packing(key_bits, fp)
    packing = dphe.packing or most
    if packing > most:
        what = (
            f"the prototype stream's {fp.slot_bits}-bit slots (range "
            f"+-{PROTOTYPE_BOUND:g}, {_key('scale_bits')}, "
            f"{_key('max_contributors')})"
            if uniform
            else f"slots of {fp.slot_bits} bits (set by {_key('scale_bits')}, "
            f"{_key('clip')}, {_key('max_weight')}, {_key('max_contributors')})"
        )
        raise ConfigError(
            f"{_key('packing')}={dphe.packing}: a {key_bits}-bit key holds at "
            f"most {most} {what}; accepted is 0 (= {most}) or 1..{most}"
        )
    capacity = dphe.capacity
    num_blocks = -(-(dimension + 1) // packing)
    single = False
    try:
        if block_layout(run) and not uniform:
            # every user touches at most k blocks: one padded shard of k blocks
            capacity = kept_blocks(num_blocks, run.sparsity)
            single = dphe.pad
        elif dphe.pad and capacity == 0:
            capacity = auto_capacity(num_blocks)
        params = DPHEParams(
            dimension=dimension,
            packing=packing,
            fixed_point=fp,
            capacity=capacity,
            pad=dphe.pad,
            single_shard=single,
        )
        params.validate(key_bits)
    except ValueError as exc:
        raise ConfigError(f"DPHE parameters: {exc}") from None
    return params


def update_weight(settings: RunSettings, num_examples: int) -> int:
    """Return the integer weight a client encrypts with its update.

    Raises
    ------
    ValueError
        If ``num_examples`` exceeds ``dphe.max-weight`` (the fixed point's bound).
    """
    if settings.dphe.weighting == "uniform":
        return 1
    if not 1 <= num_examples <= settings.dphe.max_weight:
        raise ValueError(
            f"this client holds {num_examples} examples but {_key('max_weight')}="
            f"{settings.dphe.max_weight}: raise {_key('max_weight')} (it sets the "
            f"fixed-point headroom) or use {_key('weighting')}='uniform'"
        )
    return int(num_examples)


def dphe_record(update: EncryptedUpdate, *, key_bits: int) -> ArrayRecord:
    """Pack an encrypted update as the reply's ``dphe`` ArrayRecord."""
    return ArrayRecord(
        {
            name: Array(np.ascontiguousarray(arr))
            for name, arr in update.to_arrays(key_bits).items()
        }
    )


def read_dphe_record(record: object, *, key_bits: int) -> EncryptedUpdate:
    """Inverse of :func:`dphe_record` (ValueError naming what is malformed)."""
    if not isinstance(record, ArrayRecord):
        raise ValueError(
            f"'{K.DPHE}' is a {type(record).__name__}, expected an ArrayRecord"
        )
    try:
        arrays = {name: arr.numpy() for name, arr in record.items()}
    except Exception as exc:  # a corrupt Array that numpy cannot read
        raise ValueError(f"'{K.DPHE}' record arrays are unreadable ({exc!r})") from None
    return EncryptedUpdate.from_arrays(arrays, key_bits=key_bits)


def client_bundle_path(
    settings: RunSettings, partition_id: int, node_bundle: str = ""
) -> Path:
    """Locate a client's bundle: the node config's path, else the run's key folder.

    Raises
    ------
    FileNotFoundError
        Naming both places that were looked at.
    """
    if node_bundle:
        path = Path(node_bundle)
        where = f"node config {K.DPHE_KEY_BUNDLE}={node_bundle!r}"
    else:
        path = Path(settings.dphe.key_dir) / client_bundle_name(partition_id)
        where = f"{_key('key_dir')}={settings.dphe.key_dir!r}"
    if not path.is_file():
        raise FileNotFoundError(
            f"DPHE key bundle {str(path)!r} (from {where}) does not exist: give this "
            f"node its client-{partition_id}.json from `python -m crypto.keygen`"
        )
    return path


@functools.lru_cache(maxsize=64)
def cached_client_bundle(path: str, partition_id: int) -> ClientBundle:
    """Load (once per process) and check a client's bundle."""
    return load_client_bundle(path, client_id=partition_id)


def load_server_bundles(
    dphe: DPHEConfig, *, simulation: bool
) -> tuple[AggregatorBundle, KeyholderBundle | None]:
    """Load the aggregator's bundle and, without a keyholder URL, the keyholder's.

    In simulation the keyholder is an in-process object built from
    ``keyholder.json`` -- outside the strategy, which only ever holds the
    aggregator's bundle. With ``dphe.keyholder-url`` the keyholder is a separate
    service and its bundle is not read here at all. Outside simulation
    (``simulation`` False: the ServerApp's grid is not the simulation engine's,
    :func:`settings.runtime.server_in_simulation`) the secret key never loads into
    the ServerApp: an empty ``dphe.keyholder-url`` is a ConfigError, whether or not
    ``keyholder.json`` lies in the key folder.
    """
    folder = Path(dphe.key_dir)
    agg_path = folder / AGGREGATOR_BUNDLE
    if not agg_path.is_file():
        raise ConfigError(
            f"{_key('key_dir')}={dphe.key_dir!r} has no {AGGREGATOR_BUNDLE}: "
            "write the bundles with `python -m crypto.keygen --out DIR --clients N`"
        )
    aggregator = load_aggregator_bundle(agg_path)
    if dphe.keyholder_url:
        return aggregator, None
    if not simulation:
        raise ConfigError(
            f"{_key('keyholder_url')} is empty outside simulation: the ServerApp "
            f"must never hold the secret key ({KEYHOLDER_BUNDLE}); run "
            "`python -m crypto.keyholder_service` and give its URL in "
            f"{_key('keyholder_url')} (the in-process keyholder is for Flower's "
            "simulation engine only)"
        )
    kh_path = folder / KEYHOLDER_BUNDLE
    if not kh_path.is_file():
        raise ConfigError(
            f"{_key('key_dir')}={dphe.key_dir!r} has no {KEYHOLDER_BUNDLE} "
            f"and {_key('keyholder_url')} is empty: either run the keyholder service "
            "and give its URL, or (simulation) keep keyholder.json in the key folder"
        )
    return aggregator, load_keyholder_bundle(kh_path)
