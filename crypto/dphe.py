"""DPHE parameters, the client-side encryption and the wire formats.

Doubly-permuted homomorphic encryption (Yonetani et al., ICCV 2017, Section 2 and
Algorithm 1), generalised to fixed-point packing:

1. A user quantizes its update (:mod:`crypto.fixed_point`) into ``D + 1`` integers
   (the last is its weight) and keeps the *support*: non-zero coordinates plus the
   weight coordinate.
2. The user-shared permutation phi (:mod:`crypto.permutation`, seed known to users and
   the keyholder only) moves coordinate ``i`` to phi-space position ``j = phi[i]``.
   Positions are grouped into blocks of ``P = packing`` consecutive positions: block
   ``j // P``, slot ``j % P``. With ``P = 1`` blocks are coordinates, as in the paper.
3. Each touched block (one holding a support position) is packed into one plaintext
   (:mod:`crypto.packing`; every slot holds ``q + offset``, untouched slots the
   offset alone, i.e. an encoded zero) and Paillier-encrypted with fresh randomness.
4. Block ids go through the user's own user-aggregator permutation phi_n (seed known
   to that user and the aggregator): the aggregator can undo phi_n, never phi.
5. With a capacity ``M`` the touched blocks are split into shards of at most ``M``
   blocks; with ``pad`` every shard has exactly ``M`` blocks, filled with dummy blocks
   (random untouched blocks encrypting encoded zeros), so the aggregator learns only
   ``ceil(touched / M)`` and not the number of touched blocks (paper, "Choosing
   encryption capacity M").

The aggregator (:mod:`crypto.aggregator`) multiplies ciphertexts per phi-space block;
the keyholder (:mod:`crypto.keyholder`) decrypts the sum, removes offsets and undoes
phi.

Beyond the paper (which assumes a semi-honest aggregator), every aggregation has an
:class:`AggregationContext` -- the keyholder's session id, a *stream* name (``model``,
``prototypes``), the round -- and every user authenticates what it sends with its
client-keyholder ``mac_key`` (:mod:`crypto.keys`), so that the keyholder decrypts
honest sums only:

* phi is fresh per aggregation: its SHAKE-256 label carries the session, stream and
  round (:meth:`AggregationContext.phi_context`), so a passive aggregator cannot
  intersect rounds to learn phi and, from it, the users' supports.
* Block tags. Each plaintext carries, above its ``P`` data slots, a tag field
  (:func:`crypto.fixed_point.tag_field_bits` bits: 64 plus headroom for
  ``max_summands`` summands, so nothing carries or wraps modulo ``n``) holding
  ``t_{i,b} = PRF(mac_key_i; session, stream, round, params hash, b)``
  (:func:`block_tags`: keyed SHAKE-256, as KMAC is, 64 bits) for the phi-space
  block ``b``; dummy blocks carry tags too. The keyholder checks that each decrypted
  tag field equals the sum of the expected tags of the users that touched the block:
  raising a ciphertext to a power, mixing blocks, rounds or streams, or substituting
  ciphertexts then fails except with probability about ``2**-64``.
* Touch-set MAC. With its update a user sends ``HMAC-SHA256(mac_key_i, session,
  stream, round, params hash, client id, sorted phi-space block ids)``
  (:func:`touch_mac`), dummies included; the aggregator forwards it, and the
  keyholder verifies it, so the aggregator can neither drop a user from some blocks
  nor claim it touched fewer.
* Attestation (:class:`Attestation`). Every encryption carries the digest of the
  model the user received (:func:`crypto.binding.model_digest`), a fresh 16-byte
  nonce from the OS and its weight sealed for the keyholder (XOR with a keystream
  of its MAC key: the aggregator cannot read it). The model digest and the nonce
  are inputs of every block tag, the whole attestation of the touch-set MAC. The
  keyholder decrypts only sums whose contributors attest one model (a server that
  sends contributors different models -- the zero-model attack -- is refused), checks
  each sealed weight against ``max_weight``, and, because tags are fresh per
  encryption, ``c1 * c2**-1`` of two encryptions by one user no longer cancels its
  tags (two encryptions of one round used to give a tag-free ciphertext).

No Flower imports.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from gmpy2 import mpz

from crypto.fixed_point import (
    GUARD_BITS,
    TAG_BITS,
    FixedPointParams,
    _exact_fields,
    max_packing,
    quantize,
)
from crypto.keys import MAC_KEY_BYTES, ClientBundle
from crypto.obfuscators import FullObfuscators, ObfuscatorPool, ObfuscatorSource
from crypto.packing import pack

KEY_ID_BYTES = 32
SESSION_BYTES = 16
"""Length of a keyholder session id."""
MAC_BYTES = 32
"""Length of a touch-set MAC (HMAC-SHA256)."""
MAX_STREAM_CHARS = 64
STREAM_MODEL = "model"
"""Stream of the model update (and, under DPHE, the encrypted train loss)."""
STREAM_PROTOTYPES = "prototypes"
"""Stream of FedHAP's encrypted per-class prototype sums."""
AUTO_SHARDS = 4
"""With padding and no capacity, :func:`auto_capacity` allows at most 4 shard counts."""
SHARD_ORDER_LABEL = b"fedhash-dphe-shard-order"
TAG_LABEL = b"fedhash-dphe-block-tag"
TOUCH_LABEL = b"fedhash-dphe-touch-set"
WEIGHT_LABEL = b"fedhash-dphe-sealed-weight"
MODEL_DIGEST_BYTES = 32
"""Length of the digest of the model a user received (SHA-256)."""
NONCE_BYTES = 16
"""Length of the per-encryption nonce."""
WEIGHT_BOX_BYTES = 8
"""Length of the sealed weight."""
ATTESTATION_BYTES = MODEL_DIGEST_BYTES + NONCE_BYTES + WEIGHT_BOX_BYTES
UNBOUND_MODEL = bytes(MODEL_DIGEST_BYTES)
"""Model digest of an encryption bound to no model (library callers, benchmarks);
the ClientApp always binds the arrays it received."""
ARRAY_ATTESTATION = "attestation"
ARRAY_BLOCK_IDS = "block-ids"
ARRAY_SHARD_SIZES = "shard-sizes"
ARRAY_CIPHERTEXTS = "ciphertexts"
ARRAY_KEY_ID = "key-id"
ARRAY_TOUCH_MAC = "touch-mac"
ARRAY_KEYS = (
    ARRAY_BLOCK_IDS,
    ARRAY_SHARD_SIZES,
    ARRAY_CIPHERTEXTS,
    ARRAY_KEY_ID,
    ARRAY_TOUCH_MAC,
    ARRAY_ATTESTATION,
)
"""Keys of :meth:`EncryptedUpdate.to_arrays`."""


