"""A node's own privacy ledger: every release it made, across runs, on its disk.

The server keeps a ledger of what clients report (:mod:`privacy.ledger`); this one
belongs to the node and is what its policy's budget (:mod:`privacy.policy`) is
checked against. It lives in the node's state folder as a JSON list of
:class:`~privacy.ledger.PrivacyCharge` (``note`` = the run id and message type) and
is rewritten atomically (temporary file, fsync, ``os.replace``) under an exclusive
file lock, so two messages handled at once never lose a charge and a crash leaves
the old or the new ledger, never half of one.

Pure Python; no Flower.
"""

from __future__ import annotations

import fcntl
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from privacy.ledger import PrivacyCharge, PrivacyLedger
from privacy.policy import Charge


def node_ledger_path(state_dir: str | Path, partition_id: int) -> Path:
    """Return the ledger file of partition ``partition_id`` in ``state_dir``."""
    return Path(state_dir) / f"privacy-ledger-partition-{int(partition_id)}.json"


class NodeLedger:
    """The charges of one node (partition), persisted in ``path``."""

    def __init__(self, path: str | Path, *, client: int) -> None:
        self.path = Path(path)
        self.client = int(client)

    @contextmanager
    def _locked(self) -> Iterator[PrivacyLedger]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        with open(lock, "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield self._read()
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _read(self) -> PrivacyLedger:
        if not self.path.exists():
            return PrivacyLedger()
        try:
            return PrivacyLedger.read(self.path)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"node privacy ledger {str(self.path)!r} is unreadable ({exc}); it "
                "is the node's record of what it spent: restore it, never delete it"
            ) from None

    def spent(self) -> dict[str, float]:
        """Return ``{unit: epsilon}`` spent so far (basic composition)."""
        with self._locked() as ledger:
            return _totals(ledger)

    def charge_if_within(
        self,
        charges: Sequence[Charge],
        check: Callable[[Mapping[str, float], Sequence[Charge]], list[str]],
        *,
        server_round: int,
        note: str,
    ) -> list[str]:
        """Append ``charges`` unless ``check(spent, charges)`` returns reasons.

        ``check`` is called under the lock with the current totals; when it
        returns a non-empty list nothing is written and the list is returned.
        Charges of infinite epsilon are never written (the check must refuse them).
        """
        with self._locked() as ledger:
            reasons = list(check(_totals(ledger), charges))
            if reasons or not charges:
                return reasons
            for c in charges:
                if not math.isfinite(c.epsilon):
                    raise ValueError(f"{c.mechanism}: infinite epsilon is not charged")
                ledger.charge(
                    self.client,
                    max(int(server_round), 0),
                    c.mechanism,
                    epsilon=c.epsilon,
                    delta=c.delta,
                    unit=c.unit,
                    note=note,
                )
            ledger.write(self.path)
            os.chmod(self.path, 0o600)
            return []

    def charges(self) -> tuple[PrivacyCharge, ...]:
        """Every charge recorded, oldest first."""
        with self._locked() as ledger:
            return ledger.charges


def _totals(ledger: PrivacyLedger) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in ledger.charges:
        out[c.unit] = out.get(c.unit, 0.0) + c.epsilon
    return out
