"""FedProx's config section ``[tool.flwr.app.config.fedprox]``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from settings.schema import Section, option


@dataclass(frozen=True)
class FedProxConfig(Section):
    """FedProx (``strategy = "fedprox"``): Flower's FedProx with the hashing loss."""

    NAME: ClassVar[str] = "fedprox"
    TITLE: ClassVar[str] = 'FedProx (strategy = "fedprox")'

    mu: float = option(0.01, "proximal term weight mu", low=0)