@dataclass(frozen=True)
class DPHEParams:
    """Public parameters of one DPHE aggregation, shared by all parties.

    Parameters
    ----------
    dimension : int
        Model size ``D`` (number of update coordinates), ``>= 1``. Internally there
        are ``D + 1`` coordinates: the last carries the weight.
    packing : int
        Slots per Paillier plaintext ``P``, ``1 <= P <= max_packing(key_bits)``.
    fixed_point : FixedPointParams
        Scale, clipping and headroom of the encoding.
    capacity : int
        Encryption capacity ``M``: most blocks per shard (0 = one shard, no limit).
    pad : bool
        Pad every shard to exactly ``M`` blocks with dummy blocks; needs
        ``capacity > 0`` dividing ``num_blocks`` (unless ``single_shard``).
    single_shard : bool
        Every user touches at most ``M`` blocks (block-structured sparsity keeps
        ``M`` blocks) and sends exactly one shard of ``M`` blocks, padded: the
        aggregator learns nothing from its size. Needs ``pad``; ``M`` need not
        divide ``num_blocks``. A user touching more blocks is refused at
        encryption, an update of several shards by the aggregator.

    Raises
    ------
    ValueError
        If a field is out of range (key-size checks are in :meth:`validate`).
    """

    dimension: int
    packing: int = 1
    fixed_point: FixedPointParams = FixedPointParams()
    capacity: int = 0
    pad: bool = False
    single_shard: bool = False

    def __post_init__(self) -> None:
        self._check_fields()

    def _check_fields(self) -> None:
        _check_int("dimension", self.dimension, 1)
        _check_int("packing", self.packing, 1)
        _check_int("capacity", self.capacity, 0)
        if not isinstance(self.fixed_point, FixedPointParams):
            raise ValueError(
                "fixed_point must be a FixedPointParams, got "
                f"{type(self.fixed_point).__name__}"
            )
        self.fixed_point.validate()
        if not isinstance(self.pad, bool):
            raise ValueError(f"pad must be a bool, got {type(self.pad).__name__}")
        if self.pad and self.capacity == 0:
            raise ValueError("pad=True needs capacity > 0 (capacity=0 means one shard)")
        if not isinstance(self.single_shard, bool):
            raise ValueError("single_shard must be a bool")
        if self.single_shard and not (self.pad and self.capacity <= self.num_blocks):
            raise ValueError(
                "single_shard=True needs pad=True and 0 < capacity <= num_blocks = "
                f"{self.num_blocks}, got pad={self.pad}, capacity={self.capacity}"
            )
        if self.pad and not self.single_shard and self.num_blocks % self.capacity:
            raise ValueError(
                f"with pad=True, capacity must divide num_blocks = {self.num_blocks} "
                f"(dimension {self.dimension} + 1 weight coordinate in blocks of "
                f"{self.packing}) so that padded shards always fit; got capacity "
                f"{self.capacity}. Divisors: {_divisors(self.num_blocks)}"
            )

    def validate(self, key_bits: int) -> None:
        """Check every field, including the packing against the key size.

        Parameters
        ----------
        key_bits : int
            Bit length of the Paillier modulus.

        Raises
        ------
        ValueError
            Naming the field, its value and the accepted range.
        """
        self._check_fields()
        limit = max_packing(key_bits, self.fixed_point)
        if self.packing > limit:
            raise ValueError(
                f"packing must be in [1, {limit}] for {key_bits}-bit keys and "
                f"slot_bits = {self.slot_bits}, got {self.packing}"
            )

    @property
    def padded_dimension(self) -> int:
        """Number of encoded coordinates ``D + 1`` (updates plus weight)."""
        return self.dimension + 1

    @property
    def num_blocks(self) -> int:
        """Number of blocks ``ceil((D + 1) / P)``."""
        return math.ceil(self.padded_dimension / self.packing)

    @property
    def slot_bits(self) -> int:
        """Bits per slot (from the fixed-point headroom)."""
        return self.fixed_point.slot_bits

    @property
    def offset(self) -> int:
        """Offset added to every encoded value (``B``)."""
        return self.fixed_point.offset

    @property
    def bound(self) -> int:
        """Per-summand bound ``B``."""
        return self.fixed_point.bound

    def max_packing(self, key_bits: int) -> int:
        """Largest packing for ``key_bits`` (:func:`crypto.fixed_point.max_packing`)."""
        return max_packing(key_bits, self.fixed_point)

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DPHEParams:
        """Build from :meth:`to_dict` output.

        Raises
        ------
        ValueError
            If a field is missing, unknown or out of range.
        """
        if isinstance(data, Mapping) and "single_shard" not in data:
            data = {**data, "single_shard": False}  # streams files before issue 16
        fields = _exact_fields(cls, data, "params")
        fields["fixed_point"] = FixedPointParams.from_dict(fields["fixed_point"])
        return cls(**fields)

    @property
    def digest(self) -> bytes:
        """SHA-256 of the canonical JSON of :meth:`to_dict` (bound into tags, MACs)."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).digest()


def auto_capacity(num_blocks: int) -> int:
    """Capacity ``M`` used with padding when none is configured.

    The smallest divisor of ``num_blocks`` with ``AUTO_SHARDS * M >= num_blocks``:
    a padded user then sends 1 to at most 4 shards of ``M`` blocks, so the
    aggregator learns only ``ceil(touched / M)`` (about 2 bits: which quarter of the
    blocks it touched) and a user pays at most ``M - 1`` dummy blocks. When
    ``num_blocks`` has no divisor near a quarter, ``M`` is larger (up to
    ``num_blocks``: every user then sends every block and nothing leaks).

    Parameters
    ----------
    num_blocks : int
        Number of blocks, ``>= 1``.

    Returns
    -------
    int
        ``M`` dividing ``num_blocks``.
    """
    _check_int("num_blocks", num_blocks, 1)
    low = math.ceil(num_blocks / AUTO_SHARDS)
    return min(d for d in _divisors(int(num_blocks)) if d >= low)


def kept_blocks(num_blocks: int, sparsity: float) -> int:
    """Blocks a block-sparse user keeps: ``num_blocks - floor(sparsity * num_blocks)``.

    Parameters
    ----------
    num_blocks : int
        Number of blocks, ``>= 1``.
    sparsity : float
        Fraction of blocks zeroed, in ``[0, 1)``.

    Returns
    -------
    int
        ``k`` in ``[1, num_blocks]``.
    """
    _check_int("num_blocks", num_blocks, 1)
    if not 0 <= sparsity < 1:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    return max(1, num_blocks - math.floor(sparsity * num_blocks + 1e-9))


def block_capacity(num_blocks: int, keep: int) -> int:
    """Capacity for block-sparse users: the smallest divisor of ``num_blocks >= keep``.

    A user that touches at most ``keep`` blocks then always sends exactly one
    padded shard of ``M`` blocks: the aggregator learns nothing from its size.
    """
    _check_int("keep", keep, 1)
    return min(d for d in _divisors(int(num_blocks)) if d >= keep)


def coordinate_blocks(
    bundle: ClientBundle, params: DPHEParams, context: AggregationContext
) -> np.ndarray:
    """Phi-space block of every coordinate for one aggregation (users only).

    Parameters
    ----------
    bundle : ClientBundle
        The user's bundle (holds the phi seed).
    params : DPHEParams
        The aggregation's parameters.
    context : AggregationContext
        Session, stream and round (phi is fresh per aggregation).

    Returns
    -------
    np.ndarray
        ``(D + 1,)`` int64: coordinate ``i`` (the weight coordinate last) is packed
        into phi-space block ``phi[i] // packing``. Block-structured sparsity
        (:func:`hashing.update_sparsity.block_top_k_sparsify`) keeps whole blocks,
        so sparsity and packing multiply.
    """
    phi = bundle.phi(params.padded_dimension, context.phi_context)
    return phi // params.packing


@dataclass(frozen=True)
class AggregationContext:
    """What one aggregation is bound to: keyholder session, stream and round.

    Parameters
    ----------
    session : bytes
        The keyholder's 16-byte session id (fresh at every keyholder start).
    stream : str
        Name of the aggregated quantity (:data:`STREAM_MODEL`, ...), 1 to 64
        characters ``[a-z0-9-]``.
    round : int
        Server round, ``>= 0``.

    Raises
    ------
    ValueError
        If a field is malformed.
    """

    session: bytes
    stream: str
    round: int

    def __post_init__(self) -> None:
        if not isinstance(self.session, bytes) or len(self.session) != SESSION_BYTES:
            raise ValueError(f"session must be {SESSION_BYTES} bytes")
        check_stream(self.stream)
        _check_int("round", self.round, 0)
        if self.round >= 2**62:
            raise ValueError("round must be < 2**62")

    def encode(self, params: DPHEParams) -> bytes:
        """Unambiguous bytes of (session, stream, round, params digest)."""
        name = self.stream.encode("ascii")
        return (
            self.session
            + len(name).to_bytes(2, "big")
            + name
            + int(self.round).to_bytes(8, "big")
            + params.digest
        )

    @property
    def phi_context(self) -> str:
        """Label suffix of this aggregation's phi (session, stream, round)."""
        return f"{self.session.hex()}/{self.stream}/{int(self.round)}"


