"""Fixed-point encoding of model updates for additively homomorphic sums.

Paillier encrypts integers modulo ``n``; DPHE sums real-valued updates. A user's
update ``w`` (float64, length ``D``) with integer weight ``1 <= weight <= max_weight``
is encoded as ``D + 1`` integers

* ``q_i = round(clip(w_i, -clip, clip) * weight * 2**scale_bits)`` for ``i < D``
  (round half to even), so a coordinate's unit is ``2**-scale_bits``;
* ``q_D = weight`` (the *weight coordinate*, unscaled), so the keyholder's sum also
  carries the total weight and the aggregate decodes to a weighted average.

Scale. ``scale_bits`` fixes the resolution: the rounding error of one coordinate of
one user is at most ``0.5`` units (plus float64 rounding of the product
``clip(w_i) * 2**scale_bits * weight``, below ``2**-28`` units for the defaults), so
over ``N`` users the weighted average ``sum_n q^(n) / 2**scale_bits / W`` with total
weight ``W`` is within ``N * 0.5 / 2**scale_bits / W`` of the weighted average of
the clipped updates.

Clipping. Values outside ``[-clip, clip]`` are clipped, never wrapped: the encoding
of one summand is bounded by ``B = max_weight * ceil(clip * 2**scale_bits)``, so
``|q_i| <= B`` for every coordinate, the weight coordinate included.

Offset and headroom. Paillier plaintexts are non-negative, so each value is stored
as ``q + offset`` with ``offset = B``, in ``[0, 2B]``. A slot of a packed plaintext
(:mod:`crypto.packing`) holds the sum of up to ``max_summands`` such values, at most
``2 * B * max_summands``; it is given
``slot_bits = (2 * B * max_summands).bit_length()`` bits, so a sum of at most
``max_summands`` summands never carries into the next slot.
After decryption the keyholder subtracts ``S * offset`` from each slot sum of ``S``
summands and checks the result lies in ``[-S * B, S * B]``; anything else means
overflow or corruption and is refused. :func:`max_packing` gives how many slots fit
in one plaintext below ``n``.

Every bound is enforced with a ``ValueError`` that names the value and the bound;
nothing wraps silently. ``slot_bits <= 63`` is required so that every slot sum fits
an int64, and ``B <= 2**53`` so that float64 scaling is exact.

No Flower imports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

MAX_SLOT_BITS = 63
"""Largest slot width: every slot sum (and decoded sum) must fit an int64."""

MAX_BOUND = 2**53
"""Largest per-summand bound ``B``: float64 represents every integer up to it."""

TAG_BITS = 64
"""Bits of one block's authentication tag (:mod:`crypto.dphe`)."""

GUARD_BITS = 40
"""Zero bits between the data slots and the tag field of a packed plaintext.

They let the aggregator blind one client's data part with a uniform mask of
``P * slot_bits + GUARD_BITS`` bits before the keyholder checks that client's tags
(:meth:`crypto.keyholder.Keyholder.identify`): the keyholder then sees the data
within statistical distance ``2**-GUARD_BITS`` of uniform, and a carry into the
tag field with probability at most ``2**-GUARD_BITS``."""


def tag_field_bits(max_summands: int) -> int:
    """Width of the tag field above the data slots of a packed plaintext.

    The field holds the sum of at most ``max_summands`` tags of :data:`TAG_BITS`
    bits, so it is given ``(max_summands * (2**TAG_BITS - 1)).bit_length()`` bits
    and never carries out (nothing wraps modulo ``n``).
    """
    return (int(max_summands) * ((1 << TAG_BITS) - 1)).bit_length()


