"""Build the server's DPHE component: aggregator bundle + keyholder handle.

Everything is checked before round 1: the bundles exist and parse, the packing
fits the key for this model's size, and every discovered partition has a
user-aggregator permutation in the aggregator's bundle.

The in-process keyholder (secret key inside the ServerApp process) is built only in
simulation (``simulation=True``, from the ServerApp's grid); it is given the run's
stream parameters (:func:`strategies.dphe.setup.stream_params`) to pin. A keyholder
service pins its own (``--streams``); the server checks that its streams are those
it needs through ``/v1/health``.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING
from pathlib import Path

from flwr.common.logger import log

from crypto import (
    STREAM_MODEL,
    STREAM_PROTOTYPES,
    AggregateRefused,
    Keyholder,
    KeyholderLike,
    RemoteKeyholder,
)
from settings.run_settings import ConfigError
from strategies.dphe.aggregation import SecureAggregation, SecureSum
from strategies.dphe.config import DPHEConfig, DPHERun
from strategies.dphe.setup import load_server_bundles, stream_params

_key = DPHEConfig.key  # the config key of a dphe field, e.g. dphe.key-dir


def build_secure_aggregation(
    run: DPHERun,
    *,
    dimension: int,
    partition_ids: Iterable[int],
    simulation: bool,
    run_id: int,
) -> SecureAggregation:
    """Build the strategy's DPHE component for a model of ``dimension`` values."""
    return build_secure_components(
        run,
        dimension=dimension,
        partition_ids=partition_ids,
        num_classes=0,
        simulation=simulation,
        run_id=run_id,
    )[0]


def build_secure_components(
    run: DPHERun,
    *,
    dimension: int,
    partition_ids: Iterable[int],
    num_classes: int,
    simulation: bool,
    run_id: int,
) -> tuple[SecureAggregation, SecureSum | None]:
    """Build the model's DPHE component and, with ``dphe.prototypes``, FedHAP's.

    ``run``: what DPHE reads of the run's settings (``settings.dphe_run``). Both
    share one keyholder handle (and its session id). The keyholder's session is
    bound to ``run_id`` (the Flower run; :meth:`crypto.Keyholder.bind_run`) and the
    proof goes to the clients, which check it against their own run id.

    Raises
    ------
    ConfigError
        Missing/invalid bundles, a packing that does not fit the key, a partition
        without a permutation in the aggregator's bundle, an empty
        ``dphe.keyholder-url`` outside simulation, a keyholder service whose
        pinned streams are not those of this run, or one whose session an earlier
        run already used.
    """
    dphe = run.config
    aggregator, keyholder_bundle = load_server_bundles(dphe, simulation=simulation)
    streams = stream_params(
        run,
        model_dimension=dimension,
        num_classes=num_classes,
        key_bits=aggregator.key_bits,
    )
    params = streams[STREAM_MODEL]
    known = set(aggregator.client_seeds)
    missing = sorted(set(partition_ids) - known)
    if missing:
        raise ConfigError(
            f"{_key('key_dir')}={dphe.key_dir!r}: the aggregator bundle has "
            f"permutations for {len(known)} clients but partitions {missing[:5]} "
            "take part; "
            "regenerate the keys with --clients >= the number of partitions"
        )
    keyholder: KeyholderLike
    if keyholder_bundle is None:
        remote = _remote_keyholder(dphe, aggregator.auth_token)
        _check_remote_streams(remote, streams)
        _check_fresh_session(remote, dphe.keyholder_url)
        keyholder = remote
        where = f"keyholder service {dphe.keyholder_url}"
    else:
        keyholder = Keyholder(keyholder_bundle, streams)
        where = "in-process keyholder (simulation)"
    if aggregator.test_key:
        log(
            WARNING,
            "DPHE uses a %d-bit TEST key: not secure, for tests only",
            aggregator.key_bits,
        )
    log(
        INFO,
        "DPHE secure aggregation: %d-bit Paillier, %d values in %d blocks of %d "
        "slots (%d bits each), %s",
        aggregator.key_bits,
        dimension,
        params.num_blocks,
        params.packing,
        params.slot_bits,
        where,
    )
    try:
        proof = keyholder.bind_run(int(run_id))
    except (AggregateRefused, RuntimeError) as exc:
        raise ConfigError(
            f"the DPHE keyholder ({where}) does not serve run {run_id}: {exc}; a "
            "keyholder session serves one run: restart the keyholder service"
        ) from None
    model = SecureAggregation(aggregator, keyholder, params, session_proof=proof)
    if not dphe.prototypes:
        return model, None
    prototypes = SecureSum(
        aggregator,
        keyholder,
        streams[STREAM_PROTOTYPES],
        stream=STREAM_PROTOTYPES,
        what="prototype sums",
        session=model.session,
    )
    return model, prototypes


def _check_fresh_session(remote: RemoteKeyholder, url: str) -> None:
    """Refuse to start on a keyholder session that an earlier run already used.

    One keyholder session serves one run: each (stream, round) is decrypted at most
    once and rounds must increase, so a second run would have every aggregate
    refused as a replay. Said here, before round 1, instead of round after round.
    """
    try:
        used = remote.decrypted_rounds()
    except RuntimeError as exc:
        raise ConfigError(f"{_key('keyholder_url')}: {exc}") from None
    if used:
        shown = ", ".join(
            f"{stream} up to round {r}" for stream, r in sorted(used.items())
        )
        raise ConfigError(
            f"{_key('keyholder_url')}={url!r}: this keyholder session already "
            f"decrypted {shown} for an earlier run; a session serves one run (it "
            "decrypts each round once): restart the keyholder service before a new "
            "run (docker compose restart keyholder)"
        )


def _check_remote_streams(remote: RemoteKeyholder, streams: dict) -> None:
    """Refuse to start when the service does not pin every stream this run uses."""
    try:
        served = remote.health().get("streams")
    except RuntimeError as exc:
        raise ConfigError(f"{_key('keyholder_url')}: {exc}") from None
    if isinstance(served, list) and not set(streams) <= set(served):
        raise ConfigError(
            f"{_key('keyholder_url')}: the keyholder service pins the streams "
            f"{sorted(served)}, this run needs {sorted(streams)}: write its "
            "--streams file from this run config "
            "(python -m strategies.dphe.keyholder_streams)"
        )


def _remote_keyholder(dphe: DPHEConfig, auth_token: str) -> RemoteKeyholder:
    """Client of the keyholder service, verifying TLS with ``dphe.keyholder-ca``.

    Raises
    ------
    ConfigError
        A CA file that does not exist, or a URL the client refuses (plain http
        off loopback), naming the key.
    """
    ca_file = dphe.keyholder_ca or None
    if ca_file is not None and not Path(ca_file).is_file():
        raise ConfigError(
            f"{_key('keyholder_ca')}={ca_file!r} does not exist on the ServerApp's "
            "machine: give the CA certificate (PEM) that signed the keyholder's "
            "certificate (deploy/credentials/serverapp/ca.crt)"
        )
    try:
        return RemoteKeyholder(dphe.keyholder_url, auth_token, ca_file=ca_file)
    except ValueError as exc:
        raise ConfigError(f"{_key('keyholder_url')}: {exc}") from None
