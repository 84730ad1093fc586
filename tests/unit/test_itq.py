"""Tests of hashing.itq: ITQ and the paper's PITQ (Algorithm 3)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hashing.itq import (
    ITQModel,
    fit_itq,
    fit_pitq,
    pca_basis,
    pca_projection,
    procrustes_rotation,
    quantization_loss,
    random_rotation,
)
from privacy.noise import NoiseSource


def anisotropic(rng: np.random.Generator, n: int = 400, d: int = 20) -> np.ndarray:
    return rng.standard_normal((n, d)) * np.linspace(3.0, 0.5, d) + 1.0


def blobs(rng: np.random.Generator, n_per: int = 100, d: int = 20):
    centre = rng.standard_normal(d)
    centre *= 4.0 / np.linalg.norm(centre)
    x = np.vstack(
        [
            rng.standard_normal((n_per, d)) + centre,
            rng.standard_normal((n_per, d)) - centre,
        ]
    )
    labels = np.repeat([0, 1], n_per)
    return x, labels


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.shape[1]
    return (bits - a.astype(np.int32) @ b.astype(np.int32).T) // 2


def precision_at_k(codes: np.ndarray, labels: np.ndarray, k: int) -> float:
    dist = hamming(codes, codes)
    np.fill_diagonal(dist, codes.shape[1] + 1)
    order = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return float(np.mean(labels[order] == labels[:, None]))


def test_loss_non_increasing() -> None:
    x = anisotropic(np.random.default_rng(0))
    model = fit_itq(x, 8, iterations=50, rng=np.random.default_rng(1))
    losses = model.quantization_losses
    assert losses.shape == (51,)
    assert np.all(np.diff(losses) <= 1e-9 * losses[0])
    assert losses[-1] < losses[0]


def test_procrustes_is_optimal_and_orthogonal() -> None:
    rng = np.random.default_rng(2)
    v = rng.standard_normal((200, 6))
    b = np.where(v @ random_rotation(6, rng) >= 0, 1, -1).astype(np.int8)
    r = procrustes_rotation(b, v)
    np.testing.assert_allclose(r.T @ r, np.eye(6), atol=1e-12)
    best = np.sum((b - v @ r) ** 2)
    for _ in range(20):
        other = random_rotation(6, rng)
        assert best <= np.sum((b - v @ other) ** 2)


def test_random_rotation_orthogonal() -> None:
    r = random_rotation(7, np.random.default_rng(3))
    np.testing.assert_allclose(r @ r.T, np.eye(7), atol=1e-12)


def test_pca_projection() -> None:
    x = anisotropic(np.random.default_rng(4))
    mean, w = pca_projection(x, 5)
    np.testing.assert_allclose(mean, x.mean(axis=0))
    np.testing.assert_allclose(w.T @ w, np.eye(5), atol=1e-12)
    var = np.var((x - mean) @ w, axis=0)
    assert np.all(np.diff(var) <= 0)
    assert np.all(w[np.argmax(np.abs(w), axis=0), np.arange(5)] > 0)


def test_codes_shape_dtype_and_encode() -> None:
    x = anisotropic(np.random.default_rng(5))
    model = fit_itq(x, 12, iterations=10, rng=np.random.default_rng(6))
    codes = model.encode(x)
    assert codes.shape == (400, 12)
    assert codes.dtype == np.int8
    assert set(np.unique(codes)) <= {-1, 1}
    assert model.bits == 12
    assert model.mean.shape == (20,)
    assert model.projection.shape == (20, 12)
    assert model.rotation.shape == (12, 12)
    # Loss recorded for the final rotation is the loss of the training codes.
    v = (x - model.mean) @ model.projection
    assert quantization_loss(v, model.rotation) == pytest.approx(
        model.quantization_losses[-1]
    )
    with pytest.raises(ValueError, match="features"):
        model.encode(x[:, :5])
    with pytest.raises(ValueError):
        model.rotation[0, 0] = 1.0  # read-only


def test_sign_zero_is_plus_one() -> None:
    model = ITQModel(np.zeros(2), np.eye(2), np.eye(2))
    np.testing.assert_array_equal(model.encode([[0.0, -1.0]]), [[1, -1]])


def test_same_seed_same_model() -> None:
    x = anisotropic(np.random.default_rng(7))
    a = fit_itq(x, 8, iterations=20, rng=np.random.default_rng(8))
    b = fit_itq(x, 8, iterations=20, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(a.rotation, b.rotation)
    np.testing.assert_array_equal(a.encode(x), b.encode(x))


def test_itq_retrieves_same_blob_better_than_random() -> None:
    rng = np.random.default_rng(9)
    x, labels = blobs(rng)
    model = fit_itq(x, 8, iterations=50, rng=np.random.default_rng(10))
    itq = precision_at_k(model.encode(x), labels, k=10)
    random_codes = np.where(rng.standard_normal((len(x), 8)) >= 0, 1, -1)
    chance = precision_at_k(random_codes.astype(np.int8), labels, k=10)
    assert itq > 0.95
    assert itq > chance + 0.3


def test_bits_out_of_range() -> None:
    x = anisotropic(np.random.default_rng(11), n=50, d=6)
    with pytest.raises(ValueError, match="d=6"):
        fit_itq(x, 7, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="n=3"):
        fit_itq(x[:3], 4, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        fit_itq(x, 0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        fit_pitq(x, 7, eps=1.0, rng=np.random.default_rng(0))


def test_bad_arguments() -> None:
    x = anisotropic(np.random.default_rng(12), n=50, d=6)
    with pytest.raises(TypeError):
        fit_itq(x, 4, rng=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        fit_itq(x, 4, iterations=-1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        fit_pitq(x, 4, eps=1.0, iterations=0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        fit_pitq(x, 4, eps=0.0, rng=np.random.default_rng(0))
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fit_itq(bad, 4, rng=np.random.default_rng(0))


def test_pitq_reproducible_with_seeded_noise_and_differs_from_itq() -> None:
    x = anisotropic(np.random.default_rng(13))

    def seeded(seed: int):
        return fit_pitq(
            x,
            8,
            eps=4.0,
            iterations=20,
            rng=np.random.default_rng(seed),
            noise=NoiseSource.seeded(seed),
        )

    a, b = seeded(14), seeded(14)
    itq = fit_itq(x, 8, iterations=20, rng=np.random.default_rng(14))
    np.testing.assert_array_equal(a.rotation, b.rotation)
    np.testing.assert_array_equal(a.encode(x), b.encode(x))
    assert not np.allclose(a.rotation, itq.rotation)
    # Same PCA, same initial rotation: only the flips differ.
    np.testing.assert_array_equal(a.projection, itq.projection)
    assert a.quantization_losses[0] == itq.quantization_losses[0]


def test_pitq_flips_come_from_the_os_by_default() -> None:
    # whoever knows rng's seed (the experiment seed) cannot rebuild the flips
    x = anisotropic(np.random.default_rng(13))
    a = fit_pitq(x, 8, eps=4.0, iterations=20, rng=np.random.default_rng(14))
    b = fit_pitq(x, 8, eps=4.0, iterations=20, rng=np.random.default_rng(14))
    assert not np.array_equal(a.encode(x), b.encode(x))


def test_pitq_paper_beta_mostly_negates() -> None:
    # eps/E small gives beta = e^(-eps/E) near 1: each update sees nearly -B, so
    # R nearly alternates sign, and the final codes are close to ITQ's up to a
    # global sign (Hamming ranking is unchanged by a global sign).
    x, labels = blobs(np.random.default_rng(15))
    pitq = fit_pitq(x, 8, eps=0.25, iterations=50, rng=np.random.default_rng(16))
    assert precision_at_k(pitq.encode(x), labels, k=10) > 0.95


def test_pitq_release_is_not_differentially_private() -> None:
    # Theorem 8 claims eps-DP. But R = procrustes(B', V) with V = (Y - mean) W from
    # the raw data: for given data, R lies in the finite set
    # {procrustes(B, V) : B in {-1,+1}^(n x c)}, each element reached with
    # probability > 0 (the last flip has full support). Changing one data point
    # moves every non-degenerate element, so the two output distributions put
    # mass on disjoint points: no finite eps.
    y = np.array([[3.0, 0, 1], [0, 2, 0], [-2, -1, 1], [1, -1, -2]])
    y_neighbour = y.copy()
    y_neighbour[0] = [3.0, 0, 1.5]
    n, c = 4, 2

    def support(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, w = pca_projection(data, c)
        v = (data - mean) @ w
        all_b = [
            np.array(b).reshape(n, c) for b in itertools.product([-1, 1], repeat=n * c)
        ]
        rotations = np.array([procrustes_rotation(b, v) for b in all_b])
        regular = np.array([abs(np.linalg.det(b.T @ v)) > 1e-6 for b in all_b])
        return rotations, regular

    rotations, regular = support(y)
    neighbour_rotations, _ = support(y_neighbour)
    gap = np.linalg.norm(
        rotations[:, None] - neighbour_rotations[None], axis=(2, 3)
    ).min(axis=1)
    assert regular.sum() > 100
    assert np.all(gap[regular] > 1e-4)

    # fit_pitq's output is one of those finitely many rotations.
    hits = 0
    for seed in range(5):
        model = fit_pitq(y, c, eps=1.0, iterations=3, rng=np.random.default_rng(seed))
        dist = np.linalg.norm(rotations - model.rotation, axis=(1, 2))
        assert dist.min() < 1e-9
        hits += bool(regular[np.argmin(dist)])
    assert hits > 0


def test_shared_basis_gives_the_same_models() -> None:
    # One SVD serves every code length and epsilon: the models equal those of a fit
    # that decomposes the data itself, bit for bit.
    x = anisotropic(np.random.default_rng(21), 120, 16)
    basis = pca_basis(x)
    for bits in (4, 8, 16):
        alone = fit_itq(x, bits, iterations=10, rng=np.random.default_rng(bits))
        shared = fit_itq(
            x, bits, iterations=10, rng=np.random.default_rng(bits), basis=basis
        )
        np.testing.assert_array_equal(alone.projection, shared.projection)
        np.testing.assert_array_equal(alone.rotation, shared.rotation)
        p_alone, p_shared = (
            fit_pitq(
                x,
                bits,
                eps=1.0,
                iterations=5,
                rng=np.random.default_rng(3),
                noise=np.random.default_rng(4),  # seeded: the two fits must agree
                basis=b,
            )
            for b in (None, basis)
        )
        np.testing.assert_array_equal(p_alone.rotation, p_shared.rotation)


def test_basis_of_other_data_is_refused() -> None:
    x = anisotropic(np.random.default_rng(22), 60, 8)
    basis = pca_basis(x)
    with pytest.raises(ValueError, match="another data set"):
        fit_itq(x + 1.0, 4, rng=np.random.default_rng(0), basis=basis)
    with pytest.raises(ValueError, match="another data set"):
        fit_itq(x[:50], 4, rng=np.random.default_rng(0), basis=basis)
    with pytest.raises(ValueError, match="exceeds"):
        basis.take(9)
