"""The one registry of methods: name -> config section, strategy, client trainer.

Filled explicitly below (no import side effects): adding a method means a folder
``strategies/<method>/`` (config, strategy, trainer), its math under ``hashing/``, an
entry in :data:`METHODS` and its config section in
:class:`settings.run_settings.RunSettings`; the ServerApp and the ClientApp do not
change. ``settings.run_settings.STRATEGIES`` repeats the names so that a config can
be checked without importing torch; a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clients.trainers import Trainer
from server.evaluation import RetrievalEvaluator
from settings.run_settings import ConfigError, RunSettings
from settings.schema import Section
from strategies.dpcode.client import dpcode_reply
from strategies.dpcode.config import DPcodeConfig
from strategies.dpcode.server import run_dpcode
from strategies.fedavg.config import FedProxConfig
from strategies.fedavg.strategy import fedavg, fedprox
from strategies.fedavg.trainer import dpsh_trainer
from strategies.fedhap.config import FedHAPConfig
from strategies.fedhap.strategy import fedhap
from strategies.fedhap.trainer import fedhap_trainer
from strategies.pfmh.config import PFMHConfig
from strategies.pfmh.evaluation import build_pfmh_evaluator, pfmh_protocol, pfmh_table
from strategies.pfmh.strategy import pfmh
from strategies.pfmh.trainer import pfmh_eval_reply, pfmh_trainer
from strategies.protocol import HashingStrategy

StrategyFactory = Callable[[RunSettings], HashingStrategy]
EvaluatorFactory = Callable[..., RetrievalEvaluator]
"""``factory(settings, grid, nodes, queries, model_factory, **metric options)``."""
RunFunction = Callable[..., Any]
"""``run(grid, settings, *, simulation) -> RunResults``."""
QueryHandler = Callable[..., Any]
"""``handler(content, *, settings, data, state, partition_id, device, noise)`` ->
the reply's RecordDict, for one method-specific ``query.<action>`` message."""


def _retrieval_evaluator(
    settings: RunSettings, *args: Any, **kwargs: Any
) -> RetrievalEvaluator:
    return RetrievalEvaluator(*args, **kwargs)


def _same_protocol(settings: RunSettings, text: str) -> str:
    return text


@dataclass(frozen=True)
class Method:
    """One federated hashing method: what the apps need to run it."""

    name: str
    config: type[Section] | None
    """Its config section (``None``: only the generic keys)."""
    strategy: StrategyFactory | None
    """Builds the server strategy from the validated settings (``None``: the
    method trains nothing and has its own ``run``)."""
    trainer: Trainer | None
    """The client's local training for one ``train`` message."""
    queries: Mapping[str, QueryHandler] = field(default_factory=dict)
    """Its own ClientApp query actions (``@app.query(action)``), if any."""
    evaluator: EvaluatorFactory = field(default=_retrieval_evaluator)
    """Builds the server's retrieval evaluator (default: the union protocol)."""
    describe_protocol: Callable[[RunSettings, str], str] = field(
        default=_same_protocol
    )
    """Extends the evaluation protocol's description (results files, logs)."""
    results_table: Callable[[list[dict[str, Any]]], str] | None = None
    """Its own final results table (default: mAP and precision@K per round)."""
    multimodal: bool = False
    """Its server keeps every modality of the query set (PFMH)."""
    model_name: str = ""
    """The model's name in config.json (default: resolved from ``model``)."""
    run: RunFunction | None = None
    """Its own server run instead of the training loop (federated analytics)."""


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("fedavg", None, fedavg, dpsh_trainer),
        Method("fedprox", FedProxConfig, fedprox, dpsh_trainer),
        Method("fedhap", FedHAPConfig, fedhap, fedhap_trainer),
        Method(
            "pfmh",
            PFMHConfig,
            pfmh,
            pfmh_trainer,
            queries={"pfmh_eval": pfmh_eval_reply},
            evaluator=build_pfmh_evaluator,
            describe_protocol=pfmh_protocol,
            results_table=pfmh_table,
            multimodal=True,
            model_name="pfmh-multimodal",
        ),
        Method(
            "dpcode",
            DPcodeConfig,
            None,
            None,
            queries={"dpcode": dpcode_reply},
            run=run_dpcode,
        ),
    )
}


def query_actions() -> dict[str, QueryHandler]:
    """Every method's own query actions (an action name belongs to one method)."""
    actions: dict[str, QueryHandler] = {}
    for m in METHODS.values():
        for action, handler in m.queries.items():
            if actions.setdefault(action, handler) is not handler:
                raise ValueError(f"query action {action!r} is registered twice")
    return actions


def registered_strategies() -> tuple[str, ...]:
    """Names accepted by the ``strategy`` config key."""
    return tuple(sorted(METHODS))


def method(settings: RunSettings) -> Method:
    """Return the method named by ``settings.strategy`` (``ConfigError`` if unknown)."""
    try:
        return METHODS[settings.strategy]
    except KeyError:
        raise ConfigError(
            f"{RunSettings.key('strategy')}={settings.strategy!r}: accepted are "
            f"{', '.join(registered_strategies())}"
        ) from None


def build_strategy(settings: RunSettings) -> HashingStrategy:
    """Build the server strategy of the run's method.

    Raises
    ------
    TypeError
        If it does not implement :class:`strategies.protocol.HashingStrategy`.
    """
    factory = method(settings).strategy
    if factory is None:
        raise ValueError(f"strategy {settings.strategy!r} trains nothing")
    strategy = factory(settings)
    if not isinstance(strategy, HashingStrategy):
        raise TypeError(
            f"strategy {settings.strategy!r} ({type(strategy).__name__}) does not "
            "implement strategies.protocol.HashingStrategy"
        )
    return strategy