@dataclass(frozen=True)
class FixedPointParams:
    """Fixed-point encoding and its headroom (see the module docstring).

    Parameters
    ----------
    scale_bits : int
        Fractional bits: one unit of a coordinate is ``2**-scale_bits``, in ``[0, 52]``.
    clip : float
        Every coordinate is clipped to ``[-clip, clip]`` (model units), ``> 0``.
    max_weight : int
        Largest per-user integer weight, ``>= 1`` (1 = plain average).
    max_summands : int
        Largest number of users one aggregate may sum, ``>= 1``.

    Raises
    ------
    ValueError
        If a field is out of range or the derived bounds exceed
        :data:`MAX_BOUND` / :data:`MAX_SLOT_BITS`.
    """

    scale_bits: int = 24
    clip: float = 1.0
    max_weight: int = 1
    max_summands: int = 1024

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field and derived bound.

        Raises
        ------
        ValueError
            Naming the field, its value and the accepted range.
        """
        _check_int("scale_bits", self.scale_bits, 0, 52)
        if (
            isinstance(self.clip, bool)
            or not isinstance(self.clip, int | float)
            or not math.isfinite(self.clip)
            or self.clip <= 0
        ):
            raise ValueError(f"clip must be a finite number > 0, got {self.clip!r}")
        _check_int("max_weight", self.max_weight, 1, None)
        _check_int("max_summands", self.max_summands, 1, None)
        scaled = float(self.clip) * 2.0**self.scale_bits
        if not math.isfinite(scaled) or self.max_weight * math.ceil(scaled) > MAX_BOUND:
            raise ValueError(
                f"per-summand bound B = max_weight * ceil(clip * 2**scale_bits) "
                f"(max_weight={self.max_weight}, clip={self.clip}, "
                f"scale_bits={self.scale_bits}) exceeds 2**53"
            )
        if self.slot_bits > MAX_SLOT_BITS:
            raise ValueError(
                f"slot_bits = {self.slot_bits} (from B = {self.bound} and "
                f"max_summands = {self.max_summands}) exceeds {MAX_SLOT_BITS}; "
                "lower scale_bits, clip, max_weight or max_summands"
            )

    @property
    def bound(self) -> int:
        """Per-summand bound ``B``: ``|q| <= B`` for every encoded value."""
        return self.max_weight * math.ceil(float(self.clip) * 2.0**self.scale_bits)

    @property
    def offset(self) -> int:
        """Offset added to each value so that it is non-negative (``== B``)."""
        return self.bound

    @property
    def slot_bits(self) -> int:
        """Bits per slot: ``(2 * B * max_summands).bit_length()``."""
        return (2 * self.bound * self.max_summands).bit_length()

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FixedPointParams:
        """Build from :meth:`to_dict` output.

        Raises
        ------
        ValueError
            If ``data`` is not a mapping with exactly the expected fields, or a field
            is out of range.
        """
        return cls(**_exact_fields(cls, data, "fixed_point"))


def max_packing(key_bits: int, params: FixedPointParams) -> int:
    """Largest number of slots per Paillier plaintext.

    A packed plaintext of ``P`` slots, :data:`GUARD_BITS` zero bits and the tag
    field (:func:`tag_field_bits`, 71 bits for ``max_summands = 128``) is below
    ``2**(P * slot_bits + GUARD_BITS + tag_bits)``; it must stay below
    ``n >= 2**(key_bits - 1)``, hence
    ``P = (key_bits - 2 - GUARD_BITS - tag_bits) // slot_bits`` (47 instead of 49
    for a 2048-bit key and the run defaults, 41-bit slots).

    Parameters
    ----------
    key_bits : int
        Bit length of the Paillier modulus ``n``.
    params : FixedPointParams
        Encoding, which fixes ``slot_bits``.

    Returns
    -------
    int
        Maximum packing (may be 0 when one slot does not fit).
    """
    _check_int("key_bits", key_bits, 2, None)
    return (
        key_bits - 2 - GUARD_BITS - tag_field_bits(params.max_summands)
    ) // params.slot_bits


def quantize(
    update: np.ndarray, *, weight: int, params: FixedPointParams
) -> np.ndarray:
    """Encode one user's update and weight as integers (before the offset).

    Parameters
    ----------
    update : np.ndarray
        ``(D,)`` real update, finite (model units).
    weight : int
        The user's integer weight, ``1 <= weight <= params.max_weight``.
    params : FixedPointParams
        Scale and clipping.

    Returns
    -------
    np.ndarray
        ``(D + 1,)`` int64: ``q_i = round(clip(update_i) * weight * 2**scale_bits)``
        for ``i < D`` and ``q_D = weight``; every entry in ``[-B, B]``.

    Raises
    ------
    ValueError
        If the update is not 1-D real and finite, or the weight is out of range.
    """
    values = np.asarray(update)
    if values.ndim != 1:
        raise ValueError(f"update must be 1-D, got shape {values.shape}")
    if not (
        np.issubdtype(values.dtype, np.floating)
        or np.issubdtype(values.dtype, np.integer)
    ):
        raise ValueError(f"update must be real-valued, got dtype {values.dtype}")
    values = values.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise ValueError(
            f"update has {bad.size} non-finite values (first at index {bad[0]})"
        )
    check_weight(weight, params)
    clip = float(params.clip)
    scaled = np.clip(values, -clip, clip) * 2.0**params.scale_bits * float(weight)
    q = np.empty(values.size + 1, dtype=np.int64)
    q[:-1] = np.rint(scaled)
    q[-1] = weight
    peak = int(np.abs(q).max())
    if peak > params.bound:  # cannot happen by construction; never wrap silently
        raise ValueError(f"encoded value {peak} exceeds the bound B = {params.bound}")
    return q


def check_weight(weight: int, params: FixedPointParams) -> None:
    """Check ``weight`` is an integer in ``[1, params.max_weight]``.

    Raises
    ------
    ValueError
        Naming the weight and the range.
    """
    if isinstance(weight, bool) or not isinstance(weight, int | np.integer):
        raise ValueError(f"weight must be an integer, got {type(weight).__name__}")
    if not 1 <= weight <= params.max_weight:
        raise ValueError(
            f"weight must be in [1, max_weight={params.max_weight}], got {weight}"
        )


def remove_offsets(
    slot_sums: Sequence[int] | np.ndarray, *, summands: int, params: FixedPointParams
) -> np.ndarray:
    """Turn decrypted slot sums of ``summands`` offset values into signed sums.

    Parameters
    ----------
    slot_sums : sequence of int
        ``(K,)`` decrypted sums, each of ``summands`` values ``q + offset``.
    summands : int
        Number of summands ``S`` in every sum, ``1 <= S <= params.max_summands``.
    params : FixedPointParams
        The encoding.

    Returns
    -------
    np.ndarray
        ``(K,)`` int64 ``slot_sum - S * offset``, each in ``[-S * B, S * B]``.

    Raises
    ------
    ValueError
        If ``summands`` is out of range or a sum is outside ``[0, 2 * S * B]``
        (overflow or corruption).
    """
    _check_int("summands", summands, 1, params.max_summands)
    limit = summands * params.bound
    raw = [int(value) for value in slot_sums]
    for index, value in enumerate(raw):
        if not 0 <= value <= 2 * limit:
            raise ValueError(
                f"slot sum {value} at position {index} is outside [0, {2 * limit}] "
                f"for {summands} summands: overflow or corruption"
            )
    return np.asarray(raw, dtype=np.int64) - np.int64(summands * params.offset)


def _check_int(name: str, value: object, low: int | None, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")


def _exact_fields(
    cls: type[DataclassInstance], data: Mapping[str, Any], what: str
) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}")
    names = set(cls.__dataclass_fields__)
    missing = names - set(data)
    extra = set(data) - names
    if missing or extra:
        raise ValueError(
            f"{what} fields mismatch: missing {sorted(missing)}, "
            f"unknown {sorted(extra)}"
        )
    return dict(data)
