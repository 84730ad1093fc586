"""Iterative Quantization (ITQ) and the paper's private variant PITQ.

ITQ (Gong and Lazebnik, CVPR 2011): centre the data, project it on its top ``bits``
principal components, V = (x - mean) W, then find a rotation R minimising the
quantization loss ``||B - V R||_F^2`` over codes B in {-1, +1}^(n x bits) and
orthogonal R, alternating

* B = sign(V R), the minimiser for fixed R, and
* R = orthogonal Procrustes solution for fixed B: with the SVD
  ``B^T V = S Omega S_hat^T``, R = S_hat S^T (maximises ``tr(B^T V R)``).

Each step can only lower the loss, so ``||sign(V R) - V R||_F^2`` is non-increasing
over iterations (recorded in :attr:`ITQModel.quantization_losses`).

PITQ (Algorithm 3 of "Private Hashing", ACM MM 2020) inserts Random Flipping of B
with ``beta = e^(-eps/E)`` between the two steps of each of the E iterations and
returns R and the unflipped codes sign(V R). Algorithm 3 writes the R update as
``U^T (YW) = N Omega N^T, R = N N^T``, which taken literally gives R = I; we use the
standard ITQ update above. For ``eps <= E ln 2`` (every eps of Table 2 with E = 50)
the paper's beta is >= 1/2, i.e. it negates most bits; :func:`fit_pitq` follows the
paper and flips with that beta anyway. Its privacy claim (Theorem 8) does not hold:
see :func:`privacy.flipping.pitq_guarantee`.

Pure numpy; no torch, no Flower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privacy.flipping import UniformSource, _flip_unchecked, check_epsilon
from privacy.noise import NoiseSource


def _sign(z: NDArray[np.floating]) -> NDArray[np.int8]:
    """Sign with sign(0) = +1, as int8 in {-1, +1}."""
    return np.where(z >= 0, np.int8(1), np.int8(-1))


def _readonly(arr: ArrayLike) -> NDArray[np.float64]:
    out = np.array(arr, dtype=np.float64, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class ITQModel:
    """A fitted ITQ (or PITQ) hash function: codes = sign((x - mean) W R).

    Attributes
    ----------
    mean : numpy.ndarray
        (d,) float64 mean of the training data.
    projection : numpy.ndarray
        (d, bits) float64 top ``bits`` principal directions W (orthonormal columns).
    rotation : numpy.ndarray
        (bits, bits) float64 orthogonal rotation R.
    quantization_losses : numpy.ndarray
        (iterations + 1,) float64 ``||sign(V R) - V R||_F^2`` on the training data
        for the initial rotation and after each iteration.

    """

    mean: NDArray[np.float64]
    projection: NDArray[np.float64]
    rotation: NDArray[np.float64]
    quantization_losses: NDArray[np.float64] = field(
        default_factory=lambda: np.zeros(0)
    )

    def __post_init__(self) -> None:
        for name in ("mean", "projection", "rotation", "quantization_losses"):
            object.__setattr__(self, name, _readonly(getattr(self, name)))
        d, bits = self.projection.shape if self.projection.ndim == 2 else (-1, -1)
        if self.mean.shape != (d,) or self.rotation.shape != (bits, bits):
            raise ValueError(
                "inconsistent shapes: mean (d,), projection (d, bits), rotation "
                f"(bits, bits); got {self.mean.shape}, {self.projection.shape}, "
                f"{self.rotation.shape}"
            )

    @property
    def bits(self) -> int:
        """Code length."""
        return int(self.rotation.shape[0])

    def encode(self, x: ArrayLike) -> NDArray[np.int8]:
        """Hash data into codes.

        Parameters
        ----------
        x : array_like
            (n, d) real features.

        Returns
        -------
        numpy.ndarray
            (n, bits) int8 in {-1, +1}: ``sign((x - mean) W R)`` with sign(0) = +1.

        """
        arr = _check_features(x)
        if arr.shape[1] != self.mean.shape[0]:
            raise ValueError(
                f"expected {self.mean.shape[0]} features, got {arr.shape[1]}"
            )
        return _sign((arr - self.mean) @ self.projection @ self.rotation)


def _check_features(x: ArrayLike) -> NDArray[np.float64]:
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D (n, d) array, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"expected real-valued features, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all():
        raise ValueError("features contain NaN or inf")
    return arr


@dataclass(frozen=True, eq=False)
class PCABasis:
    """Mean and every principal direction of one training set.

    Computed once (one SVD) and truncated for each code length, so fitting ITQ and
    PITQ at several code lengths and epsilons on the same data pays for one
    decomposition: :func:`pca_projection` is ``pca_basis(x).take(bits)``.

    Attributes
    ----------
    mean : numpy.ndarray
        (d,) float64 mean of the data.
    directions : numpy.ndarray
        (d, min(n, d)) float64 orthonormal columns by decreasing variance, each
        column's sign fixed so that its largest-magnitude entry is positive.
    samples : int
        n, the number of rows the basis was computed from.

    """

    mean: NDArray[np.float64]
    directions: NDArray[np.float64]
    samples: int

    def __post_init__(self) -> None:
        for name in ("mean", "directions"):
            object.__setattr__(self, name, _readonly(getattr(self, name)))

    def take(self, bits: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return ``(mean, W)`` with W the top ``bits`` directions, (d, bits).

        Raises
        ------
        ValueError
            If ``bits`` is not an integer in ``[1, min(n, d)]``.

        """
        _check_bits(bits, self.samples, self.mean.shape[0])
        return self.mean, self.directions[:, : int(bits)].copy()

    def check_fits(self, arr: NDArray[np.float64]) -> None:
        """Raise ValueError unless ``arr`` (already checked) is the data of this basis.

        Compares the shape and the column means (exactly: the same rows give the
        same float64 mean), an O(n d) check against handing one data set's basis
        to a fit on another.
        """
        if arr.shape != (self.samples, self.mean.shape[0]) or not np.array_equal(
            arr.mean(axis=0), self.mean
        ):
            raise ValueError(
                f"basis is of another data set: it holds {self.samples} x "
                f"{self.mean.shape[0]} rows with other means, the fit got {arr.shape}"
            )


