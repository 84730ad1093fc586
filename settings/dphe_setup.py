"""DPHE wiring shared by the ClientApp and the ServerApp: parameters and records.

Both sides derive the same :class:`crypto.DPHEParams` from the run config, the
model's size and the key size, so nothing about the encoding travels in messages.
An encrypted update travels in its own ``dphe`` ArrayRecord (``block-ids``,
``shard-sizes``, ``ciphertexts`` as fixed-width big-endian bytes, ``key-id``),
which replaces the ``arrays`` record of a plaintext reply.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord

from crypto import (
    AggregatorBundle,
    ClientBundle,
    DPHEParams,
    EncryptedUpdate,
    FixedPointParams,
    KeyholderBundle,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
    max_packing,
)
from settings import keys as K
from settings.run_settings import ConfigError, RunSettings

AGGREGATOR_BUNDLE = "aggregator.json"
KEYHOLDER_BUNDLE = "keyholder.json"


def client_bundle_name(partition_id: int) -> str:
    """File name of a client's bundle inside the key folder."""
    return f"client-{partition_id}.json"


def fixed_point(settings: RunSettings, *, uniform: bool = False) -> FixedPointParams:
    """Return the run's fixed-point encoding (scale, clip, weight, summands).

    ``uniform`` forces weight 1 (prototype sums), whatever ``dphe-weighting`` says.
    """
    uniform = uniform or settings.dphe_weighting == "uniform"
    max_weight = 1 if uniform else settings.dphe_max_weight
    return FixedPointParams(
        scale_bits=settings.dphe_scale_bits,
        clip=settings.dphe_clip,
        max_weight=max_weight,
        max_summands=settings.dphe_max_contributors,
    )


def dphe_params(
    settings: RunSettings, *, dimension: int, key_bits: int, uniform: bool = False
) -> DPHEParams:
    """DPHE parameters for a vector of ``dimension`` values and a ``key_bits`` key.

    ``dphe-packing = 0`` packs as many slots per plaintext as the key allows.

    Raises
    ------
    ConfigError
        If the packing does not fit the key, naming ``dphe-packing``.
    """
    fp = fixed_point(settings, uniform=uniform)
    most = max_packing(key_bits, fp)
    packing = settings.dphe_packing or most
    if packing > most:
        raise ConfigError(
            f"{K.DPHE_PACKING}={settings.dphe_packing}: a {key_bits}-bit key holds at "
            f"most {most} slots of {fp.slot_bits} bits (set by {K.DPHE_SCALE_BITS}, "
            f"{K.DPHE_CLIP}, {K.DPHE_MAX_WEIGHT}, {K.DPHE_MAX_CONTRIBUTORS}); accepted "
            f"is 0 (= {most}) or 1..{most}"
        )
    params = DPHEParams(
        dimension=dimension,
        packing=packing,
        fixed_point=fp,
        capacity=settings.dphe_capacity,
        pad=settings.dphe_pad,
    )
    try:
        params.validate(key_bits)
    except ValueError as exc:
        raise ConfigError(f"DPHE parameters: {exc}") from None
    return params


def update_weight(settings: RunSettings, num_examples: int) -> int:
    """Return the integer weight a client encrypts with its update.

    Raises
    ------
    ValueError
        If ``num_examples`` exceeds ``dphe-max-weight`` (the fixed point's bound).
    """
    if settings.dphe_weighting == "uniform":
        return 1
    if not 1 <= num_examples <= settings.dphe_max_weight:
        raise ValueError(
            f"this client holds {num_examples} examples but {K.DPHE_MAX_WEIGHT}="
            f"{settings.dphe_max_weight}: raise {K.DPHE_MAX_WEIGHT} (it sets the "
            f"fixed-point headroom) or use {K.DPHE_WEIGHTING}='uniform'"
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
        path = Path(settings.dphe_key_dir) / client_bundle_name(partition_id)
        where = f"{K.DPHE_KEY_DIR}={settings.dphe_key_dir!r}"
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
    settings: RunSettings,
) -> tuple[AggregatorBundle, KeyholderBundle | None]:
    """Load the aggregator's bundle and, without a keyholder URL, the keyholder's.

    In simulation the keyholder is an in-process object built from
    ``keyholder.json`` -- outside the strategy, which only ever holds the
    aggregator's bundle. With ``dphe-keyholder-url`` the keyholder is a separate
    service and its bundle is not read here at all.
    """
    folder = Path(settings.dphe_key_dir)
    agg_path = folder / AGGREGATOR_BUNDLE
    if not agg_path.is_file():
        raise ConfigError(
            f"{K.DPHE_KEY_DIR}={settings.dphe_key_dir!r} has no {AGGREGATOR_BUNDLE}: "
            "write the bundles with `python -m crypto.keygen --out DIR --clients N`"
        )
    aggregator = load_aggregator_bundle(agg_path)
    if settings.dphe_keyholder_url:
        return aggregator, None
    kh_path = folder / KEYHOLDER_BUNDLE
    if not kh_path.is_file():
        raise ConfigError(
            f"{K.DPHE_KEY_DIR}={settings.dphe_key_dir!r} has no {KEYHOLDER_BUNDLE} "
            f"and {K.DPHE_KEYHOLDER_URL} is empty: either run the keyholder service "
            "and give its URL, or (simulation) keep keyholder.json in the key folder"
        )
    return aggregator, load_keyholder_bundle(kh_path)
