"""What each method is, for everyone: its name and its capabilities.

The one table of method names. Both apps, the settings checks and the data loading
ask a method what it does (trains a model, fuses modalities, can resume, ...) here
instead of testing its name. It imports no torch and no Flower, so a config is
checked (``python -m settings check``) without them.

Each method then has two halves, each app importing only its own:

* the server side (strategy, evaluator, results table, protocol, optional run):
  :mod:`strategies.server_side`, imported by the ServerApp;
* the client side (trainer, query actions): :mod:`strategies.client_side`, imported
  by the ClientApp, which loads only the side of the run's method.

Adding a method: a folder ``strategies/<method>/`` (config, strategy, trainer), an
entry here, one in each side's table, and its config section in
:class:`settings.run_settings.RunSettings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Settings = Any
"""A :class:`settings.run_settings.RunSettings` (not imported: it imports this)."""


def _yes(settings: Settings) -> bool:
    return True


def _no(settings: Settings) -> bool:
    return False


def _resumable(settings: Settings) -> str:
    return ""


@dataclass(frozen=True)
class MethodInfo:
    """One method's name and capabilities (no code of either app)."""

    name: str
    trains: bool = True
    """It trains a hashing network over rounds (and publishes its codes); ``False``
    for a one-shot federated analytics release (DPcode)."""
    multimodal: bool = False
    """It fuses every modality of the data (inputs as ``{modality: tensor}``)."""
    baseline_losses: bool = False
    """It trains with the run's ``loss`` key, baselines (HashNet, DCH, GreedyHash)
    and the elastic-net penalty included (the FedAvg / FedProx loop)."""
    per_sample_objective: bool = False
    """Its own objective is a sum of per-sample terms (DP-SGD bounds a record's
    influence whatever ``loss`` says)."""
    whole_partition: str = ""
    """Why it needs every row of each partition exactly once (``train-size`` = 0,
    ``partition-repeats`` = 1); empty when it does not."""
    query_actions: tuple[str, ...] = ()
    """Its own ClientApp query actions (``query.<action>`` messages)."""
    global_model: Callable[[Settings], bool] = _yes
    """Whether a global model travels between server and clients in this run."""
    prototypes: Callable[[Settings], bool] = _no
    """Whether the clients publish class prototypes in this run."""
    flippable_prototypes: bool = False
    """Its prototypes are binary codes that prototype flipping and DPHE's encrypted
    per-class sums apply to (FedHAP); PFMH's are real vectors, published as is."""
    resume_refusal: Callable[[Settings], str] = _resumable
    """Why this run cannot be resumed from a checkpoint (empty: it can)."""


def _fedhap_prototypes(settings: Settings) -> bool:
    return bool(
        settings.fedhap.uses_discriminator or settings.fedhap.uses_global_triplet
    )


def _pfmh_personalized(settings: Settings) -> bool:
    return bool(settings.pfmh.personalized)


def _pfmh_global_model(settings: Settings) -> bool:
    return not _pfmh_personalized(settings)


def _one_shot(settings: Settings) -> str:
    return "DPcode is a one-shot release with no rounds"


def _pfmh_resume(settings: Settings) -> str:
    if not _pfmh_personalized(settings):
        return ""
    return (
        "personalized PFMH keeps each client's model in the client's memory "
        "(context.state), which a new run does not have; resuming would silently "
        "restart those models. Accepted: pfmh.mode='fedavg', or rerun"
    )


METHODS: dict[str, MethodInfo] = {
    m.name: m
    for m in (
        MethodInfo("fedavg", baseline_losses=True),
        MethodInfo("fedprox", baseline_losses=True),
        MethodInfo(
            "fedhap",
            per_sample_objective=True,
            prototypes=_fedhap_prototypes,
            flippable_prototypes=True,
        ),
        MethodInfo(
            "pfmh",
            multimodal=True,
            whole_partition="PFMH splits each partition into local queries and a "
            "local database of its own and ranks each client's own partition",
            query_actions=("pfmh_eval",),
            global_model=_pfmh_global_model,
            prototypes=_yes,
            resume_refusal=_pfmh_resume,
        ),
        MethodInfo(
            "dpcode",
            trains=False,
            whole_partition="DPcode trains nothing and counts every held row once",
            query_actions=("dpcode",),
            global_model=_no,
            resume_refusal=_one_shot,
        ),
    )
}

NAMES: tuple[str, ...] = tuple(METHODS)
"""Names accepted by the ``strategy`` config key, in the table's order."""


def method_info(name: str) -> MethodInfo:
    """Return the method called ``name`` (``KeyError`` if there is none)."""
    return METHODS[name]


def query_actions() -> dict[str, str]:
    """``{query action: the method it belongs to}`` over every method."""
    owner: dict[str, str] = {}
    for m in METHODS.values():
        for action in m.query_actions:
            if owner.setdefault(action, m.name) != m.name:
                raise ValueError(f"query action {action!r} is registered twice")
    return owner
