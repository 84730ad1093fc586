"""DPHE secure aggregation as components of the FedAvg-family strategies.

The strategy (the DPHE paper's *aggregator*) holds components built from the
aggregator's key bundle -- the Paillier public key and the user-aggregator
permutations, never the secret key nor the user-shared permutation -- and a
keyholder handle (:class:`crypto.KeyholderLike`: an in-process ``Keyholder`` in
simulation, a ``RemoteKeyholder`` HTTP client in deployment).

* :class:`SecureSum` sums one kind of encrypted vector per round (parse, check,
  add, then have the keyholder decrypt the aggregate only).
* :class:`SecureAggregation` uses it for the model: each reply's ``dphe`` record is
  taken out and added in :meth:`SecureAggregation.screen`; :meth:`aggregate`
  refuses aggregates of fewer than 3 contributors (no update that round) and
  otherwise adds the decrypted weighted average update to the global model. The
  weights (``num-examples`` or 1) are encrypted inside the update; the server learns
  only their total.

A bad reply (missing record, malformed bytes, another key, bad block ids, ...) is
refused with the reason; the strategy logs it naming the client and goes on.

Client contract: reply with one ``dphe`` ArrayRecord (``settings/dphe_setup.py``)
and one MetricRecord (without ``num-examples``), and no ``arrays`` record.
"""

from __future__ import annotations

from collections.abc import Sequence
from logging import INFO, WARNING

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord
from flwr.common.logger import log

from crypto import (
    AggregateRefused,
    AggregatorBundle,
    DPHEAggregator,
    DPHEParams,
    EncryptedUpdate,
    KeyholderLike,
    decode_average,
)
from hashing.update_sparsity import ArrayLayout, flatten_arrays, unflatten_arrays
from settings import keys as K
from settings.dphe_setup import dphe_params, read_dphe_record
from settings.run_settings import DPHE_MIN_CONTRIBUTORS, RunSettings


class SecureSum:
    """One encrypted sum per round of vectors of a fixed dimension.

    Parameters
    ----------
    bundle : AggregatorBundle
        Public key and every client's user-aggregator permutation seed.
    keyholder : KeyholderLike
        Decrypts aggregated sums only (``decrypt_aggregate``).
    settings : RunSettings
        Encoding parameters (packing, fixed point, capacity, padding).
    uniform : bool
        Every client's weight is 1 (prototype sums) instead of the run's weighting.
    what : str
        Name in log lines (``model update``, ``prototype sums``).
    """

    def __init__(
        self,
        bundle: AggregatorBundle,
        keyholder: KeyholderLike,
        settings: RunSettings,
        *,
        uniform: bool = False,
        what: str = "model update",
    ) -> None:
        self.bundle = bundle
        self.keyholder = keyholder
        self.settings = settings
        self.uniform = uniform
        self.what = what
        self.min_contributors = DPHE_MIN_CONTRIBUTORS
        self.params: DPHEParams | None = None
        self._aggregator: DPHEAggregator | None = None

    def begin(self, dimension: int) -> None:
        """Start a new (empty) sum of ``dimension``-long vectors."""
        if self.params is None or self.params.dimension != dimension:
            self.params = dphe_params(
                self.settings,
                dimension=dimension,
                key_bits=self.bundle.key_bits,
                uniform=self.uniform,
            )
        self._aggregator = DPHEAggregator(self.bundle, self.params)

    @property
    def contributors(self) -> int:
        """Clients added to the current sum."""
        return 0 if self._aggregator is None else self._aggregator.contributors

    def parse(self, record: object, partition_id: int | None) -> EncryptedUpdate:
        """Parse and check a record against the current sum (nothing is added).

        Raises
        ------
        ValueError
            Naming what is wrong with the record.
        """
        if self._aggregator is None:
            raise RuntimeError("begin() must be called before adding updates")
        if partition_id is None:
            raise ValueError("unknown partition id (no DPHE permutation for this node)")
        update = read_dphe_record(record, key_bits=self.bundle.key_bits)
        self._aggregator.check(partition_id, update)
        return update

    def add(self, partition_id: int, update: EncryptedUpdate) -> None:
        """Add a parsed update (ValueError, state unchanged, if it is refused)."""
        assert self._aggregator is not None
        self._aggregator.add(partition_id, update)

    def decrypt_average(self, server_round: int) -> tuple[np.ndarray, int, int] | None:
        """Decrypt the average vector; return it, the total weight, the blocks.

        ``None`` (with a log line) when fewer than 3 clients contributed or the
        keyholder refused the aggregate.
        """
        assert self._aggregator is not None and self.params is not None
        contributors = self._aggregator.contributors
        if contributors < self.min_contributors:
            log(
                WARNING,
                "round %d: DPHE %s aggregate has %d contributor(s), fewer than %d: "
                "not decrypted (the average would reveal individual values)",
                server_round,
                self.what,
                contributors,
                self.min_contributors,
            )
            return None
        encrypted_sum = self._aggregator.result()
        try:
            sums = self.keyholder.decrypt_aggregate(encrypted_sum, contributors)
        except AggregateRefused as exc:
            log(
                WARNING,
                "round %d: keyholder refused the %s aggregate: %s",
                server_round,
                self.what,
                exc,
            )
            return None
        average, total_weight = decode_average(np.asarray(sums), self.params)
        log(
            INFO,
            "round %d: DPHE %s aggregate of %d clients, %d encrypted blocks "
            "decrypted by the keyholder",
            server_round,
            self.what,
            contributors,
            len(encrypted_sum.block_ids),
        )
        return average, int(total_weight), len(encrypted_sum.block_ids)