def pca_basis(x: ArrayLike) -> PCABasis:
    """Mean and every principal direction of ``x`` (one thin SVD).

    Parameters
    ----------
    x : array_like
        (n, d) real features.

    Raises
    ------
    ValueError
        If ``x`` is not a finite 2-D array.

    """
    return _basis(_check_features(x))


def _basis(arr: NDArray[np.float64]) -> PCABasis:
    """:func:`pca_basis` of an array already checked by :func:`_check_features`."""
    mean = arr.mean(axis=0)
    _, _, vt = np.linalg.svd(arr - mean, full_matrices=False)
    w = vt.T.copy()
    idx = np.argmax(np.abs(w), axis=0)
    w *= np.where(w[idx, np.arange(w.shape[1])] < 0, -1.0, 1.0)
    return PCABasis(mean, w, int(arr.shape[0]))


def _check_bits(bits: int, n: int, d: int) -> None:
    """Raise ValueError unless ``bits`` is an integer in ``[1, min(n, d)]``."""
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer) or bits < 1:
        raise ValueError(f"bits must be an integer >= 1, got {bits!r}")
    if bits > d:
        raise ValueError(f"bits={bits} exceeds the feature dimension d={d}")
    if bits > n:
        raise ValueError(f"bits={bits} exceeds the number of samples n={n}")


