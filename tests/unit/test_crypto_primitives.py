"""Tests of the key-free DPHE building blocks: permutations, packing, fixed point."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crypto.dphe import DPHEParams
from crypto.fixed_point import (
    FixedPointParams,
    max_packing,
    quantize,
    remove_offsets,
    tag_field_bits,
)
from crypto.keyholder import decode_average
from crypto.packing import pack, unpack
from crypto.permutation import inverse_permutation, keyed_permutation

SEED_A = bytes(range(32))
SEED_B = bytes(range(1, 33))


# --- keyed_permutation --------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 2, 7, 1000])
def test_keyed_permutation_is_a_permutation(size: int) -> None:
    perm = keyed_permutation(SEED_A, size, "phi")
    assert perm.dtype == np.int64
    assert perm.shape == (size,)
    np.testing.assert_array_equal(np.sort(perm), np.arange(size))


def test_keyed_permutation_deterministic_per_seed_label_and_size() -> None:
    a = keyed_permutation(SEED_A, 500, "phi")
    np.testing.assert_array_equal(a, keyed_permutation(SEED_A, 500, "phi"))
    assert not np.array_equal(a, keyed_permutation(SEED_B, 500, "phi"))
    assert not np.array_equal(a, keyed_permutation(SEED_A, 500, "phi_n"))
    assert not np.array_equal(a[:499], keyed_permutation(SEED_A, 499, "phi"))


def test_keyed_permutation_is_not_identity_and_roughly_uniform() -> None:
    # Position of element 0 over many seeds: every position is reachable.
    positions = [
        int(keyed_permutation(bytes([s]) * 32, 4, "phi")[0]) for s in range(200)
    ]
    counts = np.bincount(positions, minlength=4)
    assert counts.min() > 20  # expected 50 each


@pytest.mark.parametrize(
    ("seed", "size", "label", "match"),
    [
        (b"short", 4, "phi", "32 bytes"),
        (SEED_A, -1, "phi", "size"),
        (SEED_A, 4, "", "label"),
        ("not-bytes" * 4, 4, "phi", "32 bytes"),
    ],
)
def test_keyed_permutation_rejects_bad_input(
    seed: object, size: int, label: str, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        keyed_permutation(seed, size, label)  # type: ignore[arg-type]


def test_inverse_permutation() -> None:
    perm = keyed_permutation(SEED_A, 64, "phi")
    inverse = inverse_permutation(perm)
    np.testing.assert_array_equal(inverse[perm], np.arange(64))
    np.testing.assert_array_equal(perm[inverse], np.arange(64))


# --- packing ------------------------------------------------------------------------


def test_pack_unpack_round_trip_and_layout() -> None:
    slots = [0, 1, 5, 2**10 - 1]
    value = pack(slots, 10)
    assert value == 1 << 10 | 5 << 20 | (2**10 - 1) << 30
    assert unpack(value, 4, 10) == slots
    assert unpack(0, 3, 7) == [0, 0, 0]


def test_packed_sums_add_slotwise_without_carry() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**9, size=6).tolist()
    b = rng.integers(0, 2**9, size=6).tolist()
    total = pack(a, 10) + pack(b, 10)  # each slot sum < 2**10
    assert unpack(total, 6, 10) == [x + y for x, y in zip(a, b, strict=True)]


@pytest.mark.parametrize("slots", [[-1], [2**8], [0, 256]])
def test_pack_rejects_values_outside_the_slot(slots: list[int]) -> None:
    with pytest.raises(ValueError, match=r"outside \[0, 2\*\*8\)"):
        pack(slots, 8)


def test_unpack_detects_stray_high_bits() -> None:
    with pytest.raises(ValueError, match="stray bits"):
        unpack(1 << 24, 3, 8)
    with pytest.raises(ValueError, match="non-negative"):
        unpack(-1, 3, 8)
    with pytest.raises(ValueError, match="slot_bits"):
        pack([1], 0)
    with pytest.raises(ValueError, match="count"):
        unpack(1, 0, 8)


# --- fixed point --------------------------------------------------------------------


def test_fixed_point_defaults_and_headroom() -> None:
    fp = FixedPointParams()
    assert fp.bound == fp.offset == 2**24
    # 2 * B * max_summands = 2**35 needs 36 bits.
    assert fp.slot_bits == 36
    # the tag field above the slots: 64 bits + headroom for 1024 summands = 74 bits
    assert tag_field_bits(fp.max_summands) == 74
    # and 40 guard bits between the slots and the tag field (GUARD_BITS)
    assert max_packing(2048, fp) == (2046 - 40 - 74) // 36
    assert max_packing(512, fp) == (510 - 40 - 74) // 36
    # scale 20, weight 4096, 128 summands: 41-bit slots, 71-bit tag field, 47 slots
    # per 2048-bit plaintext (49 without tags and guard)
    run = FixedPointParams(scale_bits=20, max_weight=4096, max_summands=128)
    assert (run.slot_bits, tag_field_bits(128)) == (41, 71)
    assert max_packing(2048, run) == 47
    weighted = FixedPointParams(scale_bits=16, clip=0.5, max_weight=100, max_summands=8)
    assert weighted.bound == 100 * math.ceil(0.5 * 2**16)
    assert weighted.slot_bits == (2 * weighted.bound * 8).bit_length()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scale_bits": -1}, "scale_bits"),
        ({"scale_bits": 53}, "scale_bits"),
        ({"clip": 0.0}, "clip"),
        ({"clip": float("inf")}, "clip"),
        ({"max_weight": 0}, "max_weight"),
        ({"max_summands": 0}, "max_summands"),
        ({"scale_bits": 1.5}, "scale_bits"),
        ({"scale_bits": 40, "max_summands": 2**30}, "slot_bits"),
        ({"scale_bits": 52, "clip": 4.0}, "exceeds 2\\*\\*53"),
    ],
)
def test_fixed_point_rejects_out_of_range(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FixedPointParams(**kwargs)


def test_quantize_rounds_scales_and_appends_weight() -> None:
    fp = FixedPointParams(scale_bits=4, clip=1.0, max_weight=3)
    q = quantize(np.array([0.0, 0.5, -0.25, 0.03, 1 / 32]), weight=2, params=fp)
    assert q.dtype == np.int64
    # 0.5 * 2 * 16 = 16; -0.25 * 32 = -8; 0.03 * 32 = 0.96 -> 1; 1/32 * 32 = 1.
    np.testing.assert_array_equal(q, [0, 16, -8, 1, 1, 2])


def test_clipping_saturates_at_the_bound_and_never_wraps() -> None:
    fp = FixedPointParams(scale_bits=8, clip=0.5, max_weight=4)
    q = quantize(np.array([1e9, -1e9, 0.5, -0.7, 0.49]), weight=4, params=fp)
    b = fp.bound  # 4 * ceil(0.5 * 256) = 512
    assert b == 512
    np.testing.assert_array_equal(q[:4], [b, -b, b, -b])
    assert q[4] == round(0.49 * 256 * 4)
    assert np.abs(q).max() <= b


@pytest.mark.parametrize(
    ("update", "weight", "match"),
    [
        (np.array([0.1, np.nan]), 1, "non-finite"),
        (np.array([0.1, np.inf]), 1, "non-finite"),
        (np.zeros((2, 2)), 1, "1-D"),
        (np.array(["a"]), 1, "real"),
        (np.zeros(3), 0, "weight"),
        (np.zeros(3), 3, "weight"),
        (np.zeros(3), 1.0, "integer"),
        (np.zeros(3), True, "integer"),
    ],
)
def test_quantize_rejects_bad_input(
    update: np.ndarray, weight: object, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        quantize(update, weight=weight, params=FixedPointParams(max_weight=2))  # type: ignore[arg-type]


def test_remove_offsets_and_overflow_detection() -> None:
    fp = FixedPointParams(scale_bits=4, clip=1.0)  # B = 16
    sums = remove_offsets([3 * 16, 0, 6 * 16], summands=3, params=fp)
    np.testing.assert_array_equal(sums, [0, -48, 48])
    with pytest.raises(ValueError, match="overflow or corruption"):
        remove_offsets([6 * 16 + 1], summands=3, params=fp)
    with pytest.raises(ValueError, match="summands"):
        remove_offsets([0], summands=fp.max_summands + 1, params=fp)


# --- parameters ---------------------------------------------------------------------


def test_dphe_params_derived_sizes() -> None:
    params = DPHEParams(dimension=10, packing=4)
    assert params.padded_dimension == 11
    assert params.num_blocks == 3
    assert params.slot_bits == 36
    assert params.offset == params.bound == 2**24
    assert DPHEParams(dimension=10).num_blocks == 11


def test_dphe_params_validate_against_key_size() -> None:
    DPHEParams(dimension=5, packing=11).validate(512)
    with pytest.raises(ValueError, match=r"packing must be in \[1, 11\] for 512-bit"):
        DPHEParams(dimension=5, packing=12).validate(512)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dimension": 0}, "dimension"),
        ({"dimension": 4, "packing": 0}, "packing"),
        ({"dimension": 4, "capacity": -1}, "capacity"),
        ({"dimension": 4, "pad": True}, "capacity > 0"),
        ({"dimension": 4, "capacity": 2, "pad": True}, "must divide num_blocks = 5"),
        ({"dimension": 4, "pad": 1, "capacity": 5}, "pad must be a bool"),
        ({"dimension": 4, "fixed_point": {"scale_bits": 3}}, "FixedPointParams"),
    ],
)
def test_dphe_params_reject_out_of_range(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DPHEParams(**kwargs)


def test_dphe_params_dict_round_trip() -> None:
    params = DPHEParams(
        dimension=9,
        packing=2,
        fixed_point=FixedPointParams(scale_bits=10, clip=0.25, max_weight=7),
        capacity=5,
        pad=True,
    )
    assert DPHEParams.from_dict(params.to_dict()) == params
    broken = params.to_dict() | {"surprise": 1}
    with pytest.raises(ValueError, match="unknown"):
        DPHEParams.from_dict(broken)


def test_decode_average() -> None:
    params = DPHEParams(dimension=2, fixed_point=FixedPointParams(scale_bits=4))
    average, weight = decode_average(np.array([32, -8, 4]), params)
    assert weight == 4
    np.testing.assert_allclose(average, [0.5, -0.125])
    with pytest.raises(ValueError, match="total weight"):
        decode_average(np.array([1, 2, 0]), params)
    with pytest.raises(ValueError, match="shape"):
        decode_average(np.array([1, 2]), params)