def check_stream(stream: object) -> None:
    """Raise ValueError unless ``stream`` is 1-64 characters of ``[a-z0-9-]``."""
    if (
        not isinstance(stream, str)
        or not 1 <= len(stream) <= MAX_STREAM_CHARS
        or not all(c.isascii() and (c.isalnum() or c == "-") for c in stream)
        or stream != stream.lower()
    ):
        raise ValueError(
            f"stream must be 1-{MAX_STREAM_CHARS} characters [a-z0-9-], got {stream!r}"
        )


@dataclass(frozen=True)
class Attestation:
    """What one encryption attests, MACed with it and bound into its tags.

    Parameters
    ----------
    model : bytes
        32-byte digest of the model the user received
        (:func:`crypto.binding.model_digest`; :data:`UNBOUND_MODEL` if none).
    nonce : bytes
        16 fresh bytes from the OS, new for every encryption.
    weight_box : bytes
        The user's weight, 8 bytes big-endian, XOR a keystream of its MAC key
        (:func:`seal_weight`): only the keyholder reads it.

    Raises
    ------
    ValueError
        If a field has the wrong type or length.
    """

    model: bytes
    nonce: bytes
    weight_box: bytes

    def __post_init__(self) -> None:
        for name, size in (
            ("model", MODEL_DIGEST_BYTES),
            ("nonce", NONCE_BYTES),
            ("weight_box", WEIGHT_BOX_BYTES),
        ):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) != size:
                raise ValueError(f"attestation {name} must be {size} bytes")

    def encode(self) -> bytes:
        """Return the 56 bytes ``model || nonce || weight_box``."""
        return self.model + self.nonce + self.weight_box

    @classmethod
    def decode(cls, data: bytes) -> Attestation:
        """Inverse of :meth:`encode` (ValueError on a wrong length)."""
        if not isinstance(data, bytes) or len(data) != ATTESTATION_BYTES:
            raise ValueError(f"attestation must be {ATTESTATION_BYTES} bytes")
        a, b = MODEL_DIGEST_BYTES, MODEL_DIGEST_BYTES + NONCE_BYTES
        return cls(data[:a], data[a:b], data[b:])


