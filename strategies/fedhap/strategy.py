"""FedHAP: federated hashing with global class prototypes (Flower FedAvg subclass).

Server side of Algorithm 1: FedAvg of the hashing network and the discriminator
(both in the one global ArrayRecord, the discriminator under ``discriminator.``),
plus global prototypes. Each round the server

1. sends the global arrays and, once it has them, the global prototype codes in
   their own ``prototypes`` record (the same for every client);
2. takes each reply's ``prototypes`` record out before Flower's FedAvg sees the
   reply, validating it (code length, class ids in the label space, finite values,
   positive counts); a bad record drops the whole reply with a log line naming the
   client;
3. aggregates, per class, the relaxed class means of the kept clients that hold the
   class (Eq. 6: plain mean, or count-weighted with ``prototype-weighting =
   "count"``) and takes the sign; a class nobody holds stays absent.

Client contract: train with the received prototypes (``strategies/fedhap/trainer.py``)
and reply with one ArrayRecord of the same layout, one MetricRecord with
``num-examples`` and -- unless the variant is FedHAP-1 -- a ``prototypes`` record
with the classes it holds, their mean relaxed codes and counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from crypto import EncryptedUpdate
from hashing.csq import hash_centers
from hashing.fedhap.prototypes import (
    GlobalPrototypes,
    aggregate_prototypes,
    prototypes_from_fixed_point,
)
from hashing.prototypes import ClassPrototypes, PrototypeSet
from settings import keys as K
from settings.prototype_records import (
    FEDHAP_BROADCAST,
    FEDHAP_UPLOAD,
    prototype_record,
)
from settings.run_settings import RunSettings
from strategies.base import HashingStrategyBase
from strategies.dphe.aggregation import SecureSum
from strategies.fedavg.strategy import common_kwargs
from strategies.reply_checks import take_prototype_upload


class HashingFedHAP(HashingStrategyBase, FedAvg):
    """Flower FedAvg + FedHAP's global prototypes.

    Parameters
    ----------
    bits : int
        Code length; uploads of another length are rejected.
    uses_prototypes : bool
        False for the FedHAP-1 ablation (no prototypes exchanged at all).
    initial_centers : bool
        Start from data-independent hash centres as round-1 prototypes.
    centers_seed : int
        Seed of the centres when they are not Hadamard rows.
    weighting : str
        ``mean`` (paper) or ``count``; see
        :func:`hashing.fedhap.prototypes.aggregate_prototypes`.
    **kwargs
        Passed to Flower's FedAvg (and ``sampling_seed`` to the mixin).
    """

    CHECKPOINTED = ("global_prototypes",)

    def __init__(
        self,
        *,
        bits: int,
        uses_prototypes: bool = True,
        weighting: str = "mean",
        initial_centers: bool = False,
        centers_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bits = bits
        self.uses_prototypes = uses_prototypes
        self.weighting = weighting
        self.initial_centers = initial_centers
        self.centers_seed = centers_seed
        self.global_prototypes: GlobalPrototypes | None = None
        self._uploads: dict[int, ClassPrototypes] = {}
        self.secure_prototypes: SecureSum | None = None
        self._secure_uploads: dict[int, EncryptedUpdate] = {}

    def set_secure_prototypes(self, secure: SecureSum | None) -> None:
        """Receive prototypes as DPHE-encrypted per-class sums (``dphe.prototypes``).

        The server then learns only, per class, the sum of the holders' means and
        the number of holders -- not any client's prototypes or classes.
        """
        self.secure_prototypes = secure

    def set_label_space(self, num_classes: int) -> None:
        """Size of the label space; class ids outside ``0..C-1`` are rejected.

        With ``initial_centers`` the round-1 prototypes (the paper's H^0) are
        data-independent hash centres (``hashing.csq.hash_centers``), one per class.
        """
        super().set_label_space(num_classes)
        assert self.num_classes is not None
        if self.initial_centers and self.uses_prototypes:
            centers = hash_centers(
                self.num_classes, self.bits, seed=self.centers_seed
            ).numpy()
            self.global_prototypes = GlobalPrototypes(
                classes=np.arange(self.num_classes, dtype=np.int64),
                relaxed=centers,
                codes=centers,
            )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """FedAvg's train messages, plus the global prototypes once they exist."""
        messages = list(super().configure_train(server_round, arrays, config, grid))
        if self.secure_prototypes is not None:
            assert self.num_classes is not None
            self.secure_prototypes.begin(server_round)
        if self.uses_prototypes and self.global_prototypes is not None:
            g = self.global_prototypes
            record = prototype_record(
                PrototypeSet(classes=g.classes, vectors=g.codes), FEDHAP_BROADCAST
            )
            for msg in messages:
                msg.content[K.PROTOTYPES] = record
        return messages

    def screen_extras(self, msg: Message) -> tuple[str | None, object]:
        """Take the prototype upload (or its encrypted sums) out and check it."""
        if not self.uses_prototypes:
            return None, None
        if self.num_classes is None:
            raise RuntimeError("set_label_space() must be called before training")
        if self.secure_prototypes is not None:
            return self._screen_secure(msg)
        return take_prototype_upload(
            msg, FEDHAP_UPLOAD, num_classes=self.num_classes, dim=self.bits
        )

    def keep_extras(self, node_id: int, extras: object) -> None:
        """Keep a kept reply's upload (or encrypted sums) for Eq. (6)."""
        if isinstance(extras, ClassPrototypes):
            self._uploads[node_id] = extras
        elif isinstance(extras, EncryptedUpdate):
            self._secure_uploads[node_id] = extras

    def _screen_secure(self, msg: Message) -> tuple[str | None, object]:
        """Parse and check the encrypted prototype sums (nothing is added yet).

        The sums are added only in :meth:`aggregate_train`, for the kept replies, so
        the prototype aggregate and the model aggregate have the same clients.
        """
        assert self.secure_prototypes is not None
        record = msg.content.pop(K.DPHE_PROTOS, None)
        if record is None:
            return f"no '{K.DPHE_PROTOS}' record (encrypted prototypes are on)", None
        node = msg.metadata.src_node_id
        try:
            update = self.secure_prototypes.parse(
                record, self.node_partitions.get(node)
            )
        except ValueError as exc:
            return f"encrypted prototypes refused: {exc}", None
        return None, update

    def _secure_global_prototypes(self, server_round: int) -> GlobalPrototypes | None:
        """Add the kept clients' encrypted sums; decrypt the per-class totals."""
        assert self.secure_prototypes is not None and self.num_classes is not None
        for node in self.kept_nodes:
            if node in self._secure_uploads:
                self.secure_prototypes.add(
                    self.node_partitions[node], self._secure_uploads[node]
                )
        result = self.secure_prototypes.decrypt_sums(server_round)
        if result is None:
            return None
        sums, _, _ = result
        try:
            return prototypes_from_fixed_point(
                sums,
                num_classes=self.num_classes,
                bits=self.bits,
                scale_bits=self.secure_prototypes.params.fixed_point.scale_bits,
                max_holders=self.secure_prototypes.contributors,
            )
        except ValueError as exc:
            log(WARNING, "round %d: prototype sums unusable: %s", server_round, exc)
            return None

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg of the models; Eq. (6) over the kept clients' prototypes."""
        self._uploads = {}
        self._secure_uploads = {}
        arrays, metrics = super().aggregate_train(server_round, replies)
        if not self.uses_prototypes or arrays is None:
            return arrays, metrics
        assert self.num_classes is not None
        if self.secure_prototypes is not None:
            secure = self._secure_global_prototypes(server_round)
            if secure is not None:
                self.global_prototypes = secure
                self.prototype_history[server_round] = {
                    "classes": secure.classes.tolist(),
                    "clients": self.secure_prototypes.contributors,
                }
            return arrays, metrics
        uploads = [self._uploads[n] for n in self.kept_nodes if n in self._uploads]
        if uploads:
            self.global_prototypes = aggregate_prototypes(
                uploads,
                num_classes=self.num_classes,
                bits=self.bits,
                weighting=self.weighting,
            )
            classes = self.global_prototypes.classes.tolist()
            self.prototype_history[server_round] = {
                "classes": classes,
                "clients": len(uploads),
            }
            log(
                INFO,
                "round %d: global prototypes for %d/%d classes from %d clients",
                server_round,
                len(classes),
                self.num_classes,
                len(uploads),
            )
        return arrays, metrics


def fedhap(settings: RunSettings) -> HashingFedHAP:
    """FedHAP (``strategy = "fedhap"``), variant from ``fedhap.variant``."""
    return HashingFedHAP(
        **common_kwargs(settings),
        bits=settings.code_length,
        uses_prototypes=settings.uses_prototypes,
        weighting=settings.prototype_weighting,
        initial_centers=settings.fedhap.initial_prototypes == "centers",
        centers_seed=settings.seed,
    )
