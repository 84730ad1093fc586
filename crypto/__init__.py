"""DPHE: doubly-permuted homomorphic encryption for federated averaging. No Flower.

Yonetani et al., "Privacy-Preserving Visual Learning Using Doubly Permuted
Homomorphic Encryption" (ICCV 2017), Section 2 and Algorithm 1, with fixed-point
packing. Roles and what each holds:

============  ======================================================================
key gen G     :func:`generate_keys` / ``python -m crypto.keygen``: writes the bundles
user (client) :class:`ClientBundle`: public key, phi seed, own phi_n seed, own
              MAC key; :func:`encrypt_update` (tags + touch-set MAC)
aggregator A  :class:`AggregatorBundle`: public key, all phi_n seeds, auth token;
              :class:`DPHEAggregator` (never decrypts, never knows phi)
keyholder K   :class:`KeyholderBundle`: secret key, phi seed, every MAC key, auth
              token; :class:`Keyholder` (in-process) or
              ``python -m crypto.keyholder_service`` reached through
              :class:`RemoteKeyholder`; decrypts, once per session, stream and
              round, authenticated sums of >= 3 users only (malicious aggregator)
============  ======================================================================

Modules: :mod:`crypto.permutation` (seeded permutations), :mod:`crypto.fixed_point`
(encoding, scale, clipping, headroom), :mod:`crypto.packing`, :mod:`crypto.keys`,
:mod:`crypto.dphe` (parameters, client encryption, wire formats),
:mod:`crypto.obfuscators` (full, DJN short-exponent and precomputed ``r**n``),
:mod:`crypto.aggregator`, :mod:`crypto.keyholder`, :mod:`crypto.naive` (element-wise
baseline), :mod:`crypto.keyholder_service` (FastAPI; not imported here) and
:mod:`crypto.keyholder_client`.
"""

from crypto.aggregator import DPHEAggregator
from crypto.dphe import (
    ARRAY_BLOCK_IDS,
    ARRAY_CIPHERTEXTS,
    ARRAY_KEY_ID,
    ARRAY_KEYS,
    ARRAY_SHARD_SIZES,
    ARRAY_TOUCH_MAC,
    STREAM_MODEL,
    STREAM_PROTOTYPES,
    AggregationContext,
    Contribution,
    DPHEParams,
    EncryptedSum,
    EncryptedUpdate,
    Shard,
    auto_capacity,
    block_capacity,
    coordinate_blocks,
    encrypt_update,
    kept_blocks,
)
from crypto.fixed_point import FixedPointParams, max_packing, quantize
from crypto.keyholder import (
    AggregateRefused,
    Keyholder,
    KeyholderLike,
    decode_average,
)
from crypto.keyholder_client import RemoteKeyholder
from crypto.keys import (
    AggregatorBundle,
    ClientBundle,
    KeyholderBundle,
    KeyPaths,
    generate_keys,
    key_id_of,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
)
from crypto.naive import naive_aggregate, naive_decrypt, naive_encrypt
from crypto.obfuscators import (
    OBFUSCATORS,
    DJNObfuscators,
    FullObfuscators,
    ObfuscatorPool,
    make_obfuscators,
)
from crypto.packing import pack, unpack
from crypto.permutation import keyed_permutation

__all__ = [
    "ARRAY_BLOCK_IDS",
    "ARRAY_CIPHERTEXTS",
    "ARRAY_KEYS",
    "ARRAY_KEY_ID",
    "ARRAY_SHARD_SIZES",
    "ARRAY_TOUCH_MAC",
    "OBFUSCATORS",
    "STREAM_MODEL",
    "STREAM_PROTOTYPES",
    "AggregateRefused",
    "AggregationContext",
    "Contribution",
    "AggregatorBundle",
    "ClientBundle",
    "DPHEAggregator",
    "DJNObfuscators",
    "DPHEParams",
    "EncryptedSum",
    "EncryptedUpdate",
    "FixedPointParams",
    "FullObfuscators",
    "KeyPaths",
    "Keyholder",
    "KeyholderBundle",
    "KeyholderLike",
    "ObfuscatorPool",
    "RemoteKeyholder",
    "Shard",
    "auto_capacity",
    "block_capacity",
    "coordinate_blocks",
    "decode_average",
    "encrypt_update",
    "generate_keys",
    "key_id_of",
    "keyed_permutation",
    "kept_blocks",
    "load_aggregator_bundle",
    "load_client_bundle",
    "load_keyholder_bundle",
    "make_obfuscators",
    "max_packing",
    "naive_aggregate",
    "naive_decrypt",
    "naive_encrypt",
    "pack",
    "quantize",
    "unpack",
]
