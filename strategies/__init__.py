"""Server strategies for federated hashing, registered by name."""

from strategies.registry import build_strategy, registered_strategies

# Importing the modules registers their strategies.
from strategies.fedavg import strategy as _fedavg  # noqa: F401,E402  isort: skip
from strategies.fedhap import strategy as _fedhap  # noqa: F401,E402  isort: skip
from strategies.pfmh import strategy as _pfmh  # noqa: F401,E402  isort: skip

__all__ = ["build_strategy", "registered_strategies"]