def _weight_pad(
    mac_key: bytes,
    context: AggregationContext,
    params: DPHEParams,
    model: bytes,
    nonce: bytes,
) -> int:
    _check_mac_key(mac_key)
    pad = hashlib.shake_256(
        WEIGHT_LABEL
        + len(mac_key).to_bytes(2, "big")
        + mac_key
        + context.encode(params)
        + model
        + nonce
    ).digest(WEIGHT_BOX_BYTES)
    return int.from_bytes(pad, "big")


def seal_weight(
    mac_key: bytes,
    context: AggregationContext,
    params: DPHEParams,
    model: bytes,
    nonce: bytes,
    weight: int,
) -> bytes:
    """Seal ``weight`` for the keyholder (one-time keystream of the MAC key)."""
    if isinstance(weight, bool) or not 0 <= int(weight) < 2**63:
        raise ValueError(f"weight must be in [0, 2**63), got {weight!r}")
    pad = _weight_pad(mac_key, context, params, model, nonce)
    return (int(weight) ^ pad).to_bytes(WEIGHT_BOX_BYTES, "big")


def open_weight(
    mac_key: bytes,
    context: AggregationContext,
    params: DPHEParams,
    attestation: Attestation,
) -> int:
    """Return the weight sealed in ``attestation`` (keyholder side)."""
    pad = _weight_pad(mac_key, context, params, attestation.model, attestation.nonce)
    return int.from_bytes(attestation.weight_box, "big") ^ pad


def tag_shift(params: DPHEParams) -> int:
    """Bit position of the tag field: the data slots, then :data:`GUARD_BITS` zeros."""
    return params.packing * params.slot_bits + GUARD_BITS


def block_tags(
    mac_key: bytes,
    context: AggregationContext,
    params: DPHEParams,
    attestation: Attestation,
) -> np.ndarray:
    """Tags ``t_{i,b}`` of one user for every phi-space block of one aggregation.

    A pseudo-random function of the user's MAC key: SHAKE-256 of a label, the
    length-prefixed key and :meth:`AggregationContext.encode` (keyed SHAKE-256, the
    construction of KMAC), read as :data:`~crypto.fixed_point.TAG_BITS`-bit words.

    Parameters
    ----------
    mac_key : bytes
        The user's 32-byte client-keyholder key.
    context : AggregationContext
        Session, stream and round.
    params : DPHEParams
        The aggregation's parameters (their digest is bound in).
    attestation : Attestation
        Its model digest and nonce are bound in: tags differ for every encryption
        and for every model received.

    Returns
    -------
    np.ndarray
        ``(num_blocks,)`` uint64; entry ``b`` is the tag of phi-space block ``b``.
    """
    _check_mac_key(mac_key)
    width = TAG_BITS // 8
    stream = hashlib.shake_256(
        TAG_LABEL
        + len(mac_key).to_bytes(2, "big")
        + mac_key
        + context.encode(params)
        + attestation.model
        + attestation.nonce
    ).digest(width * params.num_blocks)
    return np.frombuffer(stream, dtype=">u8").astype(np.uint64)


def touch_mac(
    mac_key: bytes,
    context: AggregationContext,
    params: DPHEParams,
    client_id: int,
    block_ids: np.ndarray,
    attestation: Attestation,
) -> bytes:
    """HMAC-SHA256 over the aggregation, client id, attestation and touched blocks.

    Parameters
    ----------
    mac_key : bytes
        The user's 32-byte client-keyholder key.
    context : AggregationContext
        Session, stream and round.
    params : DPHEParams
        The aggregation's parameters.
    client_id : int
        The user's id.
    block_ids : np.ndarray
        ``(K,)`` phi-space block ids the user sent (dummies included), any order.
    attestation : Attestation
        The encryption's model digest, nonce and sealed weight.

    Returns
    -------
    bytes
        32-byte MAC.
    """
    _check_mac_key(mac_key)
    ids = np.sort(np.asarray(block_ids, dtype=np.int64)).astype(">i8")
    message = (
        TOUCH_LABEL
        + context.encode(params)
        + int(client_id).to_bytes(8, "big")
        + attestation.encode()
        + ids.tobytes()
    )
    return hmac.new(mac_key, message, hashlib.sha256).digest()


def tagged_plaintext(slots_value: int, tag: int, params: DPHEParams) -> int:
    """Put a tag (or a sum of tags) in the field above the data slots and guard."""
    return int(slots_value) + (int(tag) << tag_shift(params))


def _check_mac_key(mac_key: object) -> None:
    if not isinstance(mac_key, bytes) or len(mac_key) != MAC_KEY_BYTES:
        raise ValueError(f"mac_key must be {MAC_KEY_BYTES} bytes")


@dataclass(frozen=True, eq=False)
class Shard:
    """One shard of a user's encrypted update.

    Parameters
    ----------
    block_ids : np.ndarray
        ``(K,)`` int64 block ids after the user's permutation phi_n.
    ciphertexts : list of int
        ``K`` Paillier ciphertexts, in ``(0, n**2)``, one per block id.
    """

    block_ids: np.ndarray
    ciphertexts: list[int]

    def __len__(self) -> int:
        return len(self.ciphertexts)


