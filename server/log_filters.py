"""Our ServerApp's log policy: a config error is one ERROR line, not a traceback.

Flower logs an exception that ends a ServerApp with its full traceback ("ServerApp
raised an exception" in a deployment, "Simulation raised an exception" in
simulation) and then marks the run failed. For a
:class:`~settings.run_settings.ConfigError` -- a bad value the user can fix, whose
message already names the key, the value and what is accepted -- the traceback is
noise: this filter, installed on Flower's logger by ``server/server_app.py``,
rewrites that record into ``run config: <message>`` without the traceback. So does
:class:`~server.discovery.NodesRefusedError` (too few nodes accept the run, e.g.
their privacy policies refuse it): ``nodes refused the run: <counted reasons>``. The
run still ends as failed. Any other exception keeps its traceback.
"""

from __future__ import annotations

import logging
import os

from server.discovery import NodesRefusedError
from settings.run_settings import ConfigError

FLWR_LOGGER = "flwr"
VERBOSE_ENV = "FEDHASH_VERBOSE"
"""Set (``make run VERBOSE=1`` does) to keep the records :class:`Unactionable` drops."""

UNACTIONABLE = (
    # our strategies evaluate on the server (retrieval needs the query set there),
    # so fraction-evaluate = 0 is by design, not a user's mistake
    "fraction_evaluate is set to 0.0",
)


class ConfigErrorOneLine(logging.Filter):
    """Turn a record carrying a :class:`ConfigError` into one line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record in place when its exception is a ConfigError."""
        error = record.exc_info[1] if record.exc_info else None
        label = _one_line_label(error)
        if label:
            record.msg = f"{label}: %s"
            record.args = (str(error),)
            record.exc_info = None
            record.exc_text = None
        return True


def _one_line_label(error: BaseException | None) -> str:
    """Return the prefix of an exception that ends a run as one line, or ``""``."""
    if isinstance(error, ConfigError):
        return "run config"
    if isinstance(error, NodesRefusedError):
        return "nodes refused the run"
    return ""


class Unactionable(logging.Filter):
    """Drop Flower warnings about our own design choices (:data:`UNACTIONABLE`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep the record unless its message starts with a known unactionable text."""
        message = record.getMessage()
        return not any(message.startswith(text) for text in UNACTIONABLE)


def install() -> None:
    """Add the filters to Flower's logger once (idempotent)."""
    logger = logging.getLogger(FLWR_LOGGER)
    if not any(isinstance(f, ConfigErrorOneLine) for f in logger.filters):
        logger.addFilter(ConfigErrorOneLine())
    verbose = os.environ.get(VERBOSE_ENV, "") not in ("", "0")
    if not verbose and not any(isinstance(f, Unactionable) for f in logger.filters):
        logger.addFilter(Unactionable())
