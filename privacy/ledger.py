"""A privacy ledger: every (eps, delta) charge of every client, and their totals.

Each charge records who paid (client), when (round), for what (mechanism) and in
which unit the guarantee is stated, i.e. its neighbouring relation: ``"per bit"``
(inputs differing in one bit of one code), ``"per code"`` (one record's whole code
replaced), ``"per record"`` (one training example added, removed or replaced, as
DP-SGD states it), and so on.

Totals use basic (sequential) composition (Dwork and Roth, Theorem 3.16): the
epsilons add and the deltas add. This is always valid and never tighter than
advanced or RDP accounting; it is what the ledger is for, an auditable upper bound.

Charges in different units are never added together: an eps "per bit" and an eps
"per record" bound the privacy loss for different pairs of neighbouring inputs, so
their sum bounds nothing. Convert a charge to a common unit first (for example
``epsilon_per_code`` turns a per-bit flip charge into a per-code one) or ask for the
total of one unit.

A ledger can keep a :class:`LedgerJournal`: every charge is then appended to an
HMAC-chained file and fsynced before :meth:`PrivacyLedger.charge` returns, so a
crash right after a release loses no charge and an edit of the file is detected.

Pure Python and numpy; no Flower.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

UNIT_RECORD = "per record"
"""One training record added or removed (DP-SGD's unit; prototype flips' too)."""

_FIELDS = ("client", "round", "mechanism", "epsilon", "delta", "unit", "note")


@dataclass(frozen=True)
class PrivacyCharge:
    """One privacy cost paid by one client.

    Attributes
    ----------
    client : int
        Client (partition) id, >= 0.
    round : int
        Federated round, >= 0 (0 for one-off releases before training).
    mechanism : str
        Name of the mechanism, e.g. ``"random-flipping"`` or ``"dp-sgd"``.
    epsilon : float
        Epsilon of this release, finite and >= 0.
    delta : float
        Delta of this release, 0 <= delta < 1.
    unit : str
        Neighbouring relation the guarantee refers to, e.g. ``"per bit"``,
        ``"per code"``, ``"per record"``.
    note : str
        Free text (parameters, calibration).

    """

    client: int
    round: int
    mechanism: str
    epsilon: float
    delta: float
    unit: str
    note: str = ""

    def __post_init__(self) -> None:
        for name in ("client", "round"):
            value = getattr(self, name)
            integral = isinstance(value, int | np.integer)
            if isinstance(value, bool) or not integral or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
            object.__setattr__(self, name, int(value))
        for name in ("mechanism", "unit"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.note, str):
            raise ValueError(f"note must be a string, got {self.note!r}")
        eps, delta = _number("epsilon", self.epsilon), _number("delta", self.delta)
        if not math.isfinite(eps) or eps < 0.0:
            raise ValueError(f"epsilon={self.epsilon}: must be finite and >= 0")
        if not (0.0 <= delta < 1.0):
            raise ValueError(f"delta={self.delta}: must satisfy 0 <= delta < 1")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)

    def to_dict(self) -> dict[str, Any]:
        """Return the charge as a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyCharge:
        """Build a charge from :meth:`to_dict` output (``note`` optional).

        Raises
        ------
        ValueError
            On missing or unknown keys or invalid values.

        """
        if not isinstance(data, dict):
            raise ValueError(f"a charge must be a JSON object, got {data!r}")
        unknown = set(data) - set(_FIELDS)
        missing = set(_FIELDS[:-1]) - set(data)
        if unknown or missing:
            raise ValueError(
                f"bad charge keys: missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        return cls(**data)


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class MechanismUse:
    """One application of a privacy mechanism, as a client reports it.

    Attributes
    ----------
    mechanism : str
        What was applied and to what (e.g. ``random-flipping/codes``).
    epsilon : float
        Its epsilon, in ``unit``.
    delta : float
        Its delta.
    unit : str
        The neighbouring relation of ``epsilon`` (``per bit``, ``per code``...).
    """

    mechanism: str
    epsilon: float
    delta: float
    unit: str


class PrivacyLedger:
    """Append-only record of privacy charges with basic-composition totals.

    Parameters
    ----------
    charges : iterable of PrivacyCharge, optional
        Charges to start from (e.g. read back from JSON or from ``journal``).
    journal : LedgerJournal, optional
        Where every new charge is appended durably before :meth:`charge` returns
        (``charges`` are not appended again: they are what it already holds).

    """

    def __init__(
        self,
        charges: Iterable[PrivacyCharge] = (),
        *,
        journal: LedgerJournal | None = None,
    ) -> None:
        self._charges: list[PrivacyCharge] = []
        self._journal = journal
        for item in charges:
            if not isinstance(item, PrivacyCharge):
                raise ValueError(f"expected PrivacyCharge, got {type(item).__name__}")
            self._charges.append(item)

    def charge(
        self,
        client: int,
        round: int,
        mechanism: str,
        *,
        epsilon: float,
        delta: float = 0.0,
        unit: str,
        note: str = "",
    ) -> PrivacyCharge:
        """Record one release.

        Parameters
        ----------
        client : int
            Client id, >= 0.
        round : int
            Round, >= 0.
        mechanism : str
            Mechanism name.
        epsilon : float
            Finite, >= 0.
        delta : float
            0 <= delta < 1.
        unit : str
            Neighbouring relation of ``epsilon``/``delta`` (``"per code"``...).
        note : str
            Free text.

        Returns
        -------
        PrivacyCharge
            The recorded charge.

        Raises
        ------
        ValueError
            If a value is invalid; nothing is recorded then.
        OSError
            If the journal cannot be written; the charge is not recorded then.

        """
        item = PrivacyCharge(client, round, mechanism, epsilon, delta, unit, note)
        if self._journal is not None:
            self._journal.append(item)
        self._charges.append(item)
        return item

    def __len__(self) -> int:
        return len(self._charges)

    @property
    def journal(self) -> LedgerJournal | None:
        """Where new charges are appended durably, if anywhere."""
        return self._journal

    @property
    def charges(self) -> tuple[PrivacyCharge, ...]:
        """All charges in the order they were made."""
        return tuple(self._charges)

    def clients(self) -> tuple[int, ...]:
        """Sorted ids of the clients with at least one charge."""
        return tuple(sorted({c.client for c in self._charges}))

    def units(self, client: int) -> tuple[str, ...]:
        """Sorted units in which ``client`` was charged."""
        return tuple(sorted({c.unit for c in self._charges if c.client == client}))

    def total(self, client: int, unit: str | None = None) -> tuple[float, float]:
        """Compose a client's charges by basic composition: (sum eps, sum delta).

        Parameters
        ----------
        client : int
            Client id.
        unit : str, optional
            Only charges in this unit. Without it, all of the client's charges,
            which must then share one unit.

        Returns
        -------
        tuple of float
            ``(epsilon, delta)``; ``(0.0, 0.0)`` when nothing matches.

        Raises
        ------
        ValueError
            If ``unit`` is None and the client has charges in several units: an eps
            "per bit" and an eps "per record" refer to different neighbouring
            inputs, so they do not add.

        """
        if unit is None:
            units = self.units(client)
            if len(units) > 1:
                raise ValueError(
                    f"client {client} has charges in several units {list(units)}; "
                    "epsilons for different neighbouring relations do not add: "
                    "ask for total(client, unit=...)"
                )
        selected = [
            c
            for c in self._charges
            if c.client == client and (unit is None or c.unit == unit)
        ]
        return (
            math.fsum(c.epsilon for c in selected),
            math.fsum(c.delta for c in selected),
        )

    def totals_by_client(self) -> dict[int, dict[str, tuple[float, float]]]:
        """Composed ``(epsilon, delta)`` for every client and unit.

        Returns
        -------
        dict
            ``{client: {unit: (epsilon, delta)}}``, clients and units sorted.

        """
        return {
            client: {unit: self.total(client, unit) for unit in self.units(client)}
            for client in self.clients()
        }

    def to_json(self, indent: int | None = 2) -> str:
        """Serialize the charges as a JSON list of objects, one per charge."""
        return json.dumps([c.to_dict() for c in self._charges], indent=indent)

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        """Inverse of :meth:`to_json`.

        Raises
        ------
        ValueError
            If the JSON is not a list of valid charges.

        """
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError("a ledger must be a JSON list of charges")
        return cls(PrivacyCharge.from_dict(item) for item in data)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_json` to ``path`` atomically.

        The text goes to a temporary file in the same directory, which is flushed,
        fsynced and then renamed over ``path`` with ``os.replace``, so a reader sees
        either the old or the new ledger, never half of one.

        Returns
        -------
        pathlib.Path
            The path written.

        """
        target = Path(path)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(self.to_json())
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> PrivacyLedger:
        """Read a ledger written by :meth:`write`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def table(self) -> str:
        """Render the composed charges as a fixed-width text table.

        One row per client x mechanism x unit with the number of charges and their
        basic composition, then one ``total`` row per client and unit (units are
        never summed together).

        Returns
        -------
        str
            The table, one line per row; only the header when empty. Each distinct
            charge note (e.g. that seeded noise gives no guarantee against the
            server) follows as a ``note:`` line.

        """
        header = ("client", "mechanism", "unit", "charges", "epsilon", "delta")
        rows: list[tuple[str, ...]] = []
        for client in self.clients():
            mine = [c for c in self._charges if c.client == client]
            for mechanism, unit in sorted({(c.mechanism, c.unit) for c in mine}):
                group = [c for c in mine if (c.mechanism, c.unit) == (mechanism, unit)]
                eps = math.fsum(c.epsilon for c in group)
                delta = math.fsum(c.delta for c in group)
                rows.append(_row(client, mechanism, unit, len(group), eps, delta))
            for unit in self.units(client):
                count = sum(1 for c in mine if c.unit == unit)
                eps, delta = self.total(client, unit)
                rows.append(_row(client, "total", unit, count, eps, delta))
        widths = [
            max(len(line[i]) for line in [header, *rows]) for i in range(len(header))
        ]
        right = {3, 4, 5}
        lines = []
        for line in [header, *rows]:
            cells = [
                cell.rjust(w) if i in right else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=True))
            ]
            lines.append("  ".join(cells).rstrip())
        lines.insert(1, "  ".join("-" * w for w in widths))
        # notes that qualify the charges (e.g. seeded noise) close the table, once each
        notes = sorted({c.note for c in self._charges if c.note})
        lines += [f"note: {note}" for note in notes]
        return "\n".join(lines)


class JournalError(ValueError):
    """A journal line that is not what this server's key wrote there."""


_JOURNAL_DOMAIN = b"fedhash privacy-ledger journal v1\0"


class LedgerJournal:
    """An append-only file of charges: one JSON line each, HMAC-SHA256 chained.

    Line ``i`` is ``{"charge": {...}, "mac": hex}`` with
    ``mac_i = HMAC(key, mac_{i-1} || canonical JSON of charge i)`` and ``mac_{-1} =
    HMAC(key, domain || context)``: ``context`` names the run, so a journal copied
    from another run fails at its first line. Each :meth:`append` writes one line
    with one ``write`` on an ``O_APPEND`` descriptor and fsyncs it before returning.

    Whom it protects: the clients whose spent epsilon the server's ledger states,
    against anyone who can change files in the run directory but cannot read the
    key. An edited, reordered, inserted or removed line fails the chain; the only
    undetectable edit is cutting lines off the end, which :meth:`head` lets a
    checkpoint catch up to the charges it covers (``server/checkpoint.py``).

    Use :meth:`open`; it creates the file or verifies what is there.
    """

    def __init__(self, path: Path, key: bytes, context: str) -> None:
        self.path = path
        self._key = key
        self._start = hmac.new(key, _JOURNAL_DOMAIN + context.encode(), hashlib.sha256)
        self._macs: list[bytes] = []

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], key: bytes, context: str
    ) -> tuple[LedgerJournal, list[PrivacyCharge]]:
        """Open (or create) the journal at ``path``; return it and its charges.

        Raises
        ------
        JournalError
            Naming the file and the first line that is malformed or whose MAC
            does not verify under ``key`` and ``context``.

        """
        if len(key) < 16:
            raise ValueError("a journal key must have at least 16 bytes")
        journal = cls(Path(path), key, context)
        charges: list[PrivacyCharge] = []
        if journal.path.exists():
            text = journal.path.read_bytes().decode("utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), start=1):
                charges.append(journal._verify(number, line))
            if text and not text.endswith("\n"):
                raise JournalError(
                    f"{journal.path}: line {len(charges)} is incomplete (no newline): "
                    "not written by this server in one piece"
                )
        else:
            fd = os.open(journal.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
        return journal, charges

    def _previous(self) -> bytes:
        return self._macs[-1] if self._macs else self._start.digest()

    def _mac(self, charge: PrivacyCharge) -> bytes:
        body = json.dumps(charge.to_dict(), sort_keys=True, separators=(",", ":"))
        return hmac.new(
            self._key, self._previous() + body.encode(), hashlib.sha256
        ).digest()

    def _verify(self, number: int, line: str) -> PrivacyCharge:
        bad = f"{self.path}: line {number} "
        try:
            data = json.loads(line)
            charge = PrivacyCharge.from_dict(data["charge"])
            mac = bytes.fromhex(data["mac"])
        except (ValueError, KeyError, TypeError) as exc:
            raise JournalError(bad + f"is not a journal entry ({exc})") from None
        if not hmac.compare_digest(mac, self._mac(charge)):
            raise JournalError(
                bad + "fails its HMAC: the journal was edited, or was written for "
                "another run or with another server key"
            )
        self._macs.append(mac)
        return charge

    def append(self, charge: PrivacyCharge) -> None:
        """Append ``charge`` and fsync; only then is it part of :meth:`head`."""
        mac = self._mac(charge)
        line = json.dumps({"charge": charge.to_dict(), "mac": mac.hex()}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            data = line.encode()
            if os.write(fd, data) != len(data):
                raise OSError(f"{self.path}: short write of a journal line")
            os.fsync(fd)
        finally:
            os.close(fd)
        self._macs.append(mac)

    def head(self) -> tuple[int, str]:
        """Return ``(number of charges, MAC of the last one)`` (start MAC if empty)."""
        return len(self._macs), self._previous().hex()

    def mac_at(self, count: int) -> str:
        """Return the chain's MAC after its first ``count`` charges."""
        if not 0 <= count <= len(self._macs):
            raise ValueError(f"count {count} outside 0..{len(self._macs)}")
        return (self._macs[count - 1] if count else self._start.digest()).hex()


def _row(
    client: int, mechanism: str, unit: str, count: int, eps: float, delta: float
) -> tuple[str, ...]:
    return (str(client), mechanism, unit, str(count), f"{eps:.6g}", f"{delta:.3g}")