@dataclass(frozen=True, eq=False)
class EncryptedUpdate:
    """A user's encrypted, doubly-permuted update: what it sends to the aggregator.

    Parameters
    ----------
    key_id : bytes
        32-byte identifier of the public key used (:func:`crypto.keys.key_id_of`).
    shards : list of Shard
        Shards of at most ``capacity`` blocks; block ids are disjoint across shards.
    touch_mac : bytes
        32-byte :func:`touch_mac` over the phi-space blocks of all shards.
    attestation : Attestation, optional
        Model digest, nonce and sealed weight (required on the wire).
    """

    key_id: bytes
    shards: list[Shard] = field(default_factory=list)
    touch_mac: bytes = b""
    attestation: Attestation | None = None

    @property
    def num_blocks(self) -> int:
        """Total number of blocks (ciphertexts) over all shards."""
        return sum(len(shard) for shard in self.shards)

    @property
    def shard_sizes(self) -> list[int]:
        """Number of blocks of each shard."""
        return [len(shard) for shard in self.shards]

    def to_arrays(self, key_bits: int) -> dict[str, np.ndarray]:
        """Serialize for transport (e.g. a Flower ``ArrayRecord``).

        Parameters
        ----------
        key_bits : int
            Bit length of ``n``; ciphertexts (``< n**2``) take ``2 * key_bits // 8``
            bytes each.

        Returns
        -------
        dict of str to np.ndarray
            ``"block-ids"``: ``(T,)`` int64, all shards concatenated;
            ``"shard-sizes"``: ``(F,)`` int64; ``"ciphertexts"``: ``(T, W)`` uint8,
            big-endian, ``W = 2 * key_bits // 8``; ``"key-id"``: ``(32,)`` uint8;
            ``"touch-mac"``: ``(32,)`` uint8; ``"attestation"``: ``(56,)`` uint8.

        Raises
        ------
        ValueError
            If ``key_bits`` is not a positive multiple of 8, a shard's lengths
            disagree or a ciphertext does not fit ``W`` bytes.
        """
        width = _ciphertext_width(key_bits)
        _check_key_id(self.key_id)
        _check_mac(self.touch_mac)
        if not isinstance(self.attestation, Attestation):
            raise ValueError("an encrypted update needs its attestation")
        ids = []
        chunks = []
        for index, shard in enumerate(self.shards):
            block_ids = np.asarray(shard.block_ids)
            if block_ids.ndim != 1 or len(block_ids) != len(shard.ciphertexts):
                raise ValueError(
                    f"shard {index}: {block_ids.shape} block ids for "
                    f"{len(shard.ciphertexts)} ciphertexts"
                )
            ids.append(block_ids.astype(np.int64))
            for ciphertext in shard.ciphertexts:
                value = int(ciphertext)
                if value < 0 or value.bit_length() > 8 * width:
                    raise ValueError(
                        f"shard {index}: ciphertext does not fit {width} bytes "
                        f"({key_bits}-bit key)"
                    )
                chunks.append(value.to_bytes(width, "big"))
        data = np.frombuffer(b"".join(chunks), dtype=np.uint8).reshape(-1, width)
        return {
            ARRAY_BLOCK_IDS: np.concatenate(ids) if ids else np.zeros(0, np.int64),
            ARRAY_SHARD_SIZES: np.asarray(self.shard_sizes, dtype=np.int64),
            ARRAY_CIPHERTEXTS: data.copy(),
            ARRAY_KEY_ID: np.frombuffer(self.key_id, dtype=np.uint8).copy(),
            ARRAY_TOUCH_MAC: np.frombuffer(self.touch_mac, dtype=np.uint8).copy(),
            ARRAY_ATTESTATION: np.frombuffer(
                self.attestation.encode(), dtype=np.uint8
            ).copy(),
        }

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray], *, key_bits: int
    ) -> EncryptedUpdate:
        """Parse :meth:`to_arrays` output; other keys in ``arrays`` are ignored.

        Parameters
        ----------
        arrays : mapping of str to np.ndarray
            The five arrays of :meth:`to_arrays`.
        key_bits : int
            Bit length of ``n`` (fixes the ciphertext width).

        Returns
        -------
        EncryptedUpdate
            The update (ciphertext ranges are checked by the aggregator).

        Raises
        ------
        ValueError
            On a missing key, wrong dtype or shape, wrong ciphertext width, negative
            shard sizes or sizes not summing to the number of blocks.
        """
        width = _ciphertext_width(key_bits)
        if not isinstance(arrays, Mapping):
            raise ValueError(f"arrays must be a mapping, got {type(arrays).__name__}")
        missing = [key for key in ARRAY_KEYS if key not in arrays]
        if missing:
            raise ValueError(f"encrypted update lacks arrays {missing}")
        block_ids = _array(arrays, ARRAY_BLOCK_IDS, np.int64, 1)
        sizes = _array(arrays, ARRAY_SHARD_SIZES, np.int64, 1)
        data = _array(arrays, ARRAY_CIPHERTEXTS, np.uint8, 2)
        key_id = _array(arrays, ARRAY_KEY_ID, np.uint8, 1)
        if key_id.shape != (KEY_ID_BYTES,):
            raise ValueError(
                f"{ARRAY_KEY_ID!r} must have shape ({KEY_ID_BYTES},), "
                f"got {key_id.shape}"
            )
        mac = _array(arrays, ARRAY_TOUCH_MAC, np.uint8, 1)
        if mac.shape != (MAC_BYTES,):
            raise ValueError(
                f"{ARRAY_TOUCH_MAC!r} must have shape ({MAC_BYTES},), got {mac.shape}"
            )
        attest = _array(arrays, ARRAY_ATTESTATION, np.uint8, 1)
        if attest.shape != (ATTESTATION_BYTES,):
            raise ValueError(
                f"{ARRAY_ATTESTATION!r} must have shape ({ATTESTATION_BYTES},), "
                f"got {attest.shape}"
            )
        attestation = Attestation.decode(attest.tobytes())
        if data.shape[1] != width:
            raise ValueError(
                f"{ARRAY_CIPHERTEXTS!r} rows must be {width} bytes for a "
                f"{key_bits}-bit key, got {data.shape[1]}"
            )
        if data.shape[0] != block_ids.shape[0]:
            raise ValueError(
                f"{data.shape[0]} ciphertexts for {block_ids.shape[0]} block ids"
            )
        if np.any(sizes < 0):
            raise ValueError(f"{ARRAY_SHARD_SIZES!r} has negative sizes: {sizes}")
        if int(sizes.sum()) != block_ids.shape[0]:
            raise ValueError(
                f"shard sizes sum to {int(sizes.sum())}, but there are "
                f"{block_ids.shape[0]} blocks"
            )
        raw = np.ascontiguousarray(data).tobytes()
        ciphertexts = [
            int.from_bytes(raw[row * width : (row + 1) * width], "big")
            for row in range(data.shape[0])
        ]
        shards = []
        start = 0
        for size in sizes.tolist():
            stop = start + size
            shards.append(
                Shard(
                    block_ids=block_ids[start:stop].copy(),
                    ciphertexts=ciphertexts[start:stop],
                )
            )
            start = stop
        return cls(
            key_id=key_id.tobytes(),
            shards=shards,
            touch_mac=mac.tobytes(),
            attestation=attestation,
        )


