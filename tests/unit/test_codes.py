"""Tests of hashing.codes: binarization, packing, Hamming distances."""

from __future__ import annotations

import numpy as np
import pytest

from hashing.codes import (
    distance_dtype,
    hamming_distance,
    n_words,
    pack_bytes,
    pack_codes,
    sign_codes,
    unpack_bytes,
    unpack_codes,
)

BIT_LENGTHS = [1, 12, 48, 63, 64, 65, 128, 130, 300]


def random_codes(rng: np.random.Generator, n: int, bits: int) -> np.ndarray:
    return rng.choice(np.array([-1, 1], dtype=np.int8), size=(n, bits))


def test_sign_codes_values_and_zero() -> None:
    x = np.array([[-2.5, 0.0, 3.0, -0.0], [1e-9, -1e-9, 0.5, -7.0]])
    out = sign_codes(x)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, [[-1, 1, 1, 1], [1, -1, 1, -1]])


def test_sign_codes_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="2-D"):
        sign_codes(np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        sign_codes(np.array([[0.0, np.nan]]))


@pytest.mark.parametrize("bits", BIT_LENGTHS)
def test_pack_unpack_round_trip(bits: int) -> None:
    rng = np.random.default_rng(bits)
    codes = random_codes(rng, 17, bits)
    packed = pack_codes(codes)
    assert packed.dtype == np.uint64
    assert packed.shape == (17, n_words(bits))
    assert packed.flags.c_contiguous
    np.testing.assert_array_equal(unpack_codes(packed, bits), codes)
    as_bytes = pack_bytes(codes)
    assert as_bytes.dtype == np.uint8 and as_bytes.shape == (17, -(-bits // 8))
    np.testing.assert_array_equal(unpack_bytes(as_bytes, bits), codes)
    # bool input (True = +1) and float +-1 input pack identically
    np.testing.assert_array_equal(pack_codes(codes > 0), packed)
    np.testing.assert_array_equal(pack_codes(codes.astype(np.float32)), packed)


def test_pack_bit_layout_and_zero_padding() -> None:
    codes = -np.ones((2, 65), dtype=np.int8)
    codes[0, 0] = 1  # bit 0 of word 0
    codes[0, 63] = 1  # bit 63 of word 0
    codes[1, 64] = 1  # bit 0 of word 1
    packed = pack_codes(codes)
    assert packed[0, 0] == np.uint64(1) | (np.uint64(1) << np.uint64(63))
    assert packed[0, 1] == 0
    assert packed[1, 0] == 0 and packed[1, 1] == 1
    all_plus = pack_codes(np.ones((1, 12), dtype=np.int8))
    assert all_plus[0, 0] == (1 << 12) - 1  # padding bits stay zero


def test_pack_codes_validation() -> None:
    with pytest.raises(ValueError, match="2-D"):
        pack_codes(np.ones(8, dtype=np.int8))
    with pytest.raises(ValueError, match="-1 and \\+1"):
        pack_codes(np.array([[1, 0, -1]], dtype=np.int8))
    with pytest.raises(ValueError, match="at least one bit"):
        pack_codes(np.ones((3, 0), dtype=np.int8))
    with pytest.raises(ValueError, match="words"):
        unpack_codes(np.zeros((2, 2), dtype=np.uint64), 48)
    with pytest.raises(ValueError, match="padding"):
        unpack_codes(np.full((1, 1), 1 << 12, dtype=np.uint64), 12)
    with pytest.raises(ValueError, match="padding"):
        unpack_bytes(np.full((1, 2), 0xFF, dtype=np.uint8), 12)


def test_empty_code_set_round_trips() -> None:
    packed = pack_codes(np.ones((0, 12), dtype=np.int8))
    assert packed.shape == (0, 1)
    assert unpack_codes(packed, 12).shape == (0, 12)


@pytest.mark.parametrize("bits", [8, 12, 64, 65, 130, 300])
def test_hamming_distance_matches_naive_count(bits: int) -> None:
    rng = np.random.default_rng(100 + bits)
    q = random_codes(rng, 9, bits)
    db = random_codes(rng, 23, bits)
    dist = hamming_distance(pack_codes(q), pack_codes(db))
    assert dist.dtype == distance_dtype(64 * n_words(bits))
    expected = np.array(
        [
            [sum(int(a != b) for a, b in zip(qi, di, strict=True)) for di in db]
            for qi in q
        ]
    )
    np.testing.assert_array_equal(dist, expected)
    # distance to itself is 0, to the complement is bits
    self_dist = hamming_distance(pack_codes(q), pack_codes(np.concatenate([q, -q])))
    np.testing.assert_array_equal(np.diag(self_dist[:, :9]), 0)
    np.testing.assert_array_equal(np.diag(self_dist[:, 9:]), bits)


def test_hamming_distance_validation() -> None:
    with pytest.raises(ValueError, match="words"):
        hamming_distance(np.zeros((1, 1), np.uint64), np.zeros((1, 2), np.uint64))
    with pytest.raises(ValueError, match="uint64"):
        hamming_distance(np.zeros((1, 1), np.int64), np.zeros((1, 1), np.uint64))


def test_distance_dtype() -> None:
    assert distance_dtype(64) == np.uint8
    assert distance_dtype(192) == np.uint8
    assert distance_dtype(256) == np.uint16
