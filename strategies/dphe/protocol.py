"""What a strategy needs from its DPHE component: :class:`SecureAggregator`.

A leaf module (Flower types only), so that the implementation
(:class:`strategies.dphe.aggregation.SecureAggregation`, which declares it) and
the strategy interface (:mod:`strategies.protocol`) both import it without
importing each other.
"""

from __future__ import annotations

from typing import Protocol

from flwr.app import ArrayRecord, Message, MetricRecord


class SecureAggregator(Protocol):
    """Encrypted aggregation of the model updates (DPHE), one sum per round.

    Attributes
    ----------
    history : dict
        ``{round: {"contributors", "blocks", "total-weight"}}`` of the rounds
        whose aggregate was decrypted.
    """

    history: dict[int, dict[str, float]]

    @property
    def session(self) -> bytes:
        """The keyholder's session id, sent to the clients in the train config."""
        ...

    session_proof: bytes
    """The keyholder's proof that the session serves this run (to the clients)."""

    def begin_round(self, arrays: ArrayRecord, server_round: int) -> None:
        """Start a new sum for the model ``arrays`` sent this round."""
        ...

    def screen(self, msg: Message, partition_id: int | None) -> str | None:
        """Take the encrypted update out of ``msg`` and add it; the reason if not."""
        ...

    def aggregate(
        self, server_round: int, kept: object = None
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Return the new global model and train metrics (``None``: no update)."""
        ...
