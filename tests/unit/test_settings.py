import dataclasses
from pathlib import Path

import pytest

from settings.check import app_config_defaults, parse_run_config
from settings.run_settings import ConfigError, RunSettings

ROOT = Path(__file__).resolve().parents[2]


def app_config() -> dict:
    return app_config_defaults(ROOT)


def test_pyproject_tables_are_the_generated_ones():
    # keys and defaults are written once, in the config dataclasses
    from settings.reference import pyproject_block, pyproject_config_toml

    assert pyproject_block() == pyproject_config_toml(), (
        "rewrite them with: python -m settings.reference --pyproject"
    )


def test_pyproject_defaults_equal_dataclass_defaults():
    # run_simulation passes no run config, so the dataclass defaults must be the
    # same as the documented [tool.flwr.app.config] defaults.
    from_pyproject = RunSettings.from_config(app_config())
    assert from_pyproject == RunSettings()


@pytest.mark.parametrize("preset", sorted((ROOT / "conf").glob("*.toml")))
def test_presets_use_known_keys_and_validate(preset):
    overrides = parse_run_config([str(preset)])  # flattened as Flower does
    assert set(overrides) <= set(app_config()), "preset names a key Flower rejects"
    config = {**app_config(), **overrides}
    if config["dataset"] in ("npz", "cifar10"):  # the others are embedded
        assert config["data-path"], preset.name
    RunSettings.from_config(config)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("code-length", 4, "code-length=4"),
        ("code-length", 300, "[8, 256]"),
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
        ("fedhap.mu", -0.01, "fedhap.mu=-0.01"),
        ("fedhap.lambda", -1.0, "must be >= 0"),
        ("fedhap.triplet-margin", 0.0, "must be > 0"),
        ("fedhap.triplet-margin", -0.5, "fedhap.triplet-margin"),
        ("fedhap.triplet-distance", "manhattan", "accepted are cosine, euclidean"),
        ("fedhap.variant", "fedhap-4", "fedhap-1"),
        ("prototype-weighting", "median", "mean, count"),
        ("fedhap.discriminator-hidden-dim", 0, "positive integer"),
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
    # refused by the settings (so `python -m settings check` needs no torch) and,
    # should settings ever let one through, by the server side's table
    from strategies.server_side import build_strategy

    with pytest.raises(ConfigError, match="strategy='fedsgd'.*fedavg, fedprox"):
        RunSettings.from_config({**app_config(), "strategy": "fedsgd"})
    settings = dataclasses.replace(RunSettings(), strategy="fedsgd")
    with pytest.raises(ConfigError, match="strategy='fedsgd'.*fedavg, fedhap, fedprox"):
        build_strategy(settings)


def test_integral_float_is_accepted_and_ks_parse():
    s = RunSettings.from_config({**app_config(), "rounds": 3.0, "precision-k": "50,10"})
    assert s.rounds == 3
    assert s.precision_ks() == (10, 50)


