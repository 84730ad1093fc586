"""DPcode's Flower glue: the release record, reply screening, the config checks."""

import dataclasses

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from privacy.dpcode import Release
from privacy.ledger import MechanismUse
from server.discovery import NodeInfo
from settings import keys as K
from settings.privacy_records import privacy_record
from settings.run_settings import ConfigError, RunSettings
from strategies.dpcode.client import DPCODE, MECHANISM
from strategies.dpcode.records import read_release, release_records
from strategies.dpcode.server import _screen
from tests.messages import reply_from

RELEASE = Release(
    patterns=((3,), (1, 4), (0, 2, 5)),
    supports=(40.5, 22.0, -3.25),
    epsilon_spent=1.0,
    unit="per frame",
    delta=0.0,
    mechanism="dpcode",
    vocabulary="hadamard-32",
    k=5,
    max_length=3,
)
SETTINGS = RunSettings.from_config({"strategy": "dpcode", "dpcode.k": 5})
INFO = NodeInfo(
    node_id=7, partition_id=2, num_partitions=3, num_database=10, device="cpu"
)


def _reply(release=RELEASE, uses=None):
    arrays, config = release_records(release)
    uses = uses or [MechanismUse(MECHANISM, release.epsilon_spent, 0.0, "per frame")]
    content = RecordDict(
        {DPCODE: arrays, K.CONFIG: config, K.PRIVACY: privacy_record(uses)}
    )
    return reply_from(7, content, message_type=K.QUERY_DPCODE)


def test_release_record_round_trip():
    arrays, config = release_records(RELEASE)
    back = read_release(arrays, config, k=5)
    assert back.patterns == RELEASE.patterns and back.supports == RELEASE.supports
    assert (back.epsilon_spent, back.unit, back.vocabulary) == (
        1.0,
        "per frame",
        "hadamard-32",
    )


def test_more_than_k_patterns_or_bad_arrays_are_refused():
    arrays, config = release_records(RELEASE)
    with pytest.raises(ValueError, match="at most k=2"):
        read_release(arrays, config, k=2)
    arrays["supports"] = type(arrays["supports"])(np.array([1.0, np.nan, 2.0]))
    with pytest.raises(ValueError, match="finite"):
        read_release(arrays, config, k=5)


def test_screen_accepts_an_honest_reply_and_rejects_bad_reports(caplog):
    assert _screen(_reply(), INFO, SETTINGS) == dataclasses.replace(
        RELEASE, components={}
    )
    over = dataclasses.replace(RELEASE, epsilon_spent=2.0)
    assert _screen(_reply(over), INFO, SETTINGS) is None  # above dpcode.epsilon = 1
    unreported = _reply(uses=[MechanismUse("other", 1.0, 0.0, "per frame")])
    assert _screen(unreported, INFO, SETTINGS) is None
    wrong_unit = _reply(uses=[MechanismUse(MECHANISM, 1.0, 0.0, "per record")])
    assert _screen(wrong_unit, INFO, SETTINGS) is None
    assert _screen(reply_from(7, error="boom"), INFO, SETTINGS) is None
    assert _screen(None, INFO, SETTINGS) is None
    assert "partition 2 rejected" in caplog.text


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"dpcode.k": 0}, "dpcode.k=0"),
        ({"dpcode.variant": "fast"}, "accepted are paper, pruned"),
        ({"dpcode.epsilon": 0.0}, "dpcode.epsilon=0.0"),
        ({"dpcode.split": 1.0}, "dpcode.split=1.0"),
        ({"dataset": "multiview-digits"}, "accepted datasets are digits, cifar10"),
        ({"dpcode.patch": 3}, "power of two"),
        ({"dpcode.source": "codes"}, "dpcode.codes-model is empty"),
        (
            {
                "dpcode.source": "codes",
                "dpcode.codes-model": "m.pt",
                "dpcode.chunk-bits": 5,
            },
            "must divide code-length=32",
        ),
    ],
)
def test_bad_dpcode_settings_are_refused(config, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        RunSettings.from_config({"strategy": "dpcode", **config})


def test_release_noise_cannot_be_rebuilt_from_the_run_config():
    # the attack: someone who knows the run config (seed, round, partition) replays
    # the node's DPcode release to learn its noise. With the default secure noise
    # two releases of the same data under the same config differ; only the seeded
    # simulation mode (refused outside the simulation engine) repeats itself.
    import torch

    from clients.privacy_noise import PURPOSE_PUBLISH, node_noise
    from strategies.dpcode.client import dpcode_reply

    images = torch.from_numpy(
        np.random.default_rng(0).random((60, 1, 8, 8)).astype(np.float32)
    )
    data = type("Data", (), {"inputs": images})()
    kw = {"server_round": 1, "partition_id": 0, "purpose": PURPOSE_PUBLISH}

    def release(settings, simulated):
        reply = dpcode_reply(
            RecordDict({K.CONFIG: ConfigRecord({K.SERVER_ROUND: 1})}),
            settings=settings,
            data=data,
            state=RecordDict(),
            partition_id=0,
            device=torch.device("cpu"),
            noise=node_noise(settings, in_simulation=simulated, **kw),
        )
        return reply[DPCODE]["supports"].numpy()

    secure = RunSettings.from_config({"strategy": "dpcode", "dpcode.k": 5})
    assert not np.array_equal(release(secure, False), release(secure, False))
    seeded = RunSettings.from_config(
        {"strategy": "dpcode", "dpcode.k": 5, "privacy.noise": "seeded"}
    )
    np.testing.assert_array_equal(release(seeded, True), release(seeded, True))
    with pytest.raises(ConfigError, match="privacy.noise"):
        release(seeded, False)
