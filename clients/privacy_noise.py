"""The node's privacy noise source for one release (``privacy.noise`` config key).

Secure by default (``os.urandom``). The simulation-only seeded mode is honoured
only when this process is a Ray worker of Flower's simulation engine
(:func:`settings.runtime.client_in_simulation`): the run config is written by the
server's side, so a deployed client never lets it make its noise predictable.
"""

from __future__ import annotations

import os

from privacy.noise import SEEDED, NoiseSource
from settings.run_settings import ConfigError, RunSettings
from settings.runtime import client_in_simulation
from settings.sections import PrivacyConfig

PURPOSE_TRAIN = "train"
PURPOSE_PUBLISH = "publish"


def node_noise(
    settings: RunSettings,
    *,
    server_round: int,
    partition_id: int,
    purpose: str,
    in_simulation: bool | None = None,
) -> NoiseSource:
    """Return the noise source for one message handled by this node.

    Parameters
    ----------
    settings : RunSettings
        ``privacy.noise`` and, in seeded mode, ``seed``.
    server_round, partition_id : int
        Identify the draw in seeded mode (ignored in secure mode).
    purpose : str
        ``"train"`` or ``"publish"``: separate seeded streams per message type.
    in_simulation : bool, optional
        Override the runtime check (tests); default asks
        :func:`settings.runtime.client_in_simulation`.

    Raises
    ------
    ConfigError
        ``privacy.noise="seeded"`` outside Flower's simulation engine.
    """
    if settings.privacy.noise != SEEDED:
        return NoiseSource.secure()
    simulated = client_in_simulation() if in_simulation is None else in_simulation
    if not simulated:
        raise ConfigError(
            f"{PrivacyConfig.key('noise')}={settings.privacy.noise!r}: refused by this "
            "node; "
            "seeded privacy noise lets the server rebuild every flip and DP-SGD noise "
            "draw, so it is accepted in Flower's simulation engine only. Accepted "
            "here: 'secure'"
        )
    return NoiseSource.seeded(settings.seed, server_round, partition_id, purpose)


#: 32-bit words of fresh OS entropy mixed into one message's training seed
ENTROPY_WORDS = 4


def claims_privacy(settings: RunSettings) -> bool:
    """Whether the run claims any privacy for this node's replies.

    DPHE (updates hidden from the server), flipped codes or prototypes, or DP-SGD.
    """
    return (
        settings.secure_aggregation == "dphe"
        or settings.privacy.code_flip_epsilon > 0
        or settings.privacy.prototype_flip_epsilon > 0
        or settings.dp_sgd.enabled
    )


def node_entropy(settings: RunSettings) -> tuple[int, ...]:
    """Words of fresh OS entropy to mix into training randomness, or ``()``.

    Where the run claims privacy, a client's training randomness (batch order,
    dropout, DPHE shard order and padding) must not be a function of what the
    server knows (run seed, round, partition id): else two runs with the same seed
    give bit-identical updates, and the difference of two aggregates over client
    sets that differ in one client is that client's update (cross-run
    differencing). Runs that claim no privacy keep the seed alone (the same seed,
    the same metrics), and so does the simulation-only ``privacy.noise = "seeded"``
    mode, whose runs are bit-for-bit repeatable by design and labelled as giving
    no guarantee against the server.
    """
    if not claims_privacy(settings) or settings.privacy.noise == SEEDED:
        return ()
    raw = os.urandom(4 * ENTROPY_WORDS)
    return tuple(
        int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)
    )