def test_unknown_key_is_refused():
    with pytest.raises(ConfigError, match="unknown config key 'code-lenght'"):
        RunSettings.from_config({**app_config(), "code-lenght": 16})


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"updates.sparsity": 1.0}, "updates.sparsity=1.0"),
        ({"updates.elastic-net-l1": -0.1}, "updates.elastic-net-l1"),
        ({"secure-aggregation": "mpc"}, "secure-aggregation='mpc'"),
        ({"dphe.packing": -1}, "dphe.packing=-1"),
        ({"dphe.scale-bits": 0}, "dphe.scale-bits=0"),
        ({"dphe.clip": 0.0}, "dphe.clip"),
        ({"dphe.weighting": "size"}, "dphe.weighting"),
        ({"dphe.max-weight": 0}, "dphe.max-weight"),
        ({"dphe.max-contributors": 2}, "dphe.max-contributors"),
        ({"dphe.prototypes": True}, "dphe.prototypes=true needs"),
        (
            {
                "strategy": "fedhap",
                "secure-aggregation": "dphe",
                "min-train-nodes": 3,
                "dphe.key-dir": "k",
                "dphe.prototypes": True,
                "prototype-weighting": "count",
            },
            "prototype-weighting='mean'",
        ),
        (
            {"secure-aggregation": "dphe", "min-train-nodes": 2, "dphe.key-dir": "k"},
            "min-train-nodes=2",
        ),
        ({"secure-aggregation": "dphe", "min-train-nodes": 3}, "dphe.key-dir is empty"),
    ],
)
def test_secure_aggregation_bad_values_name_the_key(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        RunSettings.from_config(overrides)


def test_dphe_accepts_three_nodes_with_a_key_folder():
    s = RunSettings.from_config(
        {"secure-aggregation": "dphe", "min-train-nodes": 3, "dphe.key-dir": "keys"}
    )
    assert s.secure_aggregation == "dphe"


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"pfmh.tau": 0.0}, "pfmh.tau=0.0"),
        ({"pfmh.tau": -0.07}, "pfmh.tau=-0.07"),
        ({"pfmh.tau": float("nan")}, "pfmh.tau=nan"),
        ({"pfmh.alpha": -0.01}, "pfmh.alpha=-0.01"),
        ({"pfmh.beta": -0.001}, "pfmh.beta=-0.001"),
        ({"pfmh.beta": float("inf")}, "pfmh.beta=inf"),
        ({"pfmh.prototype-weight": -1.0}, "pfmh.prototype-weight=-1.0"),
        ({"pfmh.prototype-weight": float("inf")}, "pfmh.prototype-weight=inf"),
        ({"pfmh.k": 0}, "pfmh.k=0"),
        ({"pfmh.dropout": 1.0}, "pfmh.dropout=1.0"),
        ({"pfmh.mode": "local"}, "pfmh.mode='local'"),
        ({"pfmh.variant": "w/o-P"}, "pfmh.variant='w/o-P'"),
        ({"strategy": "pfmh"}, "dataset='digits' has a single modality"),
        (
            {"strategy": "pfmh", "dataset": "cifar10", "data-path": "d"},
            "dataset='cifar10' has a single modality",
        ),
        (
            {"strategy": "pfmh", "dataset": "multiview-digits", "batch-size": 1},
            "batch-size=1",
        ),
        (
            {"strategy": "pfmh", "dataset": "multiview-digits", "dp-sgd.enabled": True},
            "dp-sgd.enabled=true",
        ),
        (
            {
                "strategy": "pfmh",
                "dataset": "multiview-digits",
                "updates.sparsity": 0.5,
            },
            'pfmh.mode="personalized"',
        ),
    ],
)
def test_pfmh_bad_values_name_the_key(overrides, fragment):
    with pytest.raises(ConfigError) as err:
        RunSettings.from_config({**app_config(), **overrides})
    assert fragment in str(err.value)


def test_pfmh_settings_and_loss_config():
    from strategies.pfmh.model import pfmh_initial_state, pfmh_loss_config

    s = RunSettings.from_config(
        {
            **app_config(),
            "strategy": "pfmh",
            "dataset": "multiview-digits",
            "pfmh.variant": "wo-pe",
            "pfmh.tau": 0.1,
            "pfmh.prototype-weight": 0.3,
        }
    )
    assert s.pfmh.personalized and s.pfmh.ablation == "w/o-PE"
    cfg = pfmh_loss_config(s)
    assert (cfg.tau, cfg.alpha, cfg.beta) == (0.1, 0.01, 0.001)
    assert cfg.prototype_weight == 0.3
    assert not cfg.use_completion and cfg.uses_prototypes
    assert pfmh_initial_state(s, model=None, num_classes=10) == {}  # no model
    fed = RunSettings.from_config(
        {
            **app_config(),
            "strategy": "pfmh",
            "dataset": "multiview-digits",
            "pfmh.mode": "fedavg",
            "updates.sparsity": 0.5,
        }
    )
    assert not fed.pfmh.personalized
    # the pfmh-* keys are validated but unused by other strategies
    plain = RunSettings.from_config(app_config())
    assert plain.method.global_model(plain) and not plain.method.prototypes(plain)


