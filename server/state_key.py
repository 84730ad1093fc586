"""The server's local key, which authenticates its state (checkpoints, ledger journal).

Whom it protects: the clients, whose spent epsilon the server's privacy ledger states,
against anyone who can change files in a run's results directory (a shared or mounted
results folder, a backup restored over it) but cannot read this key. Without it,
editing ``checkpoint.json`` reset a client's spent epsilon on resume.

The key is 32 random bytes (``os.urandom``), hex, in
``<results-dir>/.server-state.key``, created once with mode 0600 (first written under
a temporary name, then linked into place, so a concurrent run never reads half a
key). It never travels in the run config, a message or a result file. A key file
that others can read or write is refused: a key they can read authenticates nothing.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from settings.run_settings import ConfigError

KEY_NAME = ".server-state.key"
_BYTES = 32


def server_key(root: str | os.PathLike[str], *, create: bool = True) -> bytes:
    """Return the key in ``root`` (a results directory), creating it if allowed.

    Raises
    ------
    ConfigError
        One line naming the key file: missing (and ``create`` is false), readable or
        writable by group or others, or not 64 hex digits.
    """
    path = Path(root) / KEY_NAME
    if not path.exists():
        if not create:
            raise ConfigError(
                f"server key {path} is missing: the checkpoints and privacy-ledger "
                "journal of runs in that folder cannot be authenticated without it"
            )
        Path(root).mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{KEY_NAME}.", dir=root)  # mode 0600
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(os.urandom(_BYTES).hex() + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)  # fails if a concurrent run created it first
            except FileExistsError:
                pass
        finally:
            Path(tmp).unlink(missing_ok=True)
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode) or mode & 0o077:
        raise ConfigError(
            f"server key {path}: mode {stat.filemode(mode)}; accepted: a regular file "
            "only its owner can read and write (chmod 600)"
        )
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != _BYTES:
        raise ConfigError(
            f"server key {path}: not {2 * _BYTES} hex digits; accepted: the file this "
            "server created (remove it only together with the runs it authenticates)"
        )
    return key
