"""The server half of every method: strategy, evaluator, results, protocol, run.

The ServerApp looks the run's method up here once (:func:`server_side`) and hands it
down to the experiment; no client trainer is imported (their half is
:mod:`strategies.client_side`). Names and capabilities are
:mod:`strategies.catalog`'s; a test keeps this table's names equal to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from server.evaluation import RetrievalEvaluator
from settings.run_model import build_run_model
from settings.run_settings import ConfigError, RunSettings
from strategies.catalog import METHODS as CATALOG
from strategies.catalog import MethodInfo
from strategies.dpcode.server import run_dpcode
from strategies.fedavg.strategy import fedavg, fedprox
from strategies.fedhap.model import fedhap_initial_state
from strategies.fedhap.strategy import fedhap
from strategies.pfmh.evaluation import build_pfmh_evaluator, pfmh_protocol, pfmh_table
from strategies.pfmh.model import build_pfmh_model, pfmh_initial_state
from strategies.pfmh.strategy import pfmh
from strategies.protocol import HashingStrategy, RunContext

StrategyFactory = Callable[[RunSettings], HashingStrategy]
EvaluatorFactory = Callable[..., RetrievalEvaluator]
"""``factory(settings, grid, nodes, queries, model_factory, **metric options)``
(:class:`server.evaluation.RetrievalEvaluator`'s arguments after ``settings``)."""
RunFunction = Callable[..., Any]
"""``run(grid, settings, *, simulation) -> RunResults``."""
ModelBuilder = Callable[..., nn.Module]
"""``build(settings, input_shape, num_classes=None)`` -> the run's network."""
InitialState = Callable[[RunSettings, nn.Module, int], Mapping[str, Any]]
"""``initial_state(settings, model, num_classes)`` -> round 0's global arrays."""


@dataclass(frozen=True)
class ServerSide:
    """One method's server half: what the ServerApp needs to run it."""

    info: MethodInfo
    """Its name and capabilities."""
    strategy: StrategyFactory | None
    """Builds the server strategy from the validated settings (``None``: the
    method trains nothing and has its own ``run``)."""
    evaluator: EvaluatorFactory | None = None
    """Builds the server's retrieval evaluator (default: the union protocol,
    :class:`server.evaluation.RetrievalEvaluator`)."""
    describe_protocol: Callable[[RunSettings, str], str] | None = None
    """Extends the evaluation protocol's description (results files, logs)."""
    results_table: Callable[[list[dict[str, Any]]], str] | None = None
    """Its own final results table (default: mAP and precision@K per round)."""
    model_name: str = ""
    """The model's name in config.json (default: resolved from ``model``)."""
    run: RunFunction | None = None
    """Its own server run instead of the training loop (federated analytics)."""
    build_model: ModelBuilder = build_run_model
    """Builds the run's network (default: the single-modal one of ``model``)."""
    initial_state: InitialState | None = None
    """Round 0's global arrays from the built model (default: its state dict)."""

    @property
    def name(self) -> str:
        """The method's name (``strategy``)."""
        return self.info.name


SIDES: dict[str, ServerSide] = {
    s.name: s
    for s in (
        ServerSide(CATALOG["fedavg"], fedavg),
        ServerSide(CATALOG["fedprox"], fedprox),
        ServerSide(CATALOG["fedhap"], fedhap, initial_state=fedhap_initial_state),
        ServerSide(
            CATALOG["pfmh"],
            pfmh,
            evaluator=build_pfmh_evaluator,
            describe_protocol=pfmh_protocol,
            results_table=pfmh_table,
            model_name="pfmh-multimodal",
            build_model=build_pfmh_model,
            initial_state=pfmh_initial_state,
        ),
        ServerSide(CATALOG["dpcode"], None, run=run_dpcode),
    )
}


def registered_strategies() -> tuple[str, ...]:
    """Names of the methods with a server side."""
    return tuple(sorted(SIDES))


def server_side(strategy: str) -> ServerSide:
    """Return the server side of method ``strategy`` (``ConfigError`` if unknown)."""
    try:
        return SIDES[strategy]
    except KeyError:
        raise ConfigError(
            f"{RunSettings.key('strategy')}={strategy!r}: accepted are "
            f"{', '.join(registered_strategies())}"
        ) from None


def initial_arrays(
    side: ServerSide, settings: RunSettings, model: nn.Module, num_classes: int
) -> Mapping[str, Any]:
    """Round 0's global arrays: ``side.initial_state``'s, else the model's state."""
    if side.initial_state is None:
        return dict(model.state_dict())
    return side.initial_state(settings, model, num_classes)


def build_strategy(
    settings: RunSettings,
    side: ServerSide | None = None,
    run: RunContext | None = None,
) -> HashingStrategy:
    """Build the server strategy of the run's method (``side``: already looked up).

    With ``run`` the strategy is also set up for the run
    (:meth:`strategies.protocol.HashingStrategy.prepare`).

    Raises
    ------
    TypeError
        If it does not implement :class:`strategies.protocol.HashingStrategy`.
    """
    factory = (side or server_side(settings.strategy)).strategy
    if factory is None:
        raise ValueError(f"strategy {settings.strategy!r} trains nothing")
    strategy = factory(settings)
    if not isinstance(strategy, HashingStrategy):
        raise TypeError(
            f"strategy {settings.strategy!r} ({type(strategy).__name__}) does not "
            "implement strategies.protocol.HashingStrategy"
        )
    if run is not None:
        strategy.prepare(run)
    return strategy
