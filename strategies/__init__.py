"""Server strategies for federated hashing, registered by name."""

from strategies.registry import build_strategy, registered_strategies

# Importing the modules registers their strategies.
from strategies import fedavg_hashing, fedhap, pfmh  # noqa: F401,E402  isort: skip

__all__ = ["build_strategy", "registered_strategies"]
