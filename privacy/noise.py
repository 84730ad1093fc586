"""Where privacy noise comes from: the OS CSPRNG, or (simulation only) a seed.

Every privacy draw -- code and prototype flips, DP-SGD's Gaussian noise and Poisson
sampling, PITQ's flips, any later DP noise -- goes through a :class:`NoiseSource`.
Experiment randomness (mini-batch order, dropout, data splits) does not: it stays
seeded from the run seed so runs are repeatable.

Two modes (config key ``privacy.noise``):

* ``"secure"`` (default): uniform draws are read straight from ``os.urandom`` (the
  kernel's CSPRNG), 53 bits per float, and generator seeds (for torch) are 63 fresh
  bits from it. Nobody else -- the server included, who knows the run seed, the
  round and every partition id -- can predict them. This is what the epsilons in the
  privacy ledger assume.
* ``"seeded"``: the same draws come from SHAKE-256 of a label and the run seed,
  round, partition id and purpose. Anyone who knows those (the server does)
  rebuilds every flip mask and every DP-SGD noise vector, so **the guarantee does not
  hold against the server**. It exists to reproduce paper tables bit for bit and is
  refused outside Flower's simulation engine (``settings/runtime.py``); every ledger
  entry of such a run says so.

What ``secure`` does not give (see ``docs/threat-model.md``): torch's CPU generator
(MT19937) and CUDA generator (Philox) are not CSPRNGs. DP-SGD's noise generator and
sampler are seeded per round with fresh OS entropy, and Opacus' floating-point
hardening of the Gaussian (its ``secure_mode`` noise path) is switched on, but the
noise is not drawn from a CSPRNG end to end, as Opacus' ``secure_mode`` would do
with ``torchcsprng`` (not installable for torch 2.14).

Pure Python, numpy and hashlib; no torch, no Flower.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

SECURE = "secure"
SEEDED = "seeded"
NOISE_MODES = (SECURE, SEEDED)

SEEDED_WARNING = (
    "SEEDED privacy noise (simulation only): the server can rebuild it from the "
    "run seed, so this guarantee does not hold against the server"
)
"""Attached to every ledger entry and summary of a run with ``privacy.noise=seeded``."""

_LABEL = b"fedhash-privacy-noise-v1"
_FLOAT_BITS = 53


class NoiseSource:
    """Uniform draws and generator seeds for privacy mechanisms.

    Build one with :meth:`secure` or :meth:`seeded`; call :meth:`random` for uniform
    floats (the interface :func:`privacy.flipping.flip_codes` uses) and
    :meth:`seed` for a fresh generator seed. Each call consumes fresh randomness:
    in seeded mode a counter is part of the hashed input, so two calls never
    return the same stream.
    """

    def __init__(self, mode: str, read: Callable[[int], bytes]) -> None:
        if mode not in NOISE_MODES:
            raise ValueError(
                f"privacy noise mode {mode!r}: accepted are {', '.join(NOISE_MODES)}"
            )
        self._mode = mode
        self._read = read

    @classmethod
    def secure(cls) -> NoiseSource:
        """Draws from ``os.urandom``: unpredictable to everyone, not reproducible."""
        return cls(SECURE, os.urandom)

    @classmethod
    def seeded(cls, *parts: int | str) -> NoiseSource:
        """Reproducible draws from SHAKE-256 of ``parts`` (simulation only).

        Parameters
        ----------
        *parts : int or str
            What identifies the draw, e.g. ``(run seed, round, partition id,
            purpose)``; integers must be ``>= 0`` (at most 64 bits).

        Raises
        ------
        ValueError
            If no part is given or a part is not a non-negative integer or a string.
        """
        if not parts:
            raise ValueError("a seeded noise source needs at least one part")
        material = bytearray(_LABEL)
        for part in parts:
            if isinstance(part, str):
                data = part.encode()
                material += b"s" + struct.pack(">I", len(data)) + data
            elif isinstance(part, int | np.integer) and not isinstance(part, bool):
                if not 0 <= int(part) < 2**64:
                    raise ValueError(f"seed part {part!r}: accepted are 0 .. 2**64-1")
                material += b"i" + struct.pack(">Q", int(part))
            else:
                raise ValueError(
                    f"seed part {part!r}: accepted are non-negative integers and "
                    "strings"
                )
        prefix = bytes(material)
        counter = [0]

        def read(count: int) -> bytes:
            counter[0] += 1
            return hashlib.shake_256(
                prefix + b"#" + struct.pack(">Q", counter[0])
            ).digest(count)

        return cls(SEEDED, read)

    @property
    def mode(self) -> str:
        """``"secure"`` or ``"seeded"``."""
        return self._mode

    @property
    def predictable_by_server(self) -> bool:
        """True in seeded mode: whoever knows the run seed can rebuild the noise."""
        return self._mode == SEEDED

    def random(self, size: int | tuple[int, ...]) -> NDArray[np.float64]:
        """Uniform floats in ``[0, 1)`` of shape ``size`` (53 random bits each).

        Same signature as :meth:`numpy.random.Generator.random` for the ``size``
        argument, so flipping code works with either.
        """
        shape = (size,) if isinstance(size, int | np.integer) else tuple(size)
        count = int(np.prod(shape, dtype=np.int64))
        if count < 0:
            raise ValueError(f"size {size!r}: must not be negative")
        if count == 0:
            return np.zeros(shape, dtype=np.float64)
        words = np.frombuffer(self._read(8 * count), dtype="<u8")
        mantissa = words >> np.uint64(64 - _FLOAT_BITS)
        return (mantissa.astype(np.float64) * 2.0**-_FLOAT_BITS).reshape(shape)

    def seed(self) -> int:
        """Return a fresh 63-bit seed (e.g. for a ``torch.Generator``)."""
        return int.from_bytes(self._read(8), "big") >> 1

    def numpy_generator(self) -> np.random.Generator:
        """Return a numpy generator seeded with 256 fresh bits (for non-uniform draws).

        numpy's PCG64 is not a CSPRNG; use :meth:`random` directly where the draw is
        a Bernoulli or uniform (flips), and this only where a distribution needs it.
        """
        return np.random.Generator(
            np.random.PCG64(int.from_bytes(self._read(32), "big"))
        )


def check_noise_mode(mode: str) -> str:
    """Return ``mode`` if it is a known noise mode, else raise ``ValueError``."""
    if mode not in NOISE_MODES:
        raise ValueError(
            f"privacy noise mode {mode!r}: accepted are {', '.join(NOISE_MODES)}"
        )
    return mode
