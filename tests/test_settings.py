import tomllib
from pathlib import Path

import pytest

from settings.run_settings import ConfigError, RunSettings

ROOT = Path(__file__).resolve().parents[1]


def app_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"][
        "config"
    ]


def test_pyproject_defaults_equal_dataclass_defaults():
    # run_simulation passes no run config, so the dataclass defaults must be the
    # same as the documented [tool.flwr.app.config] defaults.
    from_pyproject = RunSettings.from_config(app_config())
    assert from_pyproject == RunSettings()


@pytest.mark.parametrize("preset", sorted((ROOT / "conf").glob("*.toml")))
def test_presets_use_known_keys_and_validate(preset):
    overrides = tomllib.loads(preset.read_text())
    assert set(overrides) <= set(app_config()), "preset names a key Flower rejects"
    config = {**app_config(), **overrides}
    if config["dataset"] != "digits":
        assert config["data-path"], preset.name
    RunSettings.from_config(config)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("code-length", 4, "code-length=4"),
        ("code-length", 300, "8..256"),
        ("rounds", 0, "rounds=0"),
        ("local-epochs", -1, "local-epochs"),
        ("learning-rate", 0.0, "learning-rate"),
        ("learning-rate", -0.1, "learning-rate"),
        ("batch-size", 0, "batch-size"),
        ("dirichlet-alpha", 0.0, "dirichlet-alpha"),
        ("dataset", "mnist", "dataset='mnist'"),
        ("model", "vgg", "model='vgg'"),
        ("partitioning", "shards", "partitioning='shards'"),
        ("query-fraction", 0.9, "query-fraction"),
        ("fraction-train", 0.0, "fraction-train"),
        ("precision-k", "10,x", "precision-k"),
        ("rounds", "three", "must be an integer"),
        ("learning-rate", "fast", "must be a number"),
        ("download", "yes", "true or false"),
        ("classes-per-client", 0, "classes-per-client"),
        ("fedhap-mu", -0.01, "fedhap-mu=-0.01"),
        ("fedhap-lambda", -1.0, "must be >= 0"),
        ("triplet-margin", 0.0, "must be > 0"),
        ("triplet-margin", -0.5, "triplet-margin"),
        ("triplet-distance", "manhattan", "accepted are cosine, euclidean"),
        ("fedhap-variant", "fedhap-4", "fedhap-1"),
        ("prototype-weighting", "median", "mean, count"),
        ("discriminator-hidden-dim", 0, "positive integer"),
    ],
)
def test_bad_values_name_the_key(key, value, fragment):
    with pytest.raises(ConfigError) as err:
        RunSettings.from_config({**app_config(), key: value})
    assert key in str(err.value)
    assert fragment in str(err.value)


def test_npz_needs_a_path():
    with pytest.raises(ConfigError, match="data-path"):
        RunSettings.from_config({**app_config(), "dataset": "npz"})


def test_unknown_strategy_is_refused_with_the_accepted_names():
    from strategies import build_strategy

    settings = RunSettings.from_config({**app_config(), "strategy": "fedsgd"})
    with pytest.raises(ConfigError, match="strategy='fedsgd'.*fedavg, fedhap, fedprox"):
        build_strategy(settings)


def test_integral_float_is_accepted_and_ks_parse():
    s = RunSettings.from_config({**app_config(), "rounds": 3.0, "precision-k": "50,10"})
    assert s.rounds == 3
    assert s.precision_ks() == (10, 50)


def test_unknown_key_is_refused():
    with pytest.raises(ConfigError, match="unknown config key 'code-lenght'"):
        RunSettings.from_config({**app_config(), "code-lenght": 16})
