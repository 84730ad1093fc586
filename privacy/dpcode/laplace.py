"""Laplace noise for DPcode: scalar draws, per-frame Gamma shares, the radial Laplace.

Every draw comes from a :class:`privacy.noise.NoiseSource`. Uniform-based draws
(:func:`laplace`) read its uniforms directly (the OS CSPRNG in secure mode); the
Gamma and Gaussian draws that need a distribution sampler use
:meth:`~privacy.noise.NoiseSource.numpy_generator`, a PCG64 seeded with 256 fresh
bits from the source (as ``privacy.noise`` documents). Floating-point Laplace
samplers are open to Mironov's (CCS 2012) least-significant-bit attack; we do
not harden against it, as ``privacy/noise.py`` says for the other mechanisms.

Per-frame shares (the paper's Eq. 1)
------------------------------------
The paper splits the Laplace noise of a support count into one share per frame,
``Lap(b) = sqrt(B) * sum_{i=1..s} Lap_i(b)`` with ``B ~ Beta(1, s - 1)`` common to
all frames. As a statement about the *sum* this is exact (the characteristic
function of the right side is ``E[(1 + B b^2 t^2)^-s] = 1 / (1 + b^2 t^2)``;
:func:`paper_beta_shares` implements it and the tests check it), but it is loose
as a per-frame construction:

* the shares are not independent: every frame must know the one common ``B``;
* the text then perturbs each frame with ``(1 / sqrt(B)) * Lap(b)``, the
  reciprocal, whose variance is infinite (``E[1/B] = inf`` for Beta(1, s - 1));
* each frame's noisy indicator is then rounded (``x > 0.5``) *before* the sum,
  which destroys the identity: most shares are tiny, the rounded indicator is
  almost always the true one, and the count is close to exact. That is not
  eps-DP for any finite eps.

:func:`gamma_shares` is the exact decomposition we use instead: independent shares
``G1_i - G2_i`` with ``G ~ Gamma(1/s, b)``, whose sum over the ``s`` frames is
exactly ``Gamma(1, b) - Gamma(1, b) = Lap(b)`` (Gamma additivity). Each frame can
draw its own share without coordination, and nothing is rounded before the sum.

Radial Laplace (the paper's Eqs. 2-5)
-------------------------------------
The d-dimensional Laplace with density proportional to ``exp(-||x - v|| / scale)``
has a radius ``r ~ Gamma(d, scale)`` (marginal density ``r^(d-1) e^(-r/scale)``)
and a direction uniform on the sphere. The paper's Eq. 4 writes ``r^(d/2)``
(correct only for d = 2, where it is ``r^1``) and draws every angle uniform in
``[0, 2 pi)``, which is uniform on the sphere only for d = 2. We draw the radius
from ``Gamma(d, scale)`` and the direction as a normalised standard Gaussian.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from privacy.noise import NoiseSource

_HALF_ULP = 2.0**-54


def _check_scale(scale: float) -> float:
    value = float(scale)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"Laplace scale {scale!r}: accepted are finite values > 0")
    return value


def laplace(
    scale: float, size: int | tuple[int, ...], noise: NoiseSource
) -> NDArray[np.float64]:
    """Draw ``Lap(scale)`` noise by the inverse CDF of the source's uniforms.

    Parameters
    ----------
    scale : float
        The Laplace scale ``b`` (> 0): density ``exp(-|x| / b) / (2 b)``.
    size : int or tuple of int
        Output shape.
    noise : NoiseSource
        Where the uniforms come from.

    Returns
    -------
    ndarray of float64, shape ``size``
    """
    b = _check_scale(scale)
    u = noise.random(size) + _HALF_ULP - 0.5  # in (-0.5, 0.5), never exactly +-0.5
    return -b * np.sign(u) * np.log1p(-2.0 * np.abs(u))


def gamma_shares(
    n_shares: int, scale: float, size: int | tuple[int, ...], noise: NoiseSource
) -> NDArray[np.float64]:
    """Independent per-frame shares whose sum over the first axis is ``Lap(scale)``.

    Share ``i`` is ``G1_i - G2_i`` with ``G1_i, G2_i ~ Gamma(1 / n_shares, scale)``
    all independent; the sum of ``n_shares`` of them is ``Gamma(1, scale) -
    Gamma(1, scale)``, exactly a ``Lap(scale)`` variable.

    Parameters
    ----------
    n_shares : int
        Number of shares (frames), >= 1.
    scale : float
        Laplace scale of the sum, > 0.
    size : int or tuple of int
        Shape of one share (e.g. the number of counts being perturbed).
    noise : NoiseSource
        Where the randomness comes from.

    Returns
    -------
    ndarray of float64, shape ``(n_shares, *size)``
    """
    b = _check_scale(scale)
    if isinstance(n_shares, bool) or not isinstance(n_shares, int) or n_shares < 1:
        raise ValueError(f"n_shares {n_shares!r}: accepted are integers >= 1")
    shape = (n_shares, *((size,) if isinstance(size, int) else tuple(size)))
    rng = noise.numpy_generator()
    shape_param = 1.0 / n_shares
    return rng.gamma(shape_param, b, shape) - rng.gamma(shape_param, b, shape)


def paper_beta_shares(
    n_shares: int, scale: float, size: int | tuple[int, ...], noise: NoiseSource
) -> NDArray[np.float64]:
    """Draw the paper's Eq. 1 shares ``sqrt(B) * Lap_i(scale)`` (one common ``B``).

    ``B ~ Beta(1, n_shares - 1)`` is drawn once per entry of ``size`` and shared
    by all frames (``B = 1`` when ``n_shares == 1``). The sum over the first axis
    is exactly ``Lap(scale)``; the shares are *not* independent. Kept to test the
    paper's identity; the release uses :func:`gamma_shares`.

    Returns
    -------
    ndarray of float64, shape ``(n_shares, *size)``
    """
    b = _check_scale(scale)
    if isinstance(n_shares, bool) or not isinstance(n_shares, int) or n_shares < 1:
        raise ValueError(f"n_shares {n_shares!r}: accepted are integers >= 1")
    one = (size,) if isinstance(size, int) else tuple(size)
    rng = noise.numpy_generator()
    if n_shares == 1:
        beta = np.ones(one)
    else:
        beta = rng.beta(1.0, n_shares - 1.0, one)
    return np.sqrt(beta) * rng.laplace(0.0, b, (n_shares, *one))


def radial_laplace(
    centers: NDArray[np.floating],
    scale: float | NDArray[np.floating],
    noise: NoiseSource,
) -> NDArray[np.float64]:
    """Perturb points with the d-dimensional Laplace ``exp(-||x - v|| / scale)``.

    Parameters
    ----------
    centers : ndarray, shape (n, d)
        The points ``v`` (d >= 1).
    scale : float or ndarray of shape (n,)
        Distance scale (> 0): the radius is ``Gamma(d, scale)``, mean ``d * scale``.
    noise : NoiseSource
        Where the randomness comes from.

    Returns
    -------
    ndarray of float64, shape (n, d)
        ``v + r * u`` with ``u`` uniform on the unit sphere.
    """
    v = np.asarray(centers, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] < 1:
        raise ValueError(f"centers of shape {v.shape}: accepted are (n, d), d >= 1")
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), (v.shape[0],))
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("radial Laplace scale: accepted are finite values > 0")
    rng = noise.numpy_generator()
    radius = rng.gamma(float(v.shape[1]), 1.0, v.shape[0]) * s
    direction = rng.standard_normal(v.shape)
    norms = np.linalg.norm(direction, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return v + radius[:, None] * direction / norms
