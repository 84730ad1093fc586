"""Write the keyholder's pinned stream parameters from a run config.

``python -m strategies.dphe.keyholder_streams --run-config conf/deploy-fedhap-dphe.toml
--key-bits 2048 --out keyholder-streams.json`` builds the run's model (as the
ServerApp does: same dataset, model and discriminator) to learn its size, derives
every DPHE stream's :class:`crypto.DPHEParams`
(:func:`strategies.dphe.setup.stream_params`) and writes them for
``python -m crypto.keyholder_service --streams FILE``. The keyholder then never
takes parameters from the aggregator: a request whose parameters differ is refused.

``--run-config`` holds ``key = value`` lines like ``flwr run --run-config``; keys it
does not set keep the defaults of ``[tool.flwr.app.config]``. ``--set key=value``
(repeatable, TOML values) overrides single keys, e.g. the smaller model of a test.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

from crypto import DPHEParams
from crypto.keyholder import write_streams_file
from settings.check import parse_run_config
from settings.run_settings import ConfigError, RunSettings
from strategies.dphe.setup import stream_params


def run_streams(config: Mapping[str, Any], *, key_bits: int) -> dict[str, DPHEParams]:
    """Stream parameters of the run described by ``config`` (flat run config).

    Raises
    ------
    ConfigError
        If the config is invalid or does not use DPHE.
    """
    # torch and the datasets: lazily
    from server.experiment import prepare_data
    from strategies.server_side import initial_arrays, server_side

    settings = RunSettings.from_config(config)
    if settings.secure_aggregation != "dphe":
        raise ConfigError('the run config does not set secure-aggregation = "dphe"')
    side = server_side(settings.strategy)
    data = prepare_data(settings)
    model = side.build_model(settings, data.input_shape, data.num_classes)
    state = initial_arrays(side, settings, model, data.num_classes)
    return stream_params(
        settings.dphe_run,
        model_dimension=sum(int(v.numel()) for v in state.values()),
        num_classes=data.num_classes,
        key_bits=key_bits,
    )


def read_run_config(path: str | None, overrides: Sequence[str]) -> dict[str, Any]:
    """Flat run config from a TOML file plus ``key=value`` overrides."""
    config: dict[str, Any] = {}
    if path:
        config.update(parse_run_config([path]))  # nested tables flattened
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected key=value")
        config[key.strip()] = tomllib.loads(f"v = {value}")["v"]
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Write the streams file; return the exit status (2 on a bad config)."""
    parser = argparse.ArgumentParser(
        prog="python -m strategies.dphe.keyholder_streams",
        description="Write the DPHE keyholder's pinned stream parameters.",
    )
    parser.add_argument("--run-config", default=None, help="run config TOML")
    parser.add_argument(
        "--set", action="append", default=[], help="key=value override (TOML value)"
    )
    parser.add_argument("--key-bits", type=int, default=2048, help="Paillier size")
    parser.add_argument("--out", required=True, help="streams JSON to write")
    args = parser.parse_args(argv)
    try:
        config = read_run_config(args.run_config, args.set)
        streams = run_streams(config, key_bits=args.key_bits)
    except (OSError, ValueError, tomllib.TOMLDecodeError) as error:
        print(f"keyholder-streams: {error}", file=sys.stderr)
        return 2
    write_streams_file(args.out, streams)
    for name, params in streams.items():
        print(
            f"{name}: dimension {params.dimension}, {params.num_blocks} blocks of "
            f"{params.packing}, capacity {params.capacity}, pad {params.pad}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
