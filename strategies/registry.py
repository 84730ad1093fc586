"""Name -> strategy factory registry (the ``strategy`` config key).

A factory takes the validated :class:`RunSettings` and returns a Flower
``Strategy``. New strategies register with ``@register("name")`` in their own module
and are imported by ``strategies/__init__.py``; the ServerApp never changes.
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.serverapp.strategy import Strategy

from settings import keys as K
from settings.run_settings import ConfigError, RunSettings

StrategyFactory = Callable[[RunSettings], Strategy]
_REGISTRY: dict[str, StrategyFactory] = {}


def register(name: str) -> Callable[[StrategyFactory], StrategyFactory]:
    """Register a strategy factory under ``name``."""

    def decorator(factory: StrategyFactory) -> StrategyFactory:
        if name in _REGISTRY:
            raise ValueError(f"strategy {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return decorator


def registered_strategies() -> tuple[str, ...]:
    """Names accepted by the ``strategy`` config key."""
    return tuple(sorted(_REGISTRY))


def build_strategy(settings: RunSettings) -> Strategy:
    """Build the strategy named by ``settings.strategy``.

    Raises
    ------
    ConfigError
        If no strategy of that name is registered.
    """
    try:
        factory = _REGISTRY[settings.strategy]
    except KeyError:
        raise ConfigError(
            f"{K.STRATEGY}={settings.strategy!r}: accepted are "
            f"{', '.join(registered_strategies())}"
        ) from None
    return factory(settings)
