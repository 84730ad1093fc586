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

Pure Python and numpy; no Flower.
"""

from __future__ import annotations

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
        Charges to start from (e.g. read back from JSON).

    """

    def __init__(self, charges: Iterable[PrivacyCharge] = ()) -> None:
        self._charges: list[PrivacyCharge] = []
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

        """
        item = PrivacyCharge(client, round, mechanism, epsilon, delta, unit, note)
        self._charges.append(item)
        return item

    def __len__(self) -> int:
        return len(self._charges)

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


def _row(
    client: int, mechanism: str, unit: str, count: int, eps: float, delta: float
) -> tuple[str, ...]:
    return (str(client), mechanism, unit, str(count), f"{eps:.6g}", f"{delta:.3g}")
