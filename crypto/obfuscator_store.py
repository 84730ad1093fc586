"""Precomputed Paillier obfuscators on a node's disk: filled in the background.

A ClientApp may be a fresh process per message, so an in-memory
:class:`crypto.ObfuscatorPool` would not outlive the round it was filled for. This
store keeps the values ``r**n mod n**2`` of one public key in a folder of the node:

* **batch files**, each written whole to a temporary name (``O_EXCL``, mode 0600)
  and renamed into place, holding fixed-width big-endian values; the folder is
  created 0700. An obfuscator is as secret as the plaintext it hides
  (``c / r**n = 1 + n*m``), so nothing here is ever sent, and a folder that other
  users can read is refused.
* :meth:`ObfuscatorStore.take` removes values under an exclusive file lock: it
  reads a batch, **unlinks it first**, and only then writes the unused rest back as
  a new batch. A crash in between loses values, never reuses one.
* :meth:`ObfuscatorStore.fill` draws values (any :class:`ObfuscatorSource`) until
  the store holds ``target``; one filler at a time (a second returns at once).
  ``python -m crypto.obfuscator_store --dir D --n HEX --target N`` is that filler as
  a detached, low-priority process (:func:`spawn_fill`): the node refills between
  messages while it is otherwise idle. :func:`spawn_fill` starts none while one is
  at work on the folder, and the process it starts (:func:`filler_command`) loads
  only this module and :mod:`crypto.obfuscators` (gmpy2), not the ``crypto``
  package (numpy, the aggregator, the keyholder), which would cost more CPU per
  start than a round's draws of a small model.

No Flower imports.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gmpy2 import mpz

from crypto.obfuscators import OBFUSCATORS, ObfuscatorSource, make_obfuscators

SUFFIX = ".obf"
FILL_BATCH = 32
"""Values per batch file written by a filler (a partial fill is usable at once)."""


def key_folder(root: str | Path, n: int) -> Path:
    """Return the store's folder for modulus ``n`` under ``root`` (one per key)."""
    digest = hashlib.sha256(int(n).to_bytes((int(n).bit_length() + 7) // 8, "big"))
    return Path(root) / f"key-{digest.hexdigest()[:16]}"


def private_dir(path: str | Path) -> Path:
    """Create ``path`` (and parents) with mode 0700; refuse one others can reach.

    Raises
    ------
    PermissionError
        If the folder is not owned by this user or grants group/other access.
    """
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(
            f"obfuscator folder {str(path)!r} has mode {stat.S_IMODE(info.st_mode):o} "
            f"and owner uid {info.st_uid}: it must be this user's and 0700 (the "
            "values are as secret as the updates they hide)"
        )
    return path


class ObfuscatorStore:
    """The precomputed obfuscators of one key in one folder.

    Parameters
    ----------
    root : str or Path
        The node's folder for obfuscators; the key's own subfolder is made in it.
    n : int
        Paillier modulus (values are ``2 * bytes(n)`` wide).
    """

    def __init__(self, root: str | Path, n: int) -> None:
        self.n = int(n)
        self.width = 2 * ((self.n.bit_length() + 7) // 8)
        private_dir(root)
        self.folder = private_dir(key_folder(root, self.n))

    def _batches(self) -> list[Path]:
        return sorted(self.folder.glob(f"*{SUFFIX}"))

    def __len__(self) -> int:
        """Values on disk now."""
        total = 0
        for path in self._batches():
            try:
                total += path.stat().st_size // self.width
            except FileNotFoundError:  # taken meanwhile
                pass
        return total

    def bytes_on_disk(self) -> int:
        """Bytes of the batch files now."""
        return len(self) * self.width

    @contextmanager
    def _lock(self, name: str, *, wait: bool = True) -> Iterator[bool]:
        fd = os.open(self.folder / name, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _write(self, values: list[mpz] | list[int]) -> None:
        if not values:
            return
        data = b"".join(int(v).to_bytes(self.width, "big") for v in values)
        name = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
        tmp = self.folder / f".{name}.tmp"
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.folder / f"{name}{SUFFIX}")

    def add(self, values: list[mpz] | list[int]) -> None:
        """Store ``values`` (already drawn) as one batch."""
        self._write(values)

    def take(self, count: int) -> list[mpz]:
        """Remove and return up to ``count`` values (fewer if the store runs short)."""
        out: list[mpz] = []
        if count <= 0:
            return out
        with self._lock(".take.lock"):
            for path in self._batches():
                if len(out) >= count:
                    break
                try:
                    data = path.read_bytes()
                    path.unlink()  # gone before any value is used
                except FileNotFoundError:
                    continue
                values = [
                    mpz(int.from_bytes(data[i : i + self.width], "big"))
                    for i in range(0, len(data) - self.width + 1, self.width)
                ]
                need = count - len(out)
                out.extend(values[:need])
                self._write(values[need:])  # the unused rest, as a new batch
        return out

    def filling(self) -> bool:
        """Whether a filler holds this store's fill lock now (it is at work)."""
        with self._lock(".fill.lock", wait=False) as free:
            return not free

    def fill(self, target: int, source: ObfuscatorSource) -> int:
        """Draw values from ``source`` until the store holds ``target``.

        Returns the number added (0 if another filler holds the folder).
        """
        if int(source.n) != self.n:
            raise ValueError("the obfuscator source is for another public key")
        added = 0
        with self._lock(".fill.lock", wait=False) as mine:
            if not mine:
                return 0
            while (missing := target - len(self)) > 0:
                batch = [source.draw() for _ in range(min(FILL_BATCH, missing))]
                self._write(batch)
                added += len(batch)
        return added


_SPAWNED: list[subprocess.Popen[bytes]] = []


_BOOT = (
    "import sys, types; "
    "package = types.ModuleType('crypto'); package.__path__ = [sys.argv.pop(1)]; "
    "sys.modules['crypto'] = package; "
    "from crypto.obfuscator_store import main; main()"
)
"""The filler's start: ``crypto`` as a bare namespace (its ``__init__`` not run)."""


def filler_command(
    root: str | Path, n: int, target: int, obfuscators: str
) -> list[str]:
    """Return the command of a filler of ``root`` up to ``target`` values.

    It runs :func:`main` with the ``crypto`` package's ``__init__`` skipped: this
    module and :mod:`crypto.obfuscators` need only the standard library and gmpy2.
    """
    return [
        sys.executable,
        "-c",
        _BOOT,
        str(Path(__file__).resolve().parent),
        "--dir",
        str(root),
        "--n",
        format(int(n), "x"),
        "--target",
        str(int(target)),
        "--obfuscators",
        obfuscators,
    ]


def spawn_fill(root: str | Path, n: int, target: int, obfuscators: str) -> int | None:
    """Start a detached low-priority filler of ``root`` up to ``target`` values.

    Returns its process id, or ``None`` if the store already holds ``target`` or a
    filler is at work on it (that one fills up to the level the node keeps, so a
    second would only start and exit). The filler exits when the store is full;
    the modulus (public) is its only key material.
    """
    store = ObfuscatorStore(root, n)
    if len(store) >= target or store.filling():
        return None
    for proc in list(_SPAWNED):  # reap finished fillers
        if proc.poll() is not None:
            _SPAWNED.remove(proc)
    proc = subprocess.Popen(
        filler_command(root, n, target, obfuscators),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _SPAWNED.append(proc)
    return proc.pid


def main(argv: list[str] | None = None) -> None:
    """Run the background filler (see :func:`spawn_fill`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--n", required=True, help="the modulus, hexadecimal")
    parser.add_argument("--target", type=int, required=True)
    parser.add_argument("--obfuscators", default="full", choices=OBFUSCATORS)
    parser.add_argument("--nice", type=int, default=10)
    args = parser.parse_args(argv)
    if args.nice:
        os.nice(args.nice)  # yield the CPU to training and encryption
    n = int(args.n, 16)
    ObfuscatorStore(args.dir, n).fill(
        args.target, make_obfuscators(args.obfuscators, n)
    )


if __name__ == "__main__":
    main()
