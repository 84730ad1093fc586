"""The ServerApp: read the run config, validate it, hand over to the experiment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from server import log_filters
from server.experiment import run_experiment
from settings.faults import FaultsConfig
from settings.run_settings import ConfigError, RunSettings
from settings.runtime import server_in_simulation
from settings.sections import PrivacyConfig
from strategies.server_side import server_side


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
        if settings.seeded_noise and not server_in_simulation(grid):
            raise ConfigError(
                f"{PrivacyConfig.key('noise')}={settings.privacy.noise!r}: seeded "
                "privacy noise is for Flower's simulation engine only (the server "
                "could rebuild every flip and DP-SGD draw); accepted in a "
                "deployment: 'secure'"
            )
        if settings.faults.clients and not server_in_simulation(grid):
            raise ConfigError(
                f"{FaultsConfig.key('clients')}={settings.faults.clients}: fault "
                "injection is for Flower's simulation engine only (deployed clients "
                "ignore it); accepted in a deployment: 0"
            )
        side = server_side(settings.strategy)  # the run's method, looked up once
        simulation = server_in_simulation(grid)
        if side.run is not None:  # its own run (federated analytics)
            side.run(grid, settings, simulation=simulation)
        else:
            run_experiment(grid, settings, simulation=simulation, side=side)

    return app


log_filters.install()  # a ConfigError ends the run as one ERROR line
app = build_server_app()
