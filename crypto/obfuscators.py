"""Paillier obfuscators ``r**n mod n**2``: full-length, DJN short-exponent, pooled.

A Paillier ciphertext of ``m`` is ``(1 + n*m) * r**n mod n**2`` (``g = n + 1``); the
*obfuscator* ``r**n`` is nearly all of the cost (a 2048-bit exponent modulo a
4096-bit number: ~10.6 ms here, against ~6 us for the rest). Every source below
yields values that are ``n``-th powers of a unit, so ciphertexts stay ordinary
Paillier ciphertexts: the keyholder decrypts them unchanged, and the aggregator's
range and ``gcd(c, n) = 1`` checks hold.

* :class:`FullObfuscators` (``"full"``, the default): ``r`` uniform in ``Z_n^*`` from
  the OS CSPRNG, ``r**n mod n**2`` -- python-paillier's obfuscation, in gmpy2.
  Semantic security rests on the DCR assumption only (Paillier 1999).
* :class:`DJNObfuscators` (``"djn"``): the short-exponent variant of Damgard, Jurik
  and Nielsen ("A generalization of Paillier's public-key system with applications
  to electronic voting", IJIS 2010, Section 4.1; also in the DJN implementations of
  SecretFlow HEU and ABY). The encryptor draws its own secret ``x`` in ``Z_n^*``,
  sets ``h = -x**2 mod n`` and ``h_s = h**n mod n**2``, and uses ``h_s**a`` with
  ``a`` uniform in ``[0, 2**ceil(k/2))`` (``k`` = bits of ``n``; 1024-bit exponents
  for 2048-bit keys). ``h_s**a = (h**a)**n`` is an ``n``-th power, so decryption is
  unchanged. **Assumption:** besides DCR, that ``h**a`` for such short ``a`` is
  computationally indistinguishable from a uniform element of the subgroup ``<h>``
  of Jacobi symbol +1 (the short-exponent indistinguishability on which DJN base
  their variant; it holds if the discrete logarithm with ``k/2``-bit exponents in
  that subgroup is hard). The base is fixed, so ``h_s**a`` comes from a fixed-base
  table (``ceil(k/2) / window`` rows of ``2**window`` powers: 16.8 MB, ~0.2 s to
  build for 2048-bit keys and the 8-bit window) with one multiplication per
  ``window`` exponent bits: ~0.8 ms instead of ~10.6 ms here.
* :class:`ObfuscatorPool` wraps either: :meth:`ObfuscatorPool.precompute` fills it
  *offline* (between rounds, optionally on several processes), :meth:`take`
  pops one value per ciphertext (never reused) and computes one on the fly when the
  pool is empty. The online cost of an encryption is then one multiplication.

An obfuscator is as secret as the plaintext it hides (``c / r**n = 1 + n*m``): the
sources, the table (``h_s`` and its powers) and the pool live in the encrypting
process only and are never serialised into a message.

No Flower imports.
"""

from __future__ import annotations

import math
import multiprocessing
import secrets
from collections import deque
from typing import Protocol

from gmpy2 import gcd, mpz, powmod

OBFUSCATORS = ("full", "djn")
"""Names accepted by :func:`make_obfuscators`."""
DJN_WINDOW = 8
"""Bits of exponent per fixed-base table row (2**8 entries per row)."""


class ObfuscatorSource(Protocol):
    """Anything that yields fresh ``r**n mod n**2`` values for one public key."""

    n: mpz

    def draw(self) -> mpz:
        """Return a fresh obfuscator (an ``n``-th power of a unit, mod ``n**2``)."""
        ...


def _random_unit(n: mpz) -> mpz:
    while True:
        r = mpz(secrets.randbelow(int(n) - 1) + 1)
        if gcd(r, n) == 1:
            return r


class FullObfuscators:
    """``r**n mod n**2`` with ``r`` uniform in ``Z_n^*`` (DCR only).

    Parameters
    ----------
    n : int
        Paillier modulus.
    """

    name = "full"

    def __init__(self, n: int) -> None:
        self.n = mpz(n)
        self.nsquare = self.n * self.n

    def draw(self) -> mpz:
        """Return ``r**n mod n**2`` for a fresh ``r`` from the OS CSPRNG."""
        return powmod(_random_unit(self.n), self.n, self.nsquare)


