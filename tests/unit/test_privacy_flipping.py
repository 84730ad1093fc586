"""Tests of privacy.flipping: Random Flipping and its true epsilon."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

import privacy
from privacy.flipping import (
    beta_paper,
    beta_randomized_response,
    check_epsilon,
    epsilon_per_bit,
    epsilon_per_code,
    flip_codes,
    flip_guarantee,
    pitq_guarantee,
)


def random_codes(rng: np.random.Generator, n: int, bits: int) -> np.ndarray:
    return rng.choice(np.array([-1, 1], dtype=np.int8), size=(n, bits))


@pytest.mark.parametrize("beta", [0.05, 0.2, 0.4])
def test_flip_rate_within_binomial_bound(beta: float) -> None:
    codes = random_codes(np.random.default_rng(0), 2_000, 100)
    out = flip_codes(codes, beta, np.random.default_rng(1))
    n_bits = codes.size
    rate = np.mean(out != codes)
    assert abs(rate - beta) < 5 * math.sqrt(beta * (1 - beta) / n_bits)


def test_flip_output_dtype_values_and_input_untouched() -> None:
    codes = random_codes(np.random.default_rng(2), 50, 16)
    before = codes.copy()
    out = flip_codes(codes, 0.3, np.random.default_rng(3))
    assert out.dtype == np.int8
    assert out.shape == codes.shape
    assert set(np.unique(out)) <= {-1, 1}
    assert out is not codes
    np.testing.assert_array_equal(codes, before)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.float32, np.float64])
def test_flip_accepts_any_real_dtype(dtype: type) -> None:
    codes = random_codes(np.random.default_rng(4), 10, 8).astype(dtype)
    out = flip_codes(codes, 0.1, np.random.default_rng(5))
    assert out.dtype == np.int8
    assert set(np.unique(out)) <= {-1, 1}


def test_flip_same_seed_same_output() -> None:
    codes = random_codes(np.random.default_rng(6), 100, 32)
    a = flip_codes(codes, 0.25, np.random.default_rng(7))
    b = flip_codes(codes, 0.25, np.random.default_rng(7))
    c = flip_codes(codes, 0.25, np.random.default_rng(8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.7, -0.1, 1.0, math.nan])
def test_flip_refuses_bad_beta(beta: float) -> None:
    codes = random_codes(np.random.default_rng(9), 4, 4)
    with pytest.raises(ValueError, match="0 < beta < 0.5"):
        flip_codes(codes, beta, np.random.default_rng(0))


@pytest.mark.parametrize(
    "codes, shown",
    [
        (np.array([[1, 0, -1]]), "0"),
        (np.array([[1, 2], [-1, 1]]), "2"),
        (np.array([[0.5, 1.0]]), "0.5"),
    ],
)
def test_flip_refuses_non_pm1_codes(codes: np.ndarray, shown: str) -> None:
    with pytest.raises(ValueError, match=f"found {shown}"):
        flip_codes(codes, 0.1, np.random.default_rng(0))


def test_flip_refuses_bad_shape_and_rng() -> None:
    with pytest.raises(ValueError, match="2-D"):
        flip_codes(np.array([1, -1]), 0.1, np.random.default_rng(0))
    with pytest.raises(TypeError, match="Generator"):
        flip_codes(np.array([[1, -1]]), 0.1, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 4.0, 30.0])
def test_randomized_response_round_trip(eps: float) -> None:
    beta = beta_randomized_response(eps)
    assert 0 < beta < 0.5
    assert epsilon_per_bit(beta) == pytest.approx(eps, rel=1e-12)


def test_epsilon_per_bit_values() -> None:
    assert epsilon_per_bit(0.25) == pytest.approx(math.log(3))
    assert epsilon_per_bit(0.5) == 0.0
    # beta > 1/2 is flipping with 1 - beta then negating: same epsilon.
    assert epsilon_per_bit(0.8) == pytest.approx(epsilon_per_bit(0.2))
    assert epsilon_per_bit(0.0) == math.inf
    assert epsilon_per_bit(1.0) == math.inf
    with pytest.raises(ValueError):
        epsilon_per_bit(1.5)


@pytest.mark.parametrize("bits", [1, 12, 48])
def test_per_code_is_bits_times_per_bit(bits: int) -> None:
    beta = 0.1
    assert epsilon_per_code(beta, bits) == pytest.approx(bits * math.log(9))
    with pytest.raises(ValueError):
        epsilon_per_code(beta, 0)


def test_beta_paper() -> None:
    assert beta_paper(1.0) == pytest.approx(math.exp(-1))
    assert beta_paper(math.log(2)) == pytest.approx(0.5)


@pytest.mark.parametrize("eps", [0.0, -1.0, math.inf, math.nan])
def test_check_epsilon_refuses(eps: float) -> None:
    with pytest.raises(ValueError):
        check_epsilon(eps)
    with pytest.raises(ValueError):
        beta_paper(eps)
    with pytest.raises(ValueError):
        flip_guarantee(eps, 8, "paper")


def test_check_epsilon_refuses_non_numbers() -> None:
    with pytest.raises(ValueError):
        check_epsilon("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        check_epsilon(True)
    assert check_epsilon(2) == 2.0


@pytest.mark.parametrize(
    "eps, per_bit",
    [
        (1.0, math.log(math.e - 1)),  # 0.5413
        (2.0, math.log(math.exp(2) - 1)),  # 1.8546
        (4.0, math.log(math.exp(4) - 1)),  # 3.9815
    ],
)
def test_paper_calibration_true_values(eps: float, per_bit: float) -> None:
    g = flip_guarantee(eps, 32, "paper")
    assert g.beta == pytest.approx(math.exp(-eps))
    assert g.eps_per_bit == pytest.approx(per_bit)
    assert g.eps_per_code == pytest.approx(32 * per_bit)
    assert g.claimed_unit == "per code"
    # Per bit the paper's claim is conservative; per 32-bit code it fails.
    assert g.eps_per_bit < eps
    assert g.holds_per_bit
    assert not g.holds_per_code
    assert not g.holds
    assert "FAILS" in g.note


def test_paper_calibration_eps_1_hand_value() -> None:
    g = flip_guarantee(1.0, 1, "paper")
    assert g.eps_per_bit == pytest.approx(0.5413, abs=1e-4)
    # A single bit per record: the claim holds.
    assert g.holds


def test_paper_calibration_small_eps() -> None:
    # eps = 0.25: beta = e^-0.25 = 0.7788 > 1/2, true per-bit eps
    # ln(beta/(1-beta)) = -ln(e^0.25 - 1) = 1.2587 > 0.25: fails even per bit.
    g = flip_guarantee(0.25, 12, "paper")
    assert g.beta == pytest.approx(0.7788, abs=1e-4)
    assert g.eps_per_bit == pytest.approx(-math.log(math.exp(0.25) - 1))
    assert g.eps_per_bit == pytest.approx(1.2587, abs=1e-4)
    assert not g.holds_per_bit
    assert not g.holds
    # eps = 0.5: beta = 0.6065 > 1/2, true per-bit eps 0.4328 <= 0.5 (per-bit
    # reading holds, codes anti-correlated) but 12 * 0.4328 per code fails.
    g = flip_guarantee(0.5, 12, "paper")
    assert g.eps_per_bit == pytest.approx(-math.log(math.exp(0.5) - 1))
    assert g.eps_per_bit == pytest.approx(0.4328, abs=1e-4)
    assert g.holds_per_bit
    assert not g.holds
    assert "anti-correlated" in g.note


def test_paper_calibration_at_ln2_is_independent_output() -> None:
    g = flip_guarantee(math.log(2), 8, "paper")
    assert g.beta == pytest.approx(0.5)
    assert g.eps_per_bit == pytest.approx(0.0, abs=1e-12)
    assert g.holds


def test_per_bit_claim_fails_exactly_below_log_golden_ratio() -> None:
    threshold = math.log((1 + math.sqrt(5)) / 2)
    assert flip_guarantee(threshold + 1e-6, 1, "paper").holds
    assert not flip_guarantee(threshold - 1e-6, 1, "paper").holds


@pytest.mark.parametrize("eps", [0.25, 1.0, 4.0])
def test_rr_calibration(eps: float) -> None:
    g = flip_guarantee(eps, 16, "rr")
    assert g.claimed_unit == "per bit"
    assert g.eps_per_bit == pytest.approx(eps)
    assert g.eps_per_code == pytest.approx(16 * eps)
    assert g.holds
    assert g.beta < 0.5


def test_flip_guarantee_refuses_bad_args() -> None:
    with pytest.raises(ValueError, match="calibration"):
        flip_guarantee(1.0, 8, "laplace")
    with pytest.raises(ValueError, match="bits"):
        flip_guarantee(1.0, 0, "rr")


def test_pitq_guarantee_table2_settings() -> None:
    # Table 2: eps in {0.25, 0.5, 1, 4}; E = 50 iterations (ITQ's default).
    for eps in (0.25, 0.5, 1.0, 4.0):
        g = pitq_guarantee(eps, 50, 32)
        beta = math.exp(-eps / 50)
        assert g.beta == pytest.approx(beta)
        assert g.beta > 0.9
        per_bit = math.log(beta / (1 - beta))
        assert g.eps_per_bit_per_iteration == pytest.approx(per_bit)
        assert g.eps_per_bit_per_iteration > eps / 50
        assert g.eps_per_code_per_iteration == pytest.approx(32 * per_bit)
        assert g.eps_per_code_composed == pytest.approx(50 * 32 * per_bit)
        assert not g.holds
    # Smaller claimed eps, beta closer to 1: *more* leakage per flip.
    small, large = pitq_guarantee(0.25, 50, 32), pitq_guarantee(4.0, 50, 32)
    assert small.eps_per_bit_per_iteration > large.eps_per_bit_per_iteration
    with pytest.raises(ValueError):
        pitq_guarantee(1.0, 0, 32)


def test_privacy_package_imports_no_flwr() -> None:
    root = Path(privacy.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] == "flwr" for n in names), path