class SecureAggregation:
    """The aggregator's side of DPHE for the model, one model layout per run."""

    def __init__(
        self,
        bundle: AggregatorBundle,
        keyholder: KeyholderLike,
        settings: RunSettings,
    ) -> None:
        self.sum = SecureSum(bundle, keyholder, settings)
        self._global: np.ndarray | None = None
        self._layout: ArrayLayout | None = None
        self.history: dict[int, dict[str, float]] = {}

    @property
    def keyholder(self) -> KeyholderLike:
        """The keyholder handle (never the key itself)."""
        return self.sum.keyholder

    @keyholder.setter
    def keyholder(self, value: KeyholderLike) -> None:
        self.sum.keyholder = value

    def begin_round(self, arrays: ArrayRecord) -> None:
        """Start a new encrypted sum for the model ``arrays`` sent this round."""
        vector, layout = flatten_arrays({n: a.numpy() for n, a in arrays.items()})
        self._global, self._layout = vector, layout
        self.sum.begin(vector.size)

    def screen(self, msg: Message, partition_id: int | None) -> str | None:
        """Take the ``dphe`` record out of ``msg`` and add it to the sum.

        Returns the reason the reply is unusable, or ``None`` once it is added.
        """
        content = msg.content
        record = content.pop(K.DPHE, None)
        if record is None:
            return f"no '{K.DPHE}' record (secure aggregation is on)"
        if len(content.array_records) or len(content.metric_records) != 1:
            return (
                f"expected only the '{K.DPHE}' record and one MetricRecord, got "
                f"{len(content.array_records)} other ArrayRecord(s) and "
                f"{len(content.metric_records)} MetricRecord(s)"
            )
        try:
            update = self.sum.parse(record, partition_id)
            self.sum.add(partition_id, update)  # type: ignore[arg-type]
        except ValueError as exc:
            return f"DPHE update refused: {exc}"
        return None

    def aggregate(
        self, server_round: int, kept: Sequence[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Decrypt (via the keyholder) and apply the average update.

        Returns ``(None, None)`` -- no update this round -- when fewer than 3
        clients contributed or the keyholder refuses the aggregate.
        """
        assert self._global is not None and self._layout is not None
        result = self.sum.decrypt_average(server_round)
        if result is None:
            return None, None
        average, total_weight, blocks = result
        arrays = unflatten_arrays(self._global + average, self._layout)
        self.history[server_round] = {
            "contributors": self.sum.contributors,
            "blocks": blocks,
            "total-weight": float(total_weight),
        }
        record = ArrayRecord(
            {name: Array(np.ascontiguousarray(v)) for name, v in arrays.items()}
        )
        return record, mean_metrics(kept)


def mean_metrics(replies: Sequence[Message]) -> MetricRecord:
    """Unweighted mean of each numeric metric over the replies (weights are secret)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for msg in replies:
        for record in msg.content.metric_records.values():
            for key, value in record.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    sums[key] = sums.get(key, 0.0) + float(value)
                    counts[key] = counts.get(key, 0) + 1
    return MetricRecord({k: sums[k] / counts[k] for k in sums})