@dataclass(frozen=True, eq=False)
class Contribution:
    """One contributor of an encrypted sum, as the aggregator forwards it.

    Parameters
    ----------
    client_id : int
        The user's id.
    block_ids : np.ndarray
        ``(K,)`` int64 phi-space blocks it sent (dummies included), sorted, distinct.
    mac : bytes
        Its 32-byte :func:`touch_mac`.
    attestation : Attestation, optional
        Its model digest, nonce and sealed weight (covered by ``mac``; the
        keyholder refuses a contribution without one).
    """

    client_id: int
    block_ids: np.ndarray
    mac: bytes
    attestation: Attestation | None = None


@dataclass(frozen=True, eq=False)
class EncryptedSum:
    """The aggregator's encrypted, phi-permuted sum, sent to the keyholder.

    Parameters
    ----------
    key_id : bytes
        32-byte identifier of the public key.
    context : AggregationContext
        Session, stream and round of the aggregation.
    block_ids : np.ndarray
        ``(K,)`` int64 phi-space block ids, sorted, distinct: the union of the
        contributors' blocks.
    ciphertexts : list of int
        ``K`` ciphertexts; each encrypts the packed sum of ``summands`` encoded
        blocks (contributors that did not touch a block add encoded zeros).
    contributions : tuple of Contribution
        Who contributed, with the blocks each sent and its touch-set MAC.
    params : DPHEParams
        Parameters of the aggregation (the keyholder compares them with its own).
    """

    key_id: bytes
    context: AggregationContext
    block_ids: np.ndarray
    ciphertexts: list[int]
    contributions: tuple[Contribution, ...]
    params: DPHEParams

    @property
    def summands(self) -> int:
        """Number of users ``S`` summed in every block."""
        return len(self.contributions)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict.

        Ciphertexts, key id, session and MACs are hex; each contributor's blocks are
        a base64 bitmap of ``num_blocks`` bits (``np.packbits``), so the body grows
        by ``num_blocks / 8`` bytes per contributor.
        """
        num_blocks = self.params.num_blocks
        contributions = []
        for item in self.contributions:
            bitmap = np.zeros(num_blocks, dtype=bool)
            bitmap[np.asarray(item.block_ids, dtype=np.int64)] = True
            contributions.append(
                {
                    "client_id": int(item.client_id),
                    "blocks": base64.b64encode(np.packbits(bitmap).tobytes()).decode(),
                    "mac": bytes(item.mac).hex(),
                    "attestation": (
                        item.attestation.encode().hex()
                        if isinstance(item.attestation, Attestation)
                        else ""
                    ),
                }
            )
        return {
            "key_id": bytes(self.key_id).hex(),
            "session": self.context.session.hex(),
            "stream": self.context.stream,
            "round": int(self.context.round),
            "block_ids": [int(b) for b in np.asarray(self.block_ids).tolist()],
            "ciphertexts": [format(int(c), "x") for c in self.ciphertexts],
            "contributions": contributions,
            "params": self.params.to_dict(),
        }

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], *, params: DPHEParams, key_bits: int
    ) -> EncryptedSum:
        """Parse :meth:`to_json` output with *known* parameters.

        ``data["params"]`` must equal ``params.to_dict()`` (compared before anything
        else is parsed); every size is bounded by ``params``: at most ``num_blocks``
        block ids and ciphertexts, ciphertexts of at most ``2 * key_bits`` bits,
        bitmaps of exactly ``ceil(num_blocks / 8)`` bytes, at most
        ``max_summands`` contributions. Nothing larger is allocated.

        Parameters
        ----------
        data : mapping
            The JSON object.
        params : DPHEParams
            The pinned parameters of ``data["stream"]``.
        key_bits : int
            Bit length of ``n``.

        Raises
        ------
        ValueError
            If a field is missing, malformed, too large, or the parameters differ.
        """
        if not isinstance(data, Mapping):
            raise ValueError(
                f"encrypted_sum must be an object, got {type(data).__name__}"
            )
        expected = {
            "key_id",
            "session",
            "stream",
            "round",
            "block_ids",
            "ciphertexts",
            "contributions",
            "params",
        }
        if set(data) != expected:
            raise ValueError(f"encrypted_sum must have exactly the fields {expected}")
        if data["params"] != params.to_dict():
            raise ValueError("encrypted_sum.params differ from the pinned parameters")
        num_blocks = params.num_blocks
        key_id = _hex_bytes(data["key_id"], "key_id", KEY_ID_BYTES)
        session = _hex_bytes(data["session"], "session", SESSION_BYTES)
        round_ = data["round"]
        if isinstance(round_, bool) or not isinstance(round_, int):
            raise ValueError("encrypted_sum.round must be an integer")
        context = AggregationContext(session, data["stream"], round_)
        block_ids = data["block_ids"]
        if (
            not isinstance(block_ids, list)
            or len(block_ids) > num_blocks
            or not all(
                isinstance(b, int) and not isinstance(b, bool) and 0 <= b < num_blocks
                for b in block_ids
            )
        ):
            raise ValueError(
                f"encrypted_sum.block_ids must be at most {num_blocks} integers in "
                f"[0, {num_blocks})"
            )
        raw = data["ciphertexts"]
        digits = (2 * key_bits + 3) // 4
        if (
            not isinstance(raw, list)
            or len(raw) != len(block_ids)
            or not all(isinstance(c, str) and 0 < len(c) <= digits for c in raw)
        ):
            raise ValueError(
                "encrypted_sum.ciphertexts must be hex strings of at most "
                f"{digits} digits, as many as block_ids"
            )
        try:
            ciphertexts = [int(c, 16) for c in raw]
        except ValueError:
            raise ValueError("encrypted_sum.ciphertexts must be hex strings") from None
        items = data["contributions"]
        if not isinstance(items, list) or not (
            1 <= len(items) <= params.fixed_point.max_summands
        ):
            raise ValueError(
                "encrypted_sum.contributions must be a list of 1 to "
                f"{params.fixed_point.max_summands} contributors"
            )
        bitmap_bytes = (num_blocks + 7) // 8
        contributions = []
        for item in items:
            if not isinstance(item, Mapping) or set(item) != {
                "client_id",
                "blocks",
                "mac",
                "attestation",
            }:
                raise ValueError(
                    "each contribution must be {client_id, blocks, mac, attestation}"
                )
            client_id = item["client_id"]
            if isinstance(client_id, bool) or not isinstance(client_id, int):
                raise ValueError("contribution client_id must be an integer")
            blocks = item["blocks"]
            if not isinstance(blocks, str) or len(blocks) > 4 * bitmap_bytes // 3 + 4:
                raise ValueError("contribution blocks must be a base64 bitmap")
            try:
                packed = base64.b64decode(blocks, validate=True)
            except ValueError:
                raise ValueError("contribution blocks must be base64") from None
            if len(packed) != bitmap_bytes:
                raise ValueError(
                    f"contribution blocks must be a bitmap of {bitmap_bytes} bytes"
                )
            bits = np.unpackbits(np.frombuffer(packed, dtype=np.uint8))
            if bits[num_blocks:].any():
                raise ValueError("contribution bitmap has bits past num_blocks")
            ids = np.flatnonzero(bits[:num_blocks]).astype(np.int64)
            mac = _hex_bytes(item["mac"], "mac", MAC_BYTES)
            attestation = Attestation.decode(
                _hex_bytes(item["attestation"], "attestation", ATTESTATION_BYTES)
            )
            contributions.append(Contribution(client_id, ids, mac, attestation))
        return cls(
            key_id=key_id,
            context=context,
            block_ids=np.asarray(block_ids, dtype=np.int64).reshape(-1),
            ciphertexts=ciphertexts,
            contributions=tuple(contributions),
            params=params,
        )


def _hex_bytes(value: object, name: str, size: int) -> bytes:
    if not isinstance(value, str) or len(value) != 2 * size:
        raise ValueError(f"encrypted_sum.{name} must be {size} bytes in hex")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"encrypted_sum.{name} must be hex") from None


def encrypt_update(
    update: np.ndarray,
    *,
    weight: int,
    bundle: ClientBundle,
    params: DPHEParams,
    context: AggregationContext,
    rng: np.random.Generator,
    obfuscators: ObfuscatorPool | ObfuscatorSource | None = None,
    model_digest: bytes | None = None,
) -> EncryptedUpdate:
    """Encrypt one user's update with DPHE (Algorithm 1, steps 3-4), tags and MAC.

    Parameters
    ----------
    update : np.ndarray
        ``(D,)`` real update, finite, ``D == params.dimension`` (model units; clipped
        to ``[-clip, clip]``).
    weight : int
        The user's weight, ``1 <= weight <= params.fixed_point.max_weight`` (e.g.
        its number of examples, if ``max_weight`` allows; 1 for a plain average).
    bundle : ClientBundle
        The user's key bundle (public key, phi seed, own seed).
    params : DPHEParams
        Public parameters, valid for ``bundle.key_bits``.
    context : AggregationContext
        Keyholder session, stream and round: phi, the block tags and the touch-set
        MAC are all bound to it.
    rng : np.random.Generator
        Source of the shard order and of the dummy blocks. 32 bytes drawn from it are
        hashed with both of the user's secret seeds (phi seed and own seed) into the
        generator actually used, so even a generator seeded from a public run seed
        lets neither the aggregator (no phi seed) nor another user (no own seed)
        predict which blocks are dummies; results stay reproducible for a seeded
        ``rng``. Paillier randomness comes from the OS, not from ``rng``.
    obfuscators : ObfuscatorPool or ObfuscatorSource, optional
        Where the ``r**n`` of each ciphertext comes from
        (:mod:`crypto.obfuscators`): a pool filled offline (one value popped per
        ciphertext), a DJN source, or, by default, fresh full-length ``r**n`` from
        the OS CSPRNG (as python-paillier). Each ciphertext is
        ``(1 + n * plaintext) * r**n mod n**2``, computed in gmpy2.
    model_digest : bytes, optional
        32-byte digest of the model this update was trained from
        (:func:`crypto.binding.model_digest`), bound into the tags and the MAC;
        ``None`` binds :data:`UNBOUND_MODEL` (library use; the ClientApp always
        binds the arrays it received). A fresh nonce from the OS is bound too.

    Returns
    -------
    EncryptedUpdate
        Shards of ``(block id after phi_n, ciphertext)`` and the touch-set MAC;
        every plaintext carries the block's tag above its slots.

    Raises
    ------
    ValueError
        If the update has the wrong length or is not finite, the weight is out of
        range or the parameters are invalid for the key.
    """
    params.validate(bundle.key_bits)
    values = np.asarray(update)
    if values.ndim != 1 or values.shape[0] != params.dimension:
        raise ValueError(
            f"update must have shape ({params.dimension},), got {values.shape}"
        )
    q = quantize(values, weight=weight, params=params.fixed_point)
    packing = params.packing
    num_blocks = params.num_blocks
    offset = params.offset
    if not isinstance(context, AggregationContext):
        raise ValueError("context must be an AggregationContext")
    support = np.flatnonzero(q)  # always holds the weight coordinate D
    positions = bundle.phi(params.padded_dimension, context.phi_context)[support]
    encoded = np.full(num_blocks * packing, offset, dtype=np.int64)
    encoded[positions] = q[support] + offset
    touched = np.unique(positions // packing)
    blocks = _shard_blocks(touched, params, _private_generator(bundle, rng))
    phi_n = bundle.phi_n(num_blocks)
    n = mpz(bundle.n)
    nsquare = n * n
    if obfuscators is None:
        obfuscators = FullObfuscators(bundle.n)
    if obfuscators.n != n:
        raise ValueError("obfuscators were made for another public key")
    draw = (
        obfuscators.take
        if isinstance(obfuscators, ObfuscatorPool)
        else obfuscators.draw
    )
    slot_bits = params.slot_bits
    model = UNBOUND_MODEL if model_digest is None else model_digest
    if not isinstance(model, bytes) or len(model) != MODEL_DIGEST_BYTES:
        raise ValueError(f"model_digest must be {MODEL_DIGEST_BYTES} bytes")
    nonce = os.urandom(NONCE_BYTES)
    attestation = Attestation(
        model,
        nonce,
        seal_weight(bundle.mac_key, context, params, model, nonce, int(q[-1])),
    )
    tags = block_tags(bundle.mac_key, context, params, attestation)
    shards = []
    for shard_blocks in blocks:
        ciphertexts = []
        for b in shard_blocks.tolist():
            plaintext = tagged_plaintext(
                pack(encoded[b * packing : (b + 1) * packing].tolist(), slot_bits),
                int(tags[b]),
                params,
            )
            # g = n + 1: g**m = 1 + n*m (mod n**2); plaintext < n (max_packing)
            ciphertexts.append(int((n * plaintext + 1) * draw() % nsquare))
        shards.append(
            Shard(block_ids=phi_n[shard_blocks].copy(), ciphertexts=ciphertexts)
        )
    sent = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    mac = touch_mac(
        bundle.mac_key, context, params, bundle.client_id, sent, attestation
    )
    return EncryptedUpdate(
        key_id=bundle.key_id, shards=shards, touch_mac=mac, attestation=attestation
    )


def _private_generator(
    bundle: ClientBundle, rng: np.random.Generator
) -> np.random.Generator:
    """Mix ``rng`` with the user's two secret seeds (see :func:`encrypt_update`)."""
    material = hashlib.shake_256(
        SHARD_ORDER_LABEL + bundle.phi_seed + bundle.client_seed + rng.bytes(32)
    ).digest(32)
    return np.random.default_rng(int.from_bytes(material, "big"))


