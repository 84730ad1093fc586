"""Random Flipping of {-1, +1} hash codes and what privacy it really gives.

Random Flipping (Algorithm 1 of "Private Hashing", ACM MM 2020: Random Flipping,
PHashing, PITQ) flips every bit of a code matrix independently with probability
``beta``. It is randomized response applied to each bit.

Findings on the paper's claims
------------------------------
Let ``L(beta) = |ln((1 - beta) / beta)|``: for one bit, the largest log-ratio of the
output probabilities under the two possible inputs. It is the exact (tight) epsilon
of flipping one bit with probability ``beta``, for every ``0 < beta < 1``.

* Theorem 4 claims Algorithm 1 is eps-DP with ``beta = e^-eps`` and that "the size
  of the input matrix does not affect the privacy guarantee".

  - Per bit (neighbours = matrices differing in one entry) the true epsilon is
    ``L(e^-eps)``. For ``eps > ln 2`` that is ``ln(e^eps - 1) < eps``: the claim
    holds and is conservative (eps=1: 0.5413, eps=2: 1.8546, eps=4: 3.9815). For
    ``eps < ln 2`` the calibration gives ``beta > 1/2`` and the true value is
    ``-ln(e^eps - 1)``, which exceeds ``eps`` when ``eps < ln(golden ratio) =
    0.4812`` (eps=0.25: beta=0.7788, true 1.2587). Smaller claimed eps then means
    *less* privacy: beta tends to 1, i.e. to negating every bit, a deterministic
    and invertible map.
  - Per record (the paper's Definition 1: neighbouring databases differ in one data
    point, whose code is one row of ``c`` bits) the true epsilon is ``c * L(beta)``,
    tight because the two codes may differ in all ``c`` bits. The size does
    matter: with ``c`` = 12..48 bits as in Tables 1-2, eps=1 gives 6.5..26.0 per
    record, not 1. At record level the claim fails except in corner cases (``c = 1``,
    or ``(e^eps - 1)^c <= e^eps``).

* Theorem 6 (PHashing, Algorithm 2, ``beta = e^-eps``) appeals to post-processing
  (Theorem 2), which does not apply: the flip comes *after* the non-private learner
  H. Algorithm 2 also returns the hash function h, learned from the raw data with no
  noise, so the release is not DP at all. Even releasing the flipped codes alone,
  the codes U = H(Y, S) of *all* points depend on every training point through h,
  so one changed data point may change many rows of U; the Theorem 4 bound applies
  to one record only when h is fixed independently of the private data (for example
  trained on public data), and then it is ``c * L(beta)`` per record.

* Theorem 8 (PITQ, Algorithm 3, ``beta = e^(-eps/E)`` for E iterations) composes E
  flips by basic composition (Theorem 3). See :func:`pitq_guarantee`: with E=50 and
  the eps of Table 2 (0.25..4), ``beta`` is 0.92..0.995, so about ``eps/E`` of the
  bits are effectively left unflipped and the rest negated, and the per-bit epsilon
  of one iteration is ``L(beta)`` = 2.5..5.3, not ``eps/E``. More importantly, what
  PITQ releases (the rotation R and the unflipped codes ``sign(YWR)``) is not a
  post-processing of the flipped codes B': R is the Procrustes rotation from the
  SVD of ``B'^T (YW)``, a function of the raw projected data YW, and W itself is PCA
  of the raw data. For given data, R can only take the finitely many values
  ``procrustes(B, YW)``, B in {-1, +1}^(n x c), each with positive probability
  (the last flip has full support); changing one data point moves every one of
  them for which ``B^T YW`` is non-singular. Neighbouring databases then give
  output distributions on (all but a few degenerate points) disjoint supports: the
  release is not eps-DP for any finite eps, and (eps, delta)-DP only with delta at
  least the probability of those moved outputs, close to 1
  (``tests/unit/test_itq.py`` exhibits such a pair).

Neighbouring relations and units used in this package
-----------------------------------------------------
* "per bit": the two inputs differ in one bit of one code (bit-level neighbours).
  Flipping with ``beta`` is ``L(beta)``-DP per bit.
* "per code": the two inputs differ in one whole ``bits``-bit code, i.e. one
  record's published code is replaced by any other code (record-level neighbours for
  the released code of that record). Bits are flipped independently, so by basic
  composition, tight here, flipping is ``bits * L(beta)``-DP per code.

:func:`flip_codes` accepts only ``0 < beta < 1/2``. ``beta = 1/2`` makes the output
independent of the input (0-DP but useless); ``beta > 1/2`` is flipping with
``1 - beta`` followed by negating every bit, which gives the same privacy as
``1 - beta`` with anti-correlated codes, so it is never the better choice. To switch
privacy off, do not flip (``beta = 0`` is refused too).

Pure numpy; no torch, no Flower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privacy.noise import NoiseSource

UniformSource = NoiseSource | np.random.Generator
"""Anything with ``random(size)``: the privacy noise source or a seeded generator."""

PAPER = "paper"
"""Calibration ``beta = e^-eps`` of Theorems 4 and 6 (claimed eps per record)."""
RANDOMIZED_RESPONSE = "rr"
"""Calibration ``beta = 1 / (1 + e^eps)``: exactly ``eps`` per bit."""
CALIBRATIONS = (PAPER, RANDOMIZED_RESPONSE)

UNIT_BIT = "per bit"
UNIT_CODE = "per code"

GOLDEN_RATIO = (1.0 + math.sqrt(5.0)) / 2.0
"""Below ``eps = ln(GOLDEN_RATIO) = 0.4812`` the paper calibration fails per bit."""

_REL_TOL = 1e-12


def check_epsilon(eps: float) -> float:
    """Validate a privacy parameter epsilon.

    Parameters
    ----------
    eps : float
        Epsilon, must be finite and > 0.

    Returns
    -------
    float
        ``eps`` as a float.

    Raises
    ------
    ValueError
        If ``eps`` is not a finite number > 0.

    """
    if isinstance(eps, bool) or not isinstance(
        eps, int | float | np.integer | np.floating
    ):
        raise ValueError(f"eps must be a real number, got {type(eps).__name__}")
    value = float(eps)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"eps={eps}: epsilon must be finite and > 0")
    return value


def _check_beta(beta: float) -> float:
    """Validate a flip probability for :func:`flip_codes` (0 < beta < 1/2)."""
    value = float(beta)
    if not (0.0 < value < 0.5):
        raise ValueError(
            f"beta={beta}: accepted is 0 < beta < 0.5. beta = 0 does not flip (to "
            "switch privacy off, do not call flip_codes); beta = 0.5 makes the output "
            "independent of the codes; beta > 0.5 equals flipping with 1 - beta and "
            "then negating every bit (same privacy as 1 - beta, inverted codes)"
        )
    return value


def _check_codes(codes: ArrayLike) -> NDArray[np.int8]:
    """Return ``codes`` as a 2-D int8 array after checking values are exactly +-1."""
    arr = np.asarray(codes)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D (n, bits) array, got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"expected codes in {{-1, +1}}, got dtype {arr.dtype}")
    valid = (arr == 1) | (arr == -1)
    if not np.all(valid):
        found = np.unique(arr[~valid])
        shown = ", ".join(str(v) for v in found[:5])
        more = f" (and {found.size - 5} more)" if found.size > 5 else ""
        raise ValueError(f"codes must contain only -1 and +1; found {shown}{more}")
    return arr.astype(np.int8, copy=False)


def _flip_unchecked(
    codes: NDArray[np.int8], beta: float, rng: UniformSource
) -> NDArray[np.int8]:
    """Flip each bit with probability ``beta`` in [0, 1]; no validation.

    Used by :func:`flip_codes` and to reproduce the paper's PITQ, whose calibration
    can give ``beta >= 1/2``. ``codes`` must already be int8 in {-1, +1}.
    """
    flips = rng.random(codes.shape) < beta
    return np.where(flips, -codes, codes).astype(np.int8, copy=False)


def flip_codes(
    codes: ArrayLike, beta: float, rng: UniformSource
) -> NDArray[np.int8]:
    """Random Flipping (Algorithm 1): flip each bit independently with ``beta``.

    Parameters
    ----------
    codes : array_like
        (n, bits) values exactly -1 or +1 (any integer or float dtype). Not modified.
    beta : float
        Flip probability, ``0 < beta < 0.5``. Privacy: ``epsilon_per_bit(beta)`` per
        bit, ``epsilon_per_code(beta, bits)`` per code (see the module docstring).
    rng : privacy.noise.NoiseSource or numpy.random.Generator
        Source of randomness; one ``rng.random(codes.shape)`` draw is consumed. A
        client passes a :class:`~privacy.noise.NoiseSource` (OS CSPRNG unless the
        run is in the simulation-only seeded mode); a ``numpy.random.Generator`` is
        seeded noise, for experiments that reproduce paper tables and say so.

    Returns
    -------
    numpy.ndarray
        New (n, bits) int8 array in {-1, +1}.

    Raises
    ------
    ValueError
        If ``codes`` holds values other than -1 and +1 or ``beta`` is outside
        (0, 0.5).
    TypeError
        If ``rng`` is neither a ``NoiseSource`` nor a ``numpy.random.Generator``.

    """
    checked = _check_codes(codes)
    value = _check_beta(beta)
    if not isinstance(rng, NoiseSource | np.random.Generator):
        raise TypeError(
            f"rng must be a NoiseSource or numpy.random.Generator, got {type(rng)}"
        )
    return _flip_unchecked(checked, value, rng)


def beta_paper(eps: float) -> float:
    """Flip probability of the paper's calibration, ``beta = e^-eps``.

    Algorithms 1-2 with Theorems 4 and 6. Gives ``beta >= 1/2`` for
    ``eps <= ln 2``; see :func:`flip_guarantee` for what it really guarantees.

    Parameters
    ----------
    eps : float
        Claimed epsilon, > 0.

    Returns
    -------
    float
        ``exp(-eps)`` in (0, 1).

    """
    return math.exp(-check_epsilon(eps))


def beta_randomized_response(eps_bit: float) -> float:
    """Flip probability of randomized response with ``eps_bit`` per bit.

    Parameters
    ----------
    eps_bit : float
        Target epsilon per bit, > 0.

    Returns
    -------
    float
        ``1 / (1 + e^eps_bit)`` in (0, 1/2); flipping with it is exactly
        ``eps_bit``-DP per bit (``epsilon_per_bit`` of it is ``eps_bit``).

    """
    e = check_epsilon(eps_bit)
    t = math.exp(-e)
    return t / (1.0 + t)


def epsilon_per_bit(beta: float) -> float:
    """Return the true epsilon of flipping one bit with probability ``beta``.

    Parameters
    ----------
    beta : float
        Flip probability in [0, 1].

    Returns
    -------
    float
        ``|ln((1 - beta) / beta)|``; this is ``ln((1 - beta) / beta)`` for
        ``0 < beta < 1/2``, 0 for ``beta = 1/2`` (output independent of input) and
        the value of ``1 - beta`` for ``beta > 1/2``. ``inf`` for ``beta`` 0 or 1
        (deterministic output). The bound is tight: it is attained on each output.

    Raises
    ------
    ValueError
        If ``beta`` is outside [0, 1].

    """
    b = float(beta)
    if not (0.0 <= b <= 1.0):
        raise ValueError(f"beta={beta}: a probability must be in [0, 1]")
    if b in (0.0, 1.0):
        return math.inf
    return abs(math.log1p(-b) - math.log(b))


def epsilon_per_code(beta: float, bits: int) -> float:
    """Return the true epsilon of flipping a ``bits``-bit code with ``beta``.

    Parameters
    ----------
    beta : float
        Flip probability in [0, 1].
    bits : int
        Code length, >= 1.

    Returns
    -------
    float
        ``bits * epsilon_per_bit(beta)``: basic composition over the independently
        flipped bits, tight because two codes can differ in every bit.

    """
    return _check_bits(bits) * epsilon_per_bit(beta)


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer) or bits < 1:
        raise ValueError(f"bits must be an integer >= 1, got {bits!r}")
    return int(bits)


def _at_most(value: float, bound: float) -> bool:
    return value <= bound * (1.0 + _REL_TOL)


@dataclass(frozen=True)
class FlipGuarantee:
    """What flipping with a calibrated ``beta`` guarantees, against what is claimed.

    Attributes
    ----------
    beta : float
        Flip probability given by the calibration.
    eps_per_bit : float
        True epsilon per bit, ``epsilon_per_bit(beta)``.
    eps_per_code : float
        True epsilon per ``bits``-bit code (record level), ``bits * eps_per_bit``.
    bits : int
        Code length.
    calibration : str
        ``"paper"`` or ``"rr"``.
    claimed_eps : float
        The epsilon asked for: per record for ``"paper"`` (Theorems 4 and 6 under
        Definition 1), per bit for ``"rr"``; see :attr:`claimed_unit`.
    holds : bool
        Whether the true epsilon in the claimed unit is <= ``claimed_eps``.
    note : str
        Plain-language account of the numbers.

    """

    beta: float
    eps_per_bit: float
    eps_per_code: float
    bits: int
    calibration: str
    claimed_eps: float
    holds: bool
    note: str

    @property
    def claimed_unit(self) -> str:
        """Unit of ``claimed_eps``: ``"per code"`` (paper) or ``"per bit"`` (rr)."""
        return UNIT_CODE if self.calibration == PAPER else UNIT_BIT

    @property
    def holds_per_bit(self) -> bool:
        """Whether ``claimed_eps`` bounds the true epsilon per bit."""
        return _at_most(self.eps_per_bit, self.claimed_eps)

    @property
    def holds_per_code(self) -> bool:
        """Whether ``claimed_eps`` bounds the true epsilon per code (record)."""
        return _at_most(self.eps_per_code, self.claimed_eps)


def flip_beta(eps: float, calibration: str) -> float:
    """Flip probability for ``eps`` under ``calibration``, refusing useless ones.

    Parameters
    ----------
    eps : float
        Epsilon, > 0 (per bit for ``"rr"``; the paper's claimed value for
        ``"paper"``).
    calibration : str
        ``"rr"`` or ``"paper"``.

    Returns
    -------
    float
        ``beta`` in (0, 1/2), usable by :func:`flip_codes`.

    Raises
    ------
    ValueError
        For a bad ``eps``, an unknown calibration, or the paper calibration with
        ``eps <= ln 2``, where ``beta = e^-eps >= 1/2`` gives codes that are
        independent of (beta = 1/2) or anti-correlated with (beta > 1/2) the input
        and whose true epsilon is not the claimed one.
    """
    if calibration == RANDOMIZED_RESPONSE:
        return beta_randomized_response(eps)
    if calibration != PAPER:
        raise ValueError(
            f"unknown calibration {calibration!r}; expected one of {CALIBRATIONS}"
        )
    beta = beta_paper(eps)
    if beta >= 0.5:
        raise ValueError(
            f"the paper calibration beta = e^-eps = {beta:.4g} >= 0.5 for eps <= ln 2 "
            f"= {math.log(2):.4f}: that negates most bits (it equals flipping with "
            f"1 - beta and negating every code), and its true per-bit eps is "
            f"{epsilon_per_bit(beta):.4g}, not the claimed {eps:g}; use eps > ln 2 or "
            "calibration 'rr'"
        )
    return beta


def flip_guarantee(eps: float, bits: int, calibration: str) -> FlipGuarantee:
    """Calibrate ``beta`` from ``eps`` and report the true privacy of flipping.

    Parameters
    ----------
    eps : float
        Epsilon asked for, > 0.
    bits : int
        Code length c, >= 1.
    calibration : str
        ``"paper"``: ``beta = e^-eps`` and the claim of Theorems 4/6 that the
        released codes are eps-DP, judged at record level (one data point's code
        replaced, Definition 1); ``holds_per_bit`` gives the bit-level reading.
        ``"rr"``: ``beta = 1 / (1 + e^eps)``, eps per bit, which always holds
        exactly; per code it is ``bits * eps``.

    Returns
    -------
    FlipGuarantee
        The calibrated ``beta``, the true per-bit and per-code epsilon and whether
        the claim holds.

    Raises
    ------
    ValueError
        For a bad ``eps``, ``bits`` or an unknown ``calibration``.

    """
    e = check_epsilon(eps)
    c = _check_bits(bits)
    if calibration == RANDOMIZED_RESPONSE:
        beta = beta_randomized_response(e)
        per_bit = epsilon_per_bit(beta)
        note = (
            f"randomized response: beta = 1/(1+e^{e:g}) = {beta:.6g} flips each bit "
            f"with exactly eps = {per_bit:.6g} per bit (bit-level neighbours); a whole "
            f"{c}-bit code (one record's code replaced) costs {c} * {per_bit:.6g} = "
            f"{c * per_bit:.6g} per code"
        )
        return FlipGuarantee(
            beta=beta,
            eps_per_bit=per_bit,
            eps_per_code=c * per_bit,
            bits=c,
            calibration=calibration,
            claimed_eps=e,
            holds=True,
            note=note,
        )
    if calibration != PAPER:
        raise ValueError(
            f"unknown calibration {calibration!r}; expected one of {CALIBRATIONS}"
        )
    beta = beta_paper(e)
    per_bit = epsilon_per_bit(beta)
    per_code = c * per_bit
    holds = _at_most(per_code, e)
    parts = [f"paper calibration beta = e^-{e:g} = {beta:.6g}."]
    if beta < 0.5:
        parts.append(
            f"True per-bit eps = ln((1-beta)/beta) = ln(e^eps - 1) = {per_bit:.6g} "
            f"<= {e:g}: the per-bit reading of Theorem 4 holds (conservatively)."
        )
    elif beta == 0.5:
        parts.append(
            "beta = 1/2: the output is independent of the input (0-DP) and carries "
            "no information about the codes."
        )
    else:
        verdict = "holds" if _at_most(per_bit, e) else "FAILS"
        parts.append(
            f"beta > 1/2 (eps < ln 2): this is flipping with 1 - beta = {1 - beta:.6g} "
            "and then negating every bit, so the codes are anti-correlated with the "
            f"true codes; true per-bit eps = ln(beta/(1-beta)) = {per_bit:.6g}, "
            f"which {verdict} against {e:g} per bit (it fails below "
            "eps = ln(golden ratio) = 0.4812, and grows as the claimed eps shrinks)."
        )
    parts.append(
        f"Record level (one data point's {c}-bit code replaced, Definition 1): true "
        f"eps = {c} * {per_bit:.6g} = {per_code:.6g} per code (tight), so the claim "
        f"eps = {e:g} {'holds' if holds else 'FAILS'}."
    )
    return FlipGuarantee(
        beta=beta,
        eps_per_bit=per_bit,
        eps_per_code=per_code,
        bits=c,
        calibration=calibration,
        claimed_eps=e,
        holds=holds,
        note=" ".join(parts),
    )


@dataclass(frozen=True)
class PitqGuarantee:
    """What PITQ (Algorithm 3) with ``beta = e^(-eps/E)`` guarantees (Theorem 8).

    Attributes
    ----------
    claimed_eps : float
        Epsilon claimed by Theorem 8 for the whole run.
    iterations : int
        Number of iterations E.
    bits : int
        Code length c.
    beta : float
        Flip probability ``e^(-eps/E)`` used in every iteration.
    eps_per_bit_per_iteration : float
        True epsilon of one iteration's flip, per bit: ``epsilon_per_bit(beta)``.
    eps_per_code_per_iteration : float
        The same per c-bit code: ``bits * eps_per_bit_per_iteration``.
    eps_per_code_composed : float
        ``iterations * eps_per_code_per_iteration``: what basic composition would
        charge per record *if* the E flipped code matrices were the only release and
        each record's unflipped code depended on that record alone. PITQ does not
        satisfy either premise, so this is a lower bound on any honest account, not
        a guarantee.
    holds : bool
        Always False: the release (R and ``sign(YWR)``) is not eps-DP for any
        finite eps.
    note : str
        Plain-language account.

    """

    claimed_eps: float
    iterations: int
    bits: int
    beta: float
    eps_per_bit_per_iteration: float
    eps_per_code_per_iteration: float
    eps_per_code_composed: float
    holds: bool
    note: str


def pitq_guarantee(eps: float, iterations: int, bits: int) -> PitqGuarantee:
    """Report honestly what PITQ's calibration ``beta = e^(-eps/E)`` gives.

    Parameters
    ----------
    eps : float
        Epsilon claimed by Theorem 8, > 0.
    iterations : int
        Number of PITQ iterations E, >= 1.
    bits : int
        Code length c, >= 1.

    Returns
    -------
    PitqGuarantee
        The per-iteration flip probability, the true epsilon of one flip per bit
        and per code, their E-fold basic composition, and ``holds=False`` with the
        reason.

    """
    e = check_epsilon(eps)
    if isinstance(iterations, bool) or not isinstance(iterations, int | np.integer):
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    n_iter = int(iterations)
    c = _check_bits(bits)
    beta = math.exp(-e / n_iter)
    per_bit = epsilon_per_bit(beta)
    per_code = c * per_bit
    composed = n_iter * per_code
    effective = min(beta, 1.0 - beta)
    note = (
        f"PITQ with eps={e:g}, E={n_iter}: beta = e^(-eps/E) = {beta:.6g}"
        + (
            f" > 1/2, i.e. every bit is negated except a fraction {effective:.4g} "
            "(about eps/E) left as is, so the noise shrinks as the claimed eps "
            "shrinks. "
            if beta > 0.5
            else ". "
        )
        + f"One iteration's flip is {per_bit:.6g}-DP per bit (not eps/E = "
        f"{e / n_iter:.4g}) and {per_code:.6g} per {c}-bit code; E-fold basic "
        f"composition of the flipped codes alone would be {composed:.6g} per code. "
        "But Theorem 8 does not hold for any eps: the released rotation R is the "
        "Procrustes rotation from the SVD of B'^T (YW), computed from the raw "
        "projected data YW and not from the flipped codes B' alone, so "
        "post-processing does not apply; for "
        "given data R takes only the finitely many values procrustes(B, YW), and one "
        "changed data point moves all those with B^T YW non-singular (essentially "
        "disjoint supports: not eps-DP for any finite eps, (eps, delta)-DP only "
        "for delta near 1). The returned codes sign(YWR) are not flipped, and the "
        "PCA projection W and mean are computed from the raw data."
    )
    return PitqGuarantee(
        claimed_eps=e,
        iterations=n_iter,
        bits=c,
        beta=beta,
        eps_per_bit_per_iteration=per_bit,
        eps_per_code_per_iteration=per_code,
        eps_per_code_composed=composed,
        holds=False,
        note=note,
    )
