"""Every strategy's base, made of small parts over a Flower FedAvg-family class.

:class:`HashingStrategyBase` gives a Flower strategy the whole
:class:`strategies.protocol.HashingStrategy` interface the experiment loop uses:

* :class:`strategies.partition_order.PartitionOrder`: seeded sampling of the nodes
  in partition-id order;
* :class:`strategies.reply_screening.ReplyScreening`: reply screening, aggregation
  in partition order, the per-round histories;
* :class:`SecureAggregationHook`: the DPHE session in each round's config, and the
  encrypted components a method takes;
* :class:`strategies.round_loop.ResumableLoop`: Flower's loop from a later round;
* the set-up from one :class:`strategies.protocol.RunContext` and the checkpoint
  state (here).

A method overrides what it has of its own (:meth:`set_label_space`,
:meth:`set_secure_prototypes`, the screening hooks ``screen_extras`` /
``keep_extras``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from privacy.ledger import MechanismUse
from settings import keys as K
from strategies.partition_order import PartitionOrder
from strategies.reply_screening import ReplyScreening
from strategies.round_loop import ResumableLoop

if TYPE_CHECKING:
    from strategies.dphe.aggregation import SecureSum
    from strategies.dphe.protocol import SecureAggregator
    from strategies.protocol import RunContext


class SecureAggregationHook:
    """Aggregate the model encrypted (DPHE) when the run sets it up."""

    secure_aggregation: SecureAggregator | None

    def set_secure_aggregation(self, secure: SecureAggregator | None) -> None:
        """Aggregate encrypted updates (DPHE) instead of plaintext models."""
        self.secure_aggregation = secure

    def set_secure_prototypes(self, secure: SecureSum | None) -> None:
        """Encrypted prototype sums; only a method that exchanges prototypes takes them.

        Raises
        ------
        ValueError
            If ``secure`` is given to a method without prototypes.
        """
        if secure is not None:
            raise ValueError(f"{type(self).__name__} exchanges no prototypes")

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Bind the round's messages to the keyholder's session (DPHE), if any."""
        if self.secure_aggregation is not None:
            self.secure_aggregation.begin_round(arrays, server_round)
            # the clients bind their encrypted updates to the keyholder's session
            config = ConfigRecord(
                {
                    **dict(config),
                    K.DPHE_SESSION: self.secure_aggregation.session.hex(),
                    K.DPHE_SESSION_PROOF: self.secure_aggregation.session_proof.hex(),
                    # the layout of encrypted prototype sums (FedHAP): the client
                    # need not reload its partition to learn it
                    **(
                        {K.NUM_CLASSES: self.num_classes}
                        if self.num_classes is not None
                        else {}
                    ),
                }
            )
        return super().configure_train(  # type: ignore[misc,no-any-return]
            server_round, arrays, config, grid
        )


class HashingStrategyBase(
    ReplyScreening, SecureAggregationHook, PartitionOrder, ResumableLoop
):
    """Mix in *before* a Flower FedAvg-family strategy class (see the module)."""

    #: attributes of a method's own state that a checkpoint keeps
    #: (:meth:`state_dict`); dicts keyed by node id are listed in ``NODE_KEYED``
    #: too, and are saved keyed by partition id (node ids change between runs)
    CHECKPOINTED: tuple[str, ...] = ()
    NODE_KEYED: tuple[str, ...] = ()

    def __init__(
        self,
        *args: Any,
        sampling_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.sampling_seed = sampling_seed
        self.node_partitions: dict[int, int] = {}
        self.train_history: dict[int, MetricRecord] = {}
        # {round: {partition id: that client's train metrics}} of the kept replies
        self.client_train_history: dict[int, dict[int, dict[str, float]]] = {}
        self.comm_history: dict[int, dict[str, float]] = {}
        self.kept_nodes: list[int] = []  # nodes whose replies the last round used
        # {round: [(partition id, mechanisms applied)]} from kept replies' privacy
        # records (the ledger itself charges every reply as it arrives:
        # server/charging_grid.py)
        self.privacy_history: dict[int, list[tuple[int, list[MechanismUse]]]] = {}
        self._privacy: dict[int, list[MechanismUse]] = {}
        self.required_mechanisms: tuple[str, ...] = ()
        self._expected: dict[str, tuple[tuple[int, ...], str]] = {}
        self._sent: list[Message] = []
        self.secure_aggregation: SecureAggregator | None = None
        self.num_classes: int | None = None
        # {round: {"classes": [...], "clients": n, ...}}; methods with prototypes
        self.prototype_history: dict[int, dict[str, Any]] = {}

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs from this strategy (for a checkpoint).

        The per-round histories (train metrics, bytes, privacy mechanisms,
        prototype classes) and the method's :attr:`CHECKPOINTED` attributes;
        node-keyed dicts are keyed by partition id.
        """
        own = {}
        for name in self.CHECKPOINTED:
            value = getattr(self, name)
            if name in self.NODE_KEYED:
                value = {self.node_partitions[n]: v for n, v in value.items()}
            own[name] = value
        return {
            "train_history": self.train_history,
            "comm_history": self.comm_history,
            "privacy_history": self.privacy_history,
            "prototype_history": self.prototype_history,
            "own": own,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`; call after :meth:`set_node_partitions`.

        Raises
        ------
        ValueError
            If a node-keyed entry names a partition no connected node holds.
        """
        self.train_history = dict(state["train_history"])
        self.comm_history = dict(state["comm_history"])
        self.privacy_history = {
            r: [(int(pid), list(uses)) for pid, uses in rows]
            for r, rows in state["privacy_history"].items()
        }
        self.prototype_history = dict(state["prototype_history"])
        node_of = {pid: n for n, pid in self.node_partitions.items()}
        for name in self.CHECKPOINTED:
            value = state["own"][name]
            if name in self.NODE_KEYED:
                missing = sorted(set(value) - set(node_of))
                if missing:
                    raise ValueError(
                        f"checkpoint holds {name} of partitions {missing}, which no "
                        "connected node holds"
                    )
                value = {node_of[pid]: v for pid, v in value.items()}
            setattr(self, name, value)

    def prepare(self, run: RunContext) -> None:
        """Set the strategy up from the run's context, the checkpoint's state last.

        Raises
        ------
        ValueError
            If the checkpoint holds state of partitions no connected node holds.
        """
        self.set_node_partitions(dict(run.node_partitions))
        self.set_label_space(run.num_classes)
        self.set_required_mechanisms(run.required_mechanisms)
        self.set_secure_aggregation(run.secure_aggregation)
        if run.secure_prototypes is not None:
            self.set_secure_prototypes(run.secure_prototypes)
        if run.checkpoint is not None:
            self.load_state_dict(dict(run.checkpoint))

    def set_label_space(self, num_classes: int) -> None:
        """Size of the label space; class ids outside ``0..C-1`` are rejected."""
        self.num_classes = int(num_classes)

    def set_required_mechanisms(self, names: tuple[str, ...]) -> None:
        """Privacy mechanisms every train reply must report (else it is dropped)."""
        self.required_mechanisms = tuple(names)