def _shard_blocks(
    touched: np.ndarray, params: DPHEParams, rng: np.random.Generator
) -> list[np.ndarray]:
    """Split phi-space blocks into shards, adding dummy blocks when padding."""
    capacity = params.capacity
    if capacity == 0:
        return [rng.permutation(touched)]
    if params.single_shard and len(touched) > capacity:
        raise ValueError(
            f"the update touches {len(touched)} blocks, more than the single "
            f"shard's capacity {capacity} (sparsify by blocks first)"
        )
    count = math.ceil(len(touched) / capacity)
    if params.pad:
        untouched = np.setdiff1d(
            np.arange(params.num_blocks, dtype=np.int64), touched, assume_unique=True
        )
        need = count * capacity - len(touched)
        # capacity divides num_blocks (checked), so ``need <= len(untouched)``.
        dummies = rng.choice(untouched, size=need, replace=False)
        touched = np.concatenate([touched, dummies.astype(np.int64)])
    order = rng.permutation(touched)
    return [order[i : i + capacity] for i in range(0, len(order), capacity)]


def _divisors(value: int) -> list[int]:
    if value > MAX_DIVISOR_SEARCH:
        raise ValueError(f"{value} blocks: too many to list divisors")
    small = [d for d in range(1, math.isqrt(value) + 1) if value % d == 0]
    return sorted({*small, *(value // d for d in small)})


MAX_DIVISOR_SEARCH = 10**12
"""Largest number whose divisors are listed (``10**6`` trial divisions)."""


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _ciphertext_width(key_bits: int) -> int:
    if isinstance(key_bits, bool) or not isinstance(key_bits, int) or key_bits <= 0:
        raise ValueError(f"key_bits must be a positive integer, got {key_bits!r}")
    if key_bits % 8:
        raise ValueError(f"key_bits must be a multiple of 8, got {key_bits}")
    return 2 * key_bits // 8


def _check_mac(mac: object) -> None:
    if not isinstance(mac, bytes) or len(mac) != MAC_BYTES:
        raise ValueError(f"touch_mac must be {MAC_BYTES} bytes")


def _check_key_id(key_id: object) -> None:
    if not isinstance(key_id, bytes) or len(key_id) != KEY_ID_BYTES:
        raise ValueError(f"key_id must be {KEY_ID_BYTES} bytes")


def _array(
    arrays: Mapping[str, np.ndarray], key: str, dtype: type, ndim: int
) -> np.ndarray:
    value = arrays[key]
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{key!r} must be a numpy array, got {type(value).__name__}")
    if value.dtype != np.dtype(dtype):
        raise ValueError(
            f"{key!r} must have dtype {np.dtype(dtype)}, got {value.dtype}"
        )
    if value.ndim != ndim:
        raise ValueError(f"{key!r} must be {ndim}-D, got shape {value.shape}")
    return value
