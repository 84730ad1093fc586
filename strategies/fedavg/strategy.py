"""FedAvg and FedProx baselines for federated hashing (Flower's strategies).

Server side they are Flower's ``FedAvg`` / ``FedProx`` plus
:class:`HashingStrategyBase` (reproducible selection/order, reply screening).
Client contract: train the received model on the local database partition with the
DPSH loss (``clients/trainers.py``); under FedProx each client MUST add
(mu/2)*||w - w_global||^2, with mu sent as ``proximal-mu`` in the ConfigRecord.
Federated evaluation is off (``fraction_evaluate=0``): retrieval is evaluated by the
server (``server/evaluation.py``) from codes the clients publish.
"""

from __future__ import annotations

from flwr.serverapp.strategy import FedAvg, FedProx

from settings.run_settings import RunSettings
from strategies.base import HashingStrategyBase


class HashingFedAvg(HashingStrategyBase, FedAvg):
    """Flower FedAvg with partition-ordered, screened aggregation."""


class HashingFedProx(HashingStrategyBase, FedProx):
    """Flower FedProx with partition-ordered, screened aggregation."""


def common_kwargs(settings: RunSettings) -> dict:
    """Flower FedAvg arguments shared by every strategy of this app."""
    return {
        "fraction_train": settings.fraction_train,
        "fraction_evaluate": 0.0,
        "min_train_nodes": settings.min_train_nodes,
        "min_available_nodes": settings.min_train_nodes,
        "sampling_seed": settings.seed,
    }


def fedavg(settings: RunSettings) -> HashingFedAvg:
    """FedAvg baseline (``strategy = "fedavg"``)."""
    return HashingFedAvg(**common_kwargs(settings))


def fedprox(settings: RunSettings) -> HashingFedProx:
    """FedProx baseline (``strategy = "fedprox"``), mu from ``fedprox.mu``."""
    return HashingFedProx(**common_kwargs(settings), proximal_mu=settings.fedprox.mu)
