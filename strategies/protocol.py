"""What the experiment loop needs from a strategy, written down as Protocols.

:class:`HashingStrategy` is the whole interface ``server/experiment.py`` uses: one
set-up call with the :class:`RunContext` learnt before the strategy is built
(partitions, label space, required privacy mechanisms, DPHE components, a
checkpoint's state), Flower's ``start``, and the per-round histories the
round reporter reads (train metrics, bytes exchanged, privacy mechanisms applied,
prototype classes). Every registered strategy implements all of it through
:class:`strategies.base.HashingStrategyBase` (defaults for the parts a
method does not use: no prototypes, no secure prototype sums);
:func:`strategies.server_side.build_strategy` refuses a strategy that does not.

:class:`strategies.dphe.protocol.SecureAggregator` is the DPHE component a
strategy aggregates the model with: what the mixin calls each round and the history
the reporter reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from strategies.dphe.protocol import SecureAggregator

if TYPE_CHECKING:
    from privacy.ledger import MechanismUse
    from strategies.dphe.aggregation import SecureSum


@dataclass(frozen=True)
class RunContext:
    """What the experiment learnt before building the strategy, in one place.

    Built after the data is prepared, the nodes are discovered, secure aggregation
    is set up and any checkpoint is read (``server/experiment.py``), and handed to
    :meth:`HashingStrategy.prepare`.
    """

    node_partitions: Mapping[int, int]
    """``{node_id: partition_id}`` learnt at discovery."""
    num_classes: int
    """Size C of the label space."""
    required_mechanisms: tuple[str, ...] = ()
    """Privacy mechanisms every train reply must report."""
    secure_aggregation: SecureAggregator | None = None
    """The DPHE component the model is aggregated with, if any."""
    secure_prototypes: SecureSum | None = None
    """DPHE's encrypted per-class prototype sums, if any."""
    checkpoint: Mapping[str, Any] | None = field(default=None)
    """The strategy's state in the checkpoint a resumed run continues from."""


@runtime_checkable
class HashingStrategy(Protocol):
    """A Flower strategy as the experiment loop drives it.

    Attributes
    ----------
    train_history : dict
        ``{round: aggregated train MetricRecord}``.
    client_train_history : dict
        ``{round: {partition id: {metric: value}}}`` of the kept train replies.
    comm_history : dict
        ``{round: {"down_bytes_per_client", "up_bytes_per_client"}}``.
    privacy_history : dict
        ``{round: [(partition id, mechanisms applied)]}`` of the kept replies.
    prototype_history : dict
        ``{round: {"classes": [...], "clients": n, ...}}``; empty for methods
        without prototypes.
    secure_aggregation : SecureAggregator or None
        The DPHE component, when the model is aggregated encrypted.
    """

    train_history: dict[int, MetricRecord]
    client_train_history: dict[int, dict[int, dict[str, float]]]
    comm_history: dict[int, dict[str, float]]
    privacy_history: dict[int, list[tuple[int, list[MechanismUse]]]]
    prototype_history: dict[int, dict[str, Any]]
    secure_aggregation: SecureAggregator | None

    def prepare(self, run: RunContext) -> None:
        """Set the strategy up for this run: the set-up calls, then the checkpoint.

        ``ValueError`` if the checkpoint's state does not fit the connected nodes.
        """
        ...

    def set_node_partitions(self, node_partitions: dict[int, int]) -> None:
        """Record ``{node_id: partition_id}`` learnt at discovery."""
        ...

    def set_label_space(self, num_classes: int) -> None:
        """Size C of the label space (class ids outside ``0..C-1`` are refused)."""
        ...

    def set_required_mechanisms(self, names: tuple[str, ...]) -> None:
        """Privacy mechanisms every train reply must report."""
        ...

    def set_secure_aggregation(self, secure: SecureAggregator | None) -> None:
        """Aggregate the model updates encrypted (DPHE)."""
        ...

    def set_secure_prototypes(self, secure: SecureSum | None) -> None:
        """Receive prototypes as encrypted per-class sums (DPHE)."""
        ...

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
        *,
        first_round: int = 1,
    ) -> Result:
        """Run rounds ``first_round..num_rounds`` (Flower's ``Strategy.start``)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Return the strategy's state for a checkpoint (``server/checkpoint.py``)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` after the set-up calls of a resumed run."""
        ...
