"""DPcode noise samplers: Laplace, per-frame Gamma shares (Eq. 1), radial Laplace."""

import numpy as np
import pytest
from scipy import stats

from privacy.dpcode.laplace import (
    gamma_shares,
    laplace,
    paper_beta_shares,
    radial_laplace,
)
from privacy.noise import NoiseSource

P_MIN = 1e-3  # KS p-value floor; seeds are fixed, so every run gives the same p


def test_laplace_matches_its_distribution() -> None:
    x = laplace(2.5, 20_000, NoiseSource.seeded(1, "lap"))
    assert stats.kstest(x, stats.laplace(scale=2.5).cdf).pvalue > P_MIN
    assert np.mean(np.abs(x)) == pytest.approx(2.5, rel=0.03)
    assert np.all(np.isfinite(x))


@pytest.mark.parametrize("n_shares", [1, 2, 50, 1797])
def test_gamma_shares_sum_to_an_exact_laplace(n_shares: int) -> None:
    shares = gamma_shares(n_shares, 3.0, 4_000, NoiseSource.seeded(2, n_shares))
    assert shares.shape == (n_shares, 4_000)
    total = shares.sum(axis=0)
    assert stats.kstest(total, stats.laplace(scale=3.0).cdf).pvalue > P_MIN


def test_gamma_shares_are_small_and_independent() -> None:
    n = 20
    shares = gamma_shares(n, 1.0, 20_000, NoiseSource.seeded(3))
    # each share is G1 - G2 with G ~ Gamma(1/n, 1): variance 2 / n
    assert shares.var() == pytest.approx(2.0 / n, rel=0.1)
    corr = np.corrcoef(shares[0], shares[1])[0, 1]
    assert abs(corr) < 0.03


def test_paper_eq1_identity_holds_for_the_sum() -> None:
    """sqrt(B) * sum of s Laplace with one B ~ Beta(1, s-1) is again Laplace."""
    for s in (2, 3, 10):
        shares = paper_beta_shares(s, 1.5, 20_000, NoiseSource.seeded(4, s))
        total = shares.sum(axis=0)
        assert stats.kstest(total, stats.laplace(scale=1.5).cdf).pvalue > P_MIN
    # without the common sqrt(B) the sum is far wider than Lap(b)
    rng = np.random.default_rng(0)
    plain = rng.laplace(0, 1.5, (10, 20_000)).sum(axis=0)
    assert stats.kstest(plain, stats.laplace(scale=1.5).cdf).pvalue < 1e-6


@pytest.mark.parametrize("dim", [2, 16])
def test_radial_laplace_radius_and_direction(dim: int) -> None:
    centre = np.zeros((20_000, dim))
    centre[:, 0] = 3.0
    out = radial_laplace(centre, 0.4, NoiseSource.seeded(5, dim))
    delta = out - centre
    radius = np.linalg.norm(delta, axis=1)
    # radius ~ Gamma(d, scale): density r^(d-1) e^(-r/scale), not the paper's r^(d/2)
    assert stats.kstest(radius, stats.gamma(dim, scale=0.4).cdf).pvalue > P_MIN
    unit = delta / radius[:, None]
    if dim == 2:
        angle = np.arctan2(unit[:, 1], unit[:, 0])
        assert stats.kstest(angle, stats.uniform(-np.pi, 2 * np.pi).cdf).pvalue > P_MIN
    else:
        # uniform on the sphere: (u_1 + 1) / 2 ~ Beta((d-1)/2, (d-1)/2)
        a = (dim - 1) / 2
        coord = (unit[:, 0] + 1) / 2
        assert stats.kstest(coord, stats.beta(a, a).cdf).pvalue > P_MIN
        # a uniform angle per coordinate (the paper's recipe) would not be
    assert np.abs(unit.mean(axis=0)).max() < 0.03


def test_bad_scales_are_refused() -> None:
    noise = NoiseSource.seeded(6)
    with pytest.raises(ValueError, match="accepted are finite values > 0"):
        laplace(0.0, 3, noise)
    with pytest.raises(ValueError, match="n_shares"):
        gamma_shares(0, 1.0, 3, noise)
    with pytest.raises(ValueError, match="accepted are finite values > 0"):
        radial_laplace(np.zeros((2, 3)), -1.0, noise)