def pca_projection(
    x: ArrayLike, bits: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Mean and top-``bits`` principal directions of ``x``.

    Parameters
    ----------
    x : array_like
        (n, d) real features.
    bits : int
        Number of components, ``1 <= bits <= min(n, d)``.

    Returns
    -------
    mean : numpy.ndarray
        (d,) float64.
    projection : numpy.ndarray
        (d, bits) float64 orthonormal columns, by decreasing variance; each column's
        sign is fixed so that its largest-magnitude entry is positive.

    Raises
    ------
    ValueError
        If ``bits`` is out of range or ``x`` is not a finite 2-D array.

    """
    arr = _check_features(x)
    _check_bits(bits, *arr.shape)  # before the SVD
    return _basis(arr).take(bits)


def procrustes_rotation(
    codes: ArrayLike, v: NDArray[np.floating]
) -> NDArray[np.float64]:
    """Orthogonal R minimising ``||codes - v R||_F`` (ITQ's rotation update).

    Parameters
    ----------
    codes : array_like
        (n, bits) codes B in {-1, +1}.
    v : numpy.ndarray
        (n, bits) projected data V.

    Returns
    -------
    numpy.ndarray
        (bits, bits) float64 orthogonal ``S_hat S^T`` where ``B^T V = S Omega
        S_hat^T`` (the polar factor of ``V^T B``).

    """
    b = np.asarray(codes, dtype=np.float64)
    s, _, s_hat_t = np.linalg.svd(b.T @ v)
    return s_hat_t.T @ s.T


def quantization_loss(v: NDArray[np.floating], rotation: NDArray[np.floating]) -> float:
    """ITQ quantization loss ``||sign(V R) - V R||_F^2`` at a rotation.

    Parameters
    ----------
    v : numpy.ndarray
        (n, bits) projected data V.
    rotation : numpy.ndarray
        (bits, bits) orthogonal R.

    Returns
    -------
    float
        The loss, with the best codes ``sign(V R)`` for this R.

    """
    z = v @ rotation
    return float(np.sum((_sign(z) - z) ** 2))


def random_rotation(bits: int, rng: np.random.Generator) -> NDArray[np.float64]:
    """Random orthogonal (bits, bits) matrix: Q of the QR of a Gaussian matrix.

    The signs of Q's columns are fixed by R's diagonal, so Q is Haar-distributed.
    """
    q, r = np.linalg.qr(rng.standard_normal((bits, bits)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def _check_args(iterations: int, rng: np.random.Generator, least: int) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, int | np.integer):
        raise ValueError(f"iterations must be an integer, got {iterations!r}")
    if iterations < least:
        raise ValueError(f"iterations must be >= {least}, got {iterations}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng)}")
    return int(iterations)


def _fit(
    x: ArrayLike,
    bits: int,
    iterations: int,
    rng: np.random.Generator,
    beta: float | None,
    noise: UniformSource | None = None,
    basis: PCABasis | None = None,
) -> ITQModel:
    arr = _check_features(x)  # once: the basis and V both use the checked array
    if basis is None:
        _check_bits(bits, *arr.shape)  # before the SVD
        basis = _basis(arr)
    else:
        basis.check_fits(arr)
    mean, w = basis.take(bits)
    v = (arr - mean) @ w
    rotation = random_rotation(w.shape[1], rng)
    losses = [quantization_loss(v, rotation)]
    for _ in range(iterations):
        b = _sign(v @ rotation)
        if beta is not None:
            b = _flip_unchecked(b, beta, noise if noise is not None else rng)
        rotation = procrustes_rotation(b, v)
        losses.append(quantization_loss(v, rotation))
    return ITQModel(mean, w, rotation, np.asarray(losses))


def fit_itq(
    x: ArrayLike,
    bits: int,
    *,
    iterations: int = 50,
    rng: np.random.Generator,
    basis: PCABasis | None = None,
) -> ITQModel:
    """Fit ITQ (Gong and Lazebnik): PCA to ``bits`` dimensions, then a rotation.

    Parameters
    ----------
    x : array_like
        (n, d) real training features.
    bits : int
        Code length, ``1 <= bits <= min(n, d)``.
    iterations : int
        Number of alternating (codes, rotation) updates, >= 0.
    rng : numpy.random.Generator
        Draws the initial random rotation; the same seed gives the same model.
    basis : PCABasis, optional
        ``pca_basis(x)``, computed once and shared by fits at several code lengths;
        the model is the same as without it. Default: computed here.

    Returns
    -------
    ITQModel
        The fitted hash function and its quantization-loss history.

    Raises
    ------
    ValueError
        If ``bits > d`` (or ``> n``), or other arguments are invalid.

    """
    n_iter = _check_args(iterations, rng, least=0)
    return _fit(x, bits, n_iter, rng, beta=None, basis=basis)


def fit_pitq(
    x: ArrayLike,
    bits: int,
    *,
    eps: float,
    iterations: int = 50,
    rng: np.random.Generator,
    noise: UniformSource | None = None,
    basis: PCABasis | None = None,
) -> ITQModel:
    """Fit PITQ as in Algorithm 3 of the paper (not differentially private).

    Each of the E = ``iterations`` iterations computes B = sign(V R), flips every
    bit of B with probability ``beta = e^(-eps/E)`` (Theorem 8's calibration, also
    when it is >= 1/2) and updates R from the flipped B. The model encodes with
    the final R, so the returned codes sign(V R) are unflipped, as in the paper.
    The paper's eps-DP claim does not hold; see
    :func:`privacy.flipping.pitq_guarantee`.

    Parameters
    ----------
    x : array_like
        (n, d) real training features.
    bits : int
        Code length, ``1 <= bits <= min(n, d)``.
    eps : float
        The paper's privacy parameter, > 0.
    iterations : int
        E, >= 1.
    rng : numpy.random.Generator
        Draws the initial rotation (experiment randomness).
    noise : NoiseSource or numpy.random.Generator, optional
        Draws the flips (privacy noise). Default: a fresh
        :meth:`privacy.noise.NoiseSource.secure` (OS CSPRNG), so the flips are
        unpredictable even to whoever knows ``rng``'s seed. Pass a seeded source
        (or ``rng`` itself) only to reproduce a paper table, and say so.
    basis : PCABasis, optional
        ``pca_basis(x)``, shared across fits as in :func:`fit_itq`.

    Returns
    -------
    ITQModel
        The fitted hash function; ``quantization_losses`` are measured with the
        unflipped codes and need not decrease.

    """
    e = check_epsilon(eps)
    n_iter = _check_args(iterations, rng, least=1)
    flips = NoiseSource.secure() if noise is None else noise
    return _fit(
        x, bits, n_iter, rng, beta=math.exp(-e / n_iter), noise=flips, basis=basis
    )
