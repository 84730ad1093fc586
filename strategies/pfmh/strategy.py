"""PFMH: prototype-based federated multi-modal hashing (Flower FedAvg subclass).

Server side of the paper's Algorithm 1 (lines 7-13; math in
:mod:`hashing.pfmh.prototypes`). Each round the server

1. sends every sampled client, in their own records (never inside the model's
   ArrayRecord), *its* completed personal prototype set (Eq. 7) in
   ``pfmh-personal`` and the centralized set (Eq. 6) in ``pfmh-centralized``; the
   personal sets differ per client, so every message gets its own RecordDict;
2. takes each reply's ``pfmh-prototypes`` record out before Flower's FedAvg sees the
   reply and validates it (:func:`hashing.prototypes.prototype_problem`: class
   ids in the label space, unique, dimension k, finite, unit norm, counts >= 1); a
   bad upload drops the whole reply with a WARNING naming partition and node, and
   the round goes on with the rest;
3. computes the centralized prototype of every class over the kept clients holding
   it, unit-normalised (Eq. 6: plain mean, or count-weighted with
   ``prototype-weighting = "count"``), then completes each client's latest upload
   with the centralized prototypes of the classes it misses (Eq. 7). A class held by
   nobody stays absent. Without completion (ablation w/o-PE) a client's personal set
   is only its own prototypes (FedProto-like exchange).

Two modes (``pfmh.mode``):

``personalized`` (default)
    Only prototypes travel. The server sends an *empty* ArrayRecord, and a reply
    must carry an empty one (a reply with model arrays is dropped: the model stays on
    the client). Flower's FedAvg then only averages the train metrics.
``fedavg``
    The multi-modal network is FedAvg'd as usual (replies screened against the
    global arrays by :class:`HashingStrategyBase`), plus the same prototype
    exchange.

Client contract (``strategies/pfmh/trainer.py``): train with the received personal
and centralized sets (none in round 1); in personalized mode keep the model in
``context.state`` (built from the run seed on first use) and reply with an empty
``arrays`` record, in fedavg mode start from the received arrays and reply with the
trained ones; add one MetricRecord with ``num-examples`` and -- unless the variant
is w/o-P -- a ``pfmh-prototypes`` record with the classes it holds, their unit-norm
class means of H (Eq. 5) and the per-class counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from hashing.pfmh.prototypes import centralized_prototypes, personal_prototypes
from hashing.prototypes import ClassPrototypes, PrototypeSet
from settings import keys as K
from settings.prototype_records import (
    PFMH_CENTRALIZED,
    PFMH_PERSONAL,
    PFMH_UPLOAD,
    prototype_record,
)
from settings.run_settings import RunSettings
from strategies.base import HashingStrategyBase
from strategies.fedavg.strategy import common_kwargs
from strategies.pfmh.model import pfmh_loss_config
from strategies.reply_checks import take_prototype_upload


class HashingPFMH(HashingStrategyBase, FedAvg):
    """Flower FedAvg + PFMH's prototype aggregation and completion.

    Parameters
    ----------
    dim : int
        Prototype dimension k; uploads of another dimension are rejected.
    personalized : bool
        ``True``: no model arrays travel (see the module docstring).
    uses_prototypes : bool
        ``False`` for the w/o-P ablation: nothing is exchanged but metrics.
    complete : bool
        Apply Eq. 7 (``False`` is the w/o-PE ablation).
    weighting : str
        ``mean`` (the paper's Eq. 6) or ``count``; see
        :func:`hashing.pfmh.prototypes.centralized_prototypes`.
    **kwargs
        Passed to Flower's FedAvg (and ``sampling_seed`` to the mixin).
    """

    CHECKPOINTED = ("centralized", "uploads", "personal")
    NODE_KEYED = ("uploads", "personal")

    def __init__(
        self,
        *,
        dim: int,
        personalized: bool = True,
        uses_prototypes: bool = True,
        complete: bool = True,
        weighting: str = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dim = int(dim)
        self.personalized = personalized
        self.uses_prototypes = uses_prototypes
        self.complete = complete
        self.weighting = weighting
        self.centralized: PrototypeSet | None = None
        # latest valid upload of every client (node id), and its personal set
        self.uploads: dict[int, ClassPrototypes] = {}
        self.personal: dict[int, PrototypeSet] = {}
        self._round_uploads: dict[int, ClassPrototypes] = {}

    def personal_set(self, node_id: int) -> PrototypeSet | None:
        """Return the personal set sent to ``node_id`` (``None``: send none).

        A client whose classes the server does not know yet (no upload) misses every
        class, so with completion its set is the centralized one (Eq. 7 with
        ``i not in M_j`` for all j); without completion it gets none.
        """
        if node_id in self.personal:
            return self.personal[node_id]
        return self.centralized if self.complete else None

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """FedAvg's messages (no model in personalized mode) + per-client sets."""
        if self.personalized:
            arrays = ArrayRecord()  # only prototypes travel
        messages = list(super().configure_train(server_round, arrays, config, grid))
        if not self.uses_prototypes or self.centralized is None:
            return messages
        central = prototype_record(self.centralized, PFMH_CENTRALIZED)
        for msg in messages:
            # Flower builds every message on one shared RecordDict: copy it, since
            # the personal sets differ per client
            content = RecordDict(dict(msg.content.items()))
            personal = self.personal_set(msg.metadata.dst_node_id)
            if personal is not None and len(personal.classes):
                content[K.PFMH_PERSONAL] = prototype_record(personal, PFMH_PERSONAL)
            content[K.PFMH_CENTRALIZED] = central
            msg.content = content
        return messages

    def screen_extras(self, msg: Message) -> tuple[str | None, object]:
        """Take the upload out and check it; in personalized mode, no model arrays.

        Without prototypes (w/o-P) a stray upload is taken out and ignored.
        """
        upload = None
        if not self.uses_prototypes:
            msg.content.pop(K.PFMH_UPLOAD, None)
        else:
            if self.num_classes is None:
                raise RuntimeError("set_label_space() must be called before training")
            problem, upload = take_prototype_upload(
                msg,
                PFMH_UPLOAD,
                num_classes=self.num_classes,
                dim=self.dim,
                unit_norm=True,
            )
            if problem is not None:
                return problem, None
        if self.personalized:
            arrays = msg.content.get(K.ARRAYS)
            if not isinstance(arrays, ArrayRecord) or len(arrays):
                size = len(arrays) if isinstance(arrays, ArrayRecord) else None
                return (
                    f"personalized PFMH expects an empty '{K.ARRAYS}' record (the "
                    f"model stays on the client), got {size!r} arrays"
                ), None
        return None, upload

    def keep_extras(self, node_id: int, extras: object) -> None:
        """Keep a kept reply's upload for Eqs. 6-7."""
        if isinstance(extras, ClassPrototypes):
            self._round_uploads[node_id] = extras

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg (models, or only metrics); Eqs. 6-7 over the kept uploads."""
        self._round_uploads = {}
        arrays, metrics = super().aggregate_train(server_round, replies)
        if not self.uses_prototypes:
            return arrays, metrics
        kept = [n for n in self.kept_nodes if n in self._round_uploads]
        if not kept:
            return arrays, metrics
        assert self.num_classes is not None
        for node in kept:
            self.uploads[node] = self._round_uploads[node]
        self.centralized = centralized_prototypes(
            [self._round_uploads[n] for n in kept],
            num_classes=self.num_classes,
            dim=self.dim,
            weighting=self.weighting,
        )
        self.personal = {
            node: personal_prototypes(up, self.centralized, complete=self.complete)
            for node, up in self.uploads.items()
        }
        filled = [
            len(self.personal[n].classes) - len(self.uploads[n].classes) for n in kept
        ]
        classes = self.centralized.classes.tolist()
        self.prototype_history[server_round] = {
            "classes": classes,
            "clients": len(kept),
            "filled_mean": float(np.mean(filled)),
        }
        log(
            INFO,
            "round %d: centralized prototypes for %d/%d classes from %d clients; "
            "completion filled %.1f classes per client",
            server_round,
            len(classes),
            self.num_classes,
            len(kept),
            float(np.mean(filled)),
        )
        return arrays, metrics


def pfmh(settings: RunSettings) -> HashingPFMH:
    """PFMH (``strategy = "pfmh"``): ``pfmh.mode``, variant ``pfmh.variant``."""
    loss = pfmh_loss_config(settings)
    return HashingPFMH(
        **common_kwargs(settings),
        dim=settings.pfmh.k,
        personalized=settings.pfmh.mode == "personalized",
        uses_prototypes=loss.uses_prototypes,
        complete=loss.use_completion,
        weighting=settings.prototype_weighting,
    )
