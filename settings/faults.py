"""Fault injection for tests and benchmarks (section ``faults``; simulation only).

The server picks ``faults.clients`` of each round's sampled clients (seeded by the
run seed and the round, so a resumed run picks the same ones) and tells them, in
the train message, how to fail; the client's :func:`clients.faults.fault_mod` acts
it out. A deployed client ignores the instruction (it never trusts the server to
say it is simulated), and the ServerApp refuses ``faults.clients > 0`` outside
Flower's simulation engine. The point is to check that a round survives bad
clients: the rest are aggregated, the ledger charges only replies the server kept,
and a round left with fewer than ``min-train-nodes`` usable replies makes no update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from settings.schema import ConfigError, Section, option

FAULT_KINDS = ("raise", "timeout", "nan", "oversize")
"""``raise``: the ClientApp raises (an error reply); ``timeout``: the reply comes
``round-timeout`` + 2 s late; ``nan``: every float array of the reply is NaN;
``oversize``: every array of the reply is twice its length."""


@dataclass(frozen=True)
class FaultsConfig(Section):
    """Clients told to fail each round (tests and benchmarks, simulation only)."""

    NAME: ClassVar[str] = "faults"
    TITLE: ClassVar[str] = "Fault injection (simulation only)"

    clients: int = option(
        0,
        "how many of each round's sampled clients are told to fail; 0 = off; "
        "refused outside the simulation engine",
        low=0,
    )
    kind: str = option(
        "raise",
        "`raise` (error reply), `timeout` (reply after `round-timeout` + 2 s), "
        "`nan` (NaN arrays), `oversize` (every array twice its length)",
        choices=FAULT_KINDS,
    )

    def check(self, run: Any) -> None:
        """Refuse a timeout fault with a round timeout too long to wait out."""
        if self.clients and self.kind == "timeout" and run.round_timeout > 600:
            raise ConfigError(
                f"{self.key('kind')}='timeout' with {run.key('round_timeout')}="
                f"{run.round_timeout}: the faulty client sleeps past the round "
                "timeout; accepted: round-timeout <= 600 s"
            )