def test_pfmh_run_model_is_multimodal_and_seeded():
    import torch

    from hashing.pfmh.model import MultiModalHash
    from settings.run_model import build_run_model
    from strategies.pfmh.model import build_pfmh_model

    s = RunSettings.from_config(
        {
            **app_config(),
            "strategy": "pfmh",
            "dataset": "multiview-digits",
            "pfmh.k": 8,
            "code-length": 16,
        }
    )
    a = build_pfmh_model(s, {"image": 64, "hog": 32})
    b = build_pfmh_model(s, {"hog": 32, "image": 64})
    assert isinstance(a, MultiModalHash) and a.k == 8 and a.bits == 16
    for (ka, va), (kb, vb) in zip(
        a.state_dict().items(), b.state_dict().items(), strict=True
    ):
        assert ka == kb and torch.equal(va, vb)  # server and clients agree
    with pytest.raises(ValueError, match="multi-modal"):
        build_pfmh_model(s, (64,))
    with pytest.raises(ValueError, match="single-modal"):
        build_run_model(RunSettings(), {"image": 64, "hog": 32})


@pytest.mark.parametrize(
    ("arrays", "fragment"),
    [
        ({"x_image": 3}, "has 1 modality"),
        ({"x_image": 3, "x_text": -1}, "x_text. has 39 rows"),  # -1: one row short
        ({}, None),
    ],
)
def test_pfmh_npz_needs_two_modalities_before_any_work(tmp_path, arrays, fragment):
    import numpy as np

    from server.experiment import prepare_data
    from tests.fixtures import write_npz

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 10)
    data = {
        k: rng.normal(size=(40 - (d < 0), abs(d))).astype("float32")
        for k, d in arrays.items()
    }
    if not arrays:  # two modalities: accepted, the query inputs are a dict
        data = {
            "x_image": rng.normal(size=(40, 3)).astype("float32"),
            "x_text": rng.normal(size=(40, 5)).astype("float32"),
        }
    path = write_npz(tmp_path / "f.npz", labels=labels, **data)
    s = RunSettings.from_config(
        {**app_config(), "strategy": "pfmh", "dataset": "npz", "data-path": str(path)}
    )
    if fragment is None:
        prepared = prepare_data(s)
        assert set(prepared.queries.inputs) == {"image", "text"}
        assert prepared.input_shape == {"image": 3, "text": 5}
        return
    with pytest.raises(ConfigError, match=f"dataset='npz'.*{fragment}"):
        prepare_data(s)


def test_unknown_keys_name_the_closest_key_and_renamed_keys_their_new_name():
    with pytest.raises(ConfigError, match="did you mean 'fedhap.mu'"):
        RunSettings.from_config({"fedhap.mue": 0.1})
    with pytest.raises(ConfigError, match="'fedhap-mu' was renamed: use 'fedhap.mu'"):
        RunSettings.from_config({"fedhap-mu": 0.1})
    with pytest.raises(ConfigError, match="'dp-sgd' was renamed: use 'dp-sgd.enabled'"):
        RunSettings.from_config({"dp-sgd": True})


def test_keys_are_derived_from_the_fields():
    from strategies.dphe.config import DPHEConfig
    from strategies.fedhap.config import FedHAPConfig

    assert DPHEConfig.key("scale_bits") == "dphe.scale-bits"
    assert FedHAPConfig.key("lambda_") == "fedhap.lambda"
    assert RunSettings.key("code_length") == "code-length"
    with pytest.raises(AttributeError):
        DPHEConfig.key("scale_bit")
    s = RunSettings.from_config({"fedhap.lambda": 0.3, "dphe.scale-bits": 12})
    assert (s.fedhap.lambda_, s.dphe.scale_bits) == (0.3, 12)
    assert s.to_dict()["fedhap.lambda"] == 0.3
