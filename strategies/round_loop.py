"""Flower's round loop, able to begin at a later round (a resumed run).

Flower 1.42's ``Strategy.start`` always begins at round 1 and has no hook to start
later; :meth:`ResumableLoop.start` is the same calls in the same order, with a
``first_round``. The one copy of Flower's loop in this repository.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result


class ResumableLoop:
    """``start(..., first_round=r)``: Flower's loop from round ``r``."""

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
        """Flower's ``Strategy.start`` loop, able to begin at a later round.

        The same calls in the same order as Flower 1.42's ``Strategy.start``
        (configure/aggregate train, configure/aggregate evaluate, ``evaluate_fn``),
        which always begins at round 1. ``first_round > 1`` continues a run from a
        checkpoint: ``initial_arrays`` are then the arrays after round
        ``first_round - 1`` and the round-0 evaluation is not repeated.
        """
        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        result = Result()
        result.arrays = initial_arrays
        arrays = initial_arrays
        if evaluate_fn and first_round == 1:
            res = evaluate_fn(0, initial_arrays)
            if res is not None:
                result.evaluate_metrics_serverapp[0] = res
        for current_round in range(first_round, num_rounds + 1):
            log(INFO, "[ROUND %s/%s]", current_round, num_rounds)
            replies = grid.send_and_receive(
                messages=self.configure_train(  # type: ignore[attr-defined]
                    current_round, arrays, train_config, grid
                ),
                timeout=timeout,
            )
            agg_arrays, agg_metrics = self.aggregate_train(  # type: ignore[attr-defined]
                current_round, replies
            )
            if agg_arrays is not None:
                result.arrays = arrays = agg_arrays
            if agg_metrics is not None:
                result.train_metrics_clientapp[current_round] = agg_metrics
            replies = grid.send_and_receive(
                messages=self.configure_evaluate(  # type: ignore[attr-defined]
                    current_round, arrays, evaluate_config, grid
                ),
                timeout=timeout,
            )
            agg_eval = self.aggregate_evaluate(  # type: ignore[attr-defined]
                current_round, replies
            )
            if agg_eval is not None:
                result.evaluate_metrics_clientapp[current_round] = agg_eval
            if evaluate_fn:
                res = evaluate_fn(current_round, arrays)
                if res is not None:
                    result.evaluate_metrics_serverapp[current_round] = res
        return result
