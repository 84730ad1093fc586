"""Build the server's DPHE component: aggregator bundle + keyholder handle.

Everything is checked before round 1: the bundles exist and parse, the packing
fits the key for this model's size, and every discovered partition has a
user-aggregator permutation in the aggregator's bundle.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING
from pathlib import Path

from flwr.common.logger import log

from crypto import Keyholder, KeyholderLike, RemoteKeyholder
from settings import keys as K
from settings.dphe_setup import dphe_params, load_server_bundles
from settings.run_settings import ConfigError, RunSettings
from strategies.secure_aggregation import SecureAggregation, SecureSum


def build_secure_aggregation(
    settings: RunSettings, *, dimension: int, partition_ids: Iterable[int]
) -> SecureAggregation:
    """Build the strategy's DPHE component for a model of ``dimension`` values."""
    return build_secure_components(
        settings, dimension=dimension, partition_ids=partition_ids, num_classes=0
    )[0]


def build_secure_components(
    settings: RunSettings,
    *,
    dimension: int,
    partition_ids: Iterable[int],
    num_classes: int,
) -> tuple[SecureAggregation, SecureSum | None]:
    """Build the model's DPHE component and, with ``dphe-prototypes``, FedHAP's.

    Both share one keyholder handle.

    Raises
    ------
    ConfigError
        Missing/invalid bundles, a packing that does not fit the key, or a
        partition without a permutation in the aggregator's bundle.
    """
    aggregator, keyholder_bundle = load_server_bundles(settings)
    params = dphe_params(settings, dimension=dimension, key_bits=aggregator.key_bits)
    known = set(aggregator.client_seeds)
    missing = sorted(set(partition_ids) - known)
    if missing:
        raise ConfigError(
            f"{K.DPHE_KEY_DIR}={settings.dphe_key_dir!r}: the aggregator bundle has "
            f"permutations for {len(known)} clients but partitions {missing[:5]} "
            "take part; "
            "regenerate the keys with --clients >= the number of partitions"
        )
    keyholder: KeyholderLike
    if keyholder_bundle is None:
        keyholder = _remote_keyholder(settings, aggregator.auth_token)
        where = f"keyholder service {settings.dphe_keyholder_url}"
    else:
        keyholder = Keyholder(keyholder_bundle)
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
    model = SecureAggregation(aggregator, keyholder, settings)
    if not settings.dphe_prototypes:
        return model, None
    prototypes = SecureSum(
        aggregator, keyholder, settings, uniform=True, what="prototype sums"
    )
    prototypes.begin(num_classes * (settings.code_length + 1))  # checks the params
    return model, prototypes


def _remote_keyholder(settings: RunSettings, auth_token: str) -> RemoteKeyholder:
    """Client of the keyholder service, verifying TLS with ``dphe-keyholder-ca``.

    Raises
    ------
    ConfigError
        A CA file that does not exist, or a URL the client refuses (plain http
        off loopback), naming the key.
    """
    ca_file = settings.dphe_keyholder_ca or None
    if ca_file is not None and not Path(ca_file).is_file():
        raise ConfigError(
            f"{K.DPHE_KEYHOLDER_CA}={ca_file!r} does not exist on the ServerApp's "
            "machine: give the CA certificate (PEM) that signed the keyholder's "
            "certificate (deploy/credentials/serverapp/ca.crt)"
        )
    try:
        return RemoteKeyholder(settings.dphe_keyholder_url, auth_token, ca_file=ca_file)
    except ValueError as exc:
        raise ConfigError(f"{K.DPHE_KEYHOLDER_URL}: {exc}") from None