class DJNObfuscators:
    """DJN short-exponent obfuscators ``h_s**a`` from a fixed-base table.

    See the module docstring for the construction and the assumption it rests on.

    Parameters
    ----------
    n : int
        Paillier modulus (``k = n.bit_length()`` bits).
    exponent_bits : int, optional
        Bits of ``a``; default ``ceil(k / 2)`` (DJN's choice). Values below
        ``ceil(k / 2)`` are refused.
    window : int
        Exponent bits per table row, in ``[1, 12]``.
    """

    name = "djn"

    def __init__(
        self, n: int, *, exponent_bits: int | None = None, window: int = DJN_WINDOW
    ) -> None:
        self.n = mpz(n)
        self.nsquare = self.n * self.n
        least = math.ceil(int(n).bit_length() / 2)
        bits = least if exponent_bits is None else int(exponent_bits)
        if bits < least:
            raise ValueError(
                f"exponent_bits must be >= ceil(k/2) = {least} for a "
                f"{int(n).bit_length()}-bit n, got {bits}"
            )
        if not 1 <= window <= 12:
            raise ValueError(f"window must be in [1, 12], got {window}")
        self.exponent_bits = bits
        self.window = window
        x = _random_unit(self.n)
        h = (-(x * x)) % self.n
        base = powmod(h, self.n, self.nsquare)
        rows = []
        for _ in range(math.ceil(bits / window)):
            row = [mpz(1)]
            value = mpz(1)
            for _ in range((1 << window) - 1):
                value = value * base % self.nsquare
                row.append(value)
            rows.append(row)
            base = value * base % self.nsquare  # base ** (2 ** window)
        self._rows = rows

    def power(self, exponent: int) -> mpz:
        """Return ``h_s**exponent mod n**2`` from the table (``0 <= exponent``).

        Raises
        ------
        ValueError
            If the exponent is negative or longer than ``exponent_bits``.
        """
        if exponent < 0 or exponent.bit_length() > self.exponent_bits:
            raise ValueError(f"exponent must be in [0, 2**{self.exponent_bits})")
        mask = (1 << self.window) - 1
        nsquare = self.nsquare
        acc = mpz(1)
        for row in self._rows:
            digit = exponent & mask
            if digit:
                acc = acc * row[digit] % nsquare
            exponent >>= self.window
        return acc

    def draw(self) -> mpz:
        """Return ``h_s**a mod n**2`` for a fresh ``a`` of ``exponent_bits`` bits."""
        return self.power(secrets.randbits(self.exponent_bits))

    def base_power(self, exponent: int) -> mpz:
        """``h_s**exponent`` by square-and-multiply (tests: checks the table)."""
        return powmod(self._rows[0][1], exponent, self.nsquare)


def make_obfuscators(name: str, n: int) -> FullObfuscators | DJNObfuscators:
    """Return the source called ``name`` (:data:`OBFUSCATORS`) for modulus ``n``.

    Raises
    ------
    ValueError
        For an unknown name, listing the accepted ones.
    """
    if name == "full":
        return FullObfuscators(n)
    if name == "djn":
        return DJNObfuscators(n)
    raise ValueError(f"obfuscators must be one of {OBFUSCATORS}, got {name!r}")


_WORKER_SOURCE: ObfuscatorSource | None = None


def _draw_many(count: int) -> list[int]:
    assert _WORKER_SOURCE is not None
    return [int(_WORKER_SOURCE.draw()) for _ in range(count)]


class ObfuscatorPool:
    """Precomputed obfuscators for one key: offline precompute, online take.

    Parameters
    ----------
    source : ObfuscatorSource
        Where values come from (:class:`FullObfuscators`, :class:`DJNObfuscators`).
    """

    def __init__(self, source: ObfuscatorSource) -> None:
        self.source = source
        self.n = source.n
        self._values: deque[mpz] = deque()
        self.drawn_online = 0

    def __len__(self) -> int:
        return len(self._values)

    def precompute(self, count: int, *, workers: int = 1) -> None:
        """Add ``count`` fresh obfuscators (offline phase).

        Parameters
        ----------
        count : int
            Number of values, ``>= 0``.
        workers : int
            Processes to use (``1``: this process). With more, the source is
            inherited by forked workers (its secret never leaves the machine) and
            each computes ``count / workers`` values.
        """
        if count <= 0:
            return
        if workers <= 1:
            self._values.extend(self.source.draw() for _ in range(count))
            return
        global _WORKER_SOURCE
        _WORKER_SOURCE = self.source
        try:
            chunks = [count // workers + (i < count % workers) for i in range(workers)]
            context = multiprocessing.get_context("fork")
            with context.Pool(workers) as pool:
                for values in pool.map(_draw_many, [c for c in chunks if c]):
                    self._values.extend(mpz(v) for v in values)
        finally:
            _WORKER_SOURCE = None

    def extend(self, values: list[mpz]) -> None:
        """Add values precomputed elsewhere (e.g. a node's on-disk store)."""
        self._values.extend(mpz(v) for v in values)

    def leftover(self) -> list[mpz]:
        """Remove and return the values not taken (never used: safe to keep)."""
        values = list(self._values)
        self._values.clear()
        return values

    def take(self) -> mpz:
        """Pop one precomputed obfuscator, or draw one now if the pool is empty."""
        if self._values:
            return self._values.popleft()
        self.drawn_online += 1
        return self.source.draw()
