"""Issue 12, findings 1, 2 and 9: the server attacks the clients' privacy noise.

The server knows the run config (seed), the round and every partition id. On main
before this fix the clients drew flips and DP-SGD noise from generators seeded with
exactly those, so the server rebuilt every flip mask and every DP-SGD run. Each
test runs the attack against the real ClientApp and asserts that it now fails; a
control in the simulation-only seeded mode shows the attack itself works (so the
test can fail).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import clients.privacy_noise as privacy_noise
from clients.client_app import derive_seed
from clients.publish import labels_per_record, publish_prototypes
from hashing.prototypes import class_prototypes
from privacy.flipping import epsilon_per_code, flip_beta
from privacy.noise import NoiseSource
from settings.run_settings import ConfigError, RunSettings
from tests.integration.attacks.clientapp_calls import query_encode, train

SEED, ROUND, PID = 42, 3, 1
FLIP_EPS = 1.0  # randomized response per bit: beta = 1 / (1 + e)
BETA = flip_beta(FLIP_EPS, "rr")
CODES_CONFIG = {
    "model": "mlp",
    "code-length": 32,
    "seed": SEED,
    "privacy.code-flip-epsilon": FLIP_EPS,
}
DP_CONFIG = {
    "model": "mlp",
    "code-length": 16,
    "seed": SEED,
    "loss": "csq",
    "dp-sgd.enabled": True,
    "dp-sgd.noise-multiplier": 1.0,
    "local-epochs": 1,
    "batch-size": 32,
}


def _server_guesses(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Flip masks the server rebuilds from what it knows (seed, round, partition)."""
    return {
        # how main (1b31b98) seeded the publication flips
        "run-seed generator": np.random.default_rng(
            derive_seed(SEED, ROUND, PID, 1)
        ).random(shape)
        < BETA,
        # the simulation-only seeded mode's derivation
        "seeded-mode stream": NoiseSource.seeded(SEED, ROUND, PID, "publish").random(
            shape
        )
        < BETA,
    }


def _agreement(published: np.ndarray, true: np.ndarray, mask: np.ndarray) -> float:
    recovered = np.where(mask, -published, published)
    return float(np.mean(recovered == true))


def test_server_cannot_undo_code_flips():
    published, true = query_encode(CODES_CONFIG, PID, ROUND)
    n = true.size
    assert n >= 3000
    # flipping happened at the calibrated rate (the codes are not sent as is)
    assert abs(np.mean(published != true) - BETA) < 5 * math.sqrt(BETA * (1 - BETA) / n)
    # an independent guess of the mask agrees with the truth at 1 - 2 beta (1 - beta)
    chance = 1 - 2 * BETA * (1 - BETA)
    bound = 5 * math.sqrt(chance * (1 - chance) / n)
    for name, mask in _server_guesses(true.shape).items():
        agreement = _agreement(published, true, mask)
        assert abs(agreement - chance) < bound, (name, agreement, chance)
        # no better than taking the published codes as they are
        assert agreement < 1 - BETA, (name, agreement)


def test_control_seeded_mode_lets_the_server_undo_flips(monkeypatch):
    # the attack is real: with seeded noise (simulation only) it recovers every bit
    monkeypatch.setattr(privacy_noise, "client_in_simulation", lambda: True)
    config = {**CODES_CONFIG, "privacy.noise": "seeded"}
    published, true = query_encode(config, PID, ROUND)
    mask = _server_guesses(true.shape)["seeded-mode stream"]
    assert _agreement(published, true, mask) == 1.0


def test_deployed_client_refuses_seeded_noise():
    # outside Flower's simulation engine the run config cannot switch it on
    config = {**CODES_CONFIG, "privacy.noise": "seeded"}
    with pytest.raises(ConfigError, match="privacy.noise='seeded': refused"):
        query_encode(config, PID, ROUND)


def _same_model(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_server_cannot_replay_dp_sgd():
    # The server knows the global model, seed, round and partition; for a candidate
    # dataset it runs the very same client code. If that reproduced the update bit
    # for bit, an exact match would tell neighbouring datasets apart with
    # certainty. With OS noise two runs on the same data already differ.
    observed = train(DP_CONFIG, PID, ROUND)
    replayed = train(DP_CONFIG, PID, ROUND)
    assert not _same_model(observed, replayed)
    # every noisy parameter tensor differs, not just one
    differing = [k for k in observed if not np.array_equal(observed[k], replayed[k])]
    assert len(differing) == len(observed)


def test_control_seeded_dp_sgd_is_replayable(monkeypatch):
    monkeypatch.setattr(privacy_noise, "client_in_simulation", lambda: True)
    config = {**DP_CONFIG, "privacy.noise": "seeded"}
    assert _same_model(train(config, PID, ROUND), train(config, PID, ROUND))


def test_multi_label_prototype_flips_charged_per_changed_prototype():
    # Removing one record with 3 labels moves 3 class means, so up to 3 published
    # prototype codes change; the charge must cover all of them (main charged one).
    gen = torch.Generator().manual_seed(0)
    codes = torch.tanh(torch.randn(40, 16, generator=gen))
    labels = (torch.rand(40, 6, generator=gen) < 0.3).long()
    labels[:, 0] = 1  # every record has a label
    labels[0] = torch.tensor([1, 1, 0, 1, 0, 0])  # the record that leaves: 3 labels
    before = class_prototypes(codes, labels, num_classes=6)
    after = class_prototypes(codes[1:], labels[1:], num_classes=6)
    assert before.classes.tolist() == after.classes.tolist()
    moved = int(np.sum(np.any(before.vectors != after.vectors, axis=1)))
    assert moved == 3
    settings = RunSettings.from_config(
        {"strategy": "fedhap", "privacy.prototype-flip-epsilon": 2.0}
    )
    _, uses = publish_prototypes(
        before,
        settings=settings,
        noise=NoiseSource.secure(),
        labels_per_record=labels_per_record(labels),
    )
    per_prototype = epsilon_per_code(flip_beta(2.0, "rr"), 16)
    assert uses[0].unit == "per record"
    assert uses[0].epsilon >= moved * per_prototype - 1e-9
    assert labels_per_record(labels) >= moved
