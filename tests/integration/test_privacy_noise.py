"""privacy/noise.py: secure draws are fresh, seeded draws reproducible and labelled."""

from __future__ import annotations

import numpy as np
import pytest

from clients.privacy_noise import node_noise
from privacy.flipping import flip_codes
from privacy.noise import SECURE, SEEDED, NoiseSource
from settings.run_settings import ConfigError, RunSettings
from tests.integration.test_strategies import FakeGrid


def test_uniform_draws_have_the_right_shape_range_and_mean():
    for source in (NoiseSource.secure(), NoiseSource.seeded(1, 2, "x")):
        u = source.random((200, 50))
        assert u.shape == (200, 50) and u.dtype == np.float64
        assert 0.0 <= u.min() and u.max() < 1.0
        assert abs(u.mean() - 0.5) < 0.01  # 10,000 draws: sd 0.003
        assert source.random(0).shape == (0,)
        assert 0 <= source.seed() < 2**63


def test_secure_draws_differ_seeded_draws_repeat_per_identity():
    assert not np.array_equal(
        NoiseSource.secure().random(64), NoiseSource.secure().random(64)
    )
    a, b = (
        NoiseSource.seeded(42, 3, 1, "publish"),
        NoiseSource.seeded(42, 3, 1, "publish"),
    )
    first = a.random(64)
    np.testing.assert_array_equal(first, b.random(64))
    # each call consumes fresh stream: never the same block twice
    assert not np.array_equal(first, a.random(64))
    # another round, partition or purpose is another stream
    for other in ((42, 4, 1, "publish"), (42, 3, 2, "publish"), (42, 3, 1, "train")):
        assert not np.array_equal(first, NoiseSource.seeded(*other).random(64))
    assert NoiseSource.secure().mode == SECURE and a.mode == SEEDED
    assert a.predictable_by_server and not NoiseSource.secure().predictable_by_server


@pytest.mark.parametrize("bad", [(), (-1,), (2**64,), (1.5,), (True,)])
def test_seeded_parts_are_checked(bad):
    with pytest.raises(ValueError, match="seed part|at least one part"):
        NoiseSource.seeded(*bad)


def test_flip_codes_accepts_a_noise_source_and_refuses_other_things():
    codes = np.ones((100, 32), dtype=np.int8)
    out = flip_codes(codes, 0.25, NoiseSource.secure())
    assert abs(np.mean(out == -1) - 0.25) < 0.05
    with pytest.raises(TypeError, match="NoiseSource"):
        flip_codes(codes, 0.25, object())


def test_config_key_and_node_side_refusal():
    with pytest.raises(ConfigError, match="privacy.noise='os': accepted are"):
        RunSettings.from_config({"privacy.noise": "os"})
    seeded = RunSettings.from_config({"privacy.noise": "seeded"})
    assert seeded.seeded_noise and not RunSettings().seeded_noise
    kw = {"server_round": 1, "partition_id": 0, "purpose": "train"}
    assert node_noise(seeded, in_simulation=True, **kw).mode == SEEDED
    assert node_noise(RunSettings(), in_simulation=False, **kw).mode == SECURE
    with pytest.raises(ConfigError, match="refused by this node"):
        node_noise(seeded, in_simulation=False, **kw)
    # outside a Ray worker of the simulation engine (this test process) it refuses
    with pytest.raises(ConfigError, match="refused by this node"):
        node_noise(seeded, **kw)


def test_serverapp_refuses_seeded_noise_outside_simulation():
    from flwr.app import Context, RecordDict

    from server.server_app import build_server_app

    app = build_server_app({"privacy.noise": "seeded"})
    context = Context(
        run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}
    )
    with pytest.raises(ConfigError, match="simulation engine only"):
        app._main(FakeGrid({}), context)  # a deployment's grid is not InMemoryGrid


def test_ledger_table_carries_the_seeded_warning():
    from privacy.ledger import PrivacyLedger
    from privacy.noise import SEEDED_WARNING

    ledger = PrivacyLedger()
    ledger.charge(0, 1, "random-flipping/codes", epsilon=3.0, unit="per code")
    assert "note:" not in ledger.table()
    ledger.charge(
        0, 2, "random-flipping/codes", epsilon=3.0, unit="per code", note=SEEDED_WARNING
    )
    assert ledger.table().splitlines()[-1] == f"note: {SEEDED_WARNING}"
