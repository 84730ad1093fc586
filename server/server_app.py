"""The ServerApp: read the run config, validate it, hand over to the experiment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from server.experiment import run_experiment
from settings.run_settings import RunSettings


def build_server_app(overrides: Mapping[str, Any] | None = None) -> ServerApp:
    """ServerApp whose run config is ``context.run_config`` updated by ``overrides``.

    ``flwr run`` uses ``app``; tests pass overrides because
    ``flwr.simulation.run_simulation`` has no run-config argument.
    """
    app = ServerApp()
    extra = dict(overrides or {})

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        settings = RunSettings.from_config({**dict(context.run_config), **extra})
        run_experiment(grid, settings)

    return app


app = build_server_app()
