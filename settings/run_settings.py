"""Typed, validated view of a run's configuration.

``RunSettings.from_config`` turns Flower's flat ``run_config`` mapping into a frozen
dataclass and rejects bad values *before any work starts*, with an error that names
the config key and what is accepted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privacy.flipping import flip_beta
from privacy.noise import NOISE_MODES, SEEDED
from settings import keys as K

DATASETS = ("digits", "npz", "cifar10", "multiview-digits")
# datasets with a single modality: PFMH (which fuses >= 2) refuses them up front
SINGLE_MODAL_DATASETS = ("digits", "cifar10")
PARTITIONINGS = ("iid", "dirichlet", "pathological")
MODELS = ("auto", "mlp", "cnn", "resnet18")
LOSSES = ("dpsh", "csq")
DEVICES = ("auto", "cpu", "cuda")
# full FedHAP, and the paper's ablations (Section 4.5): FedHAP-1 no global
# prototypes at all, FedHAP-2 prototypes only in the discriminator, FedHAP-3
# prototypes only in the global triplet loss (no discriminator).
FEDHAP_VARIANTS = ("full", "fedhap-1", "fedhap-2", "fedhap-3")
TRIPLET_DISTANCES = ("cosine", "euclidean")
PROTOTYPE_WEIGHTINGS = ("mean", "count")
FLIP_CALIBRATIONS = ("rr", "paper")
INITIAL_PROTOTYPES = ("none", "centers")
MIN_BITS, MAX_BITS = 8, 256
SECURE_AGGREGATIONS = ("none", "dphe")
STRATEGIES = ("fedavg", "fedprox", "fedhap", "pfmh")
"""Names of ``strategies/registry.py`` (a test keeps the two equal); checked here so
that ``python -m settings check`` refuses an unknown name without importing torch."""
DPHE_STRATEGIES = ("fedavg", "fedprox", "fedhap")
DPHE_WEIGHTINGS = ("num-examples", "uniform")
DPHE_OBFUSCATORS = ("full", "djn")
"""Names of ``crypto.obfuscators.OBFUSCATORS`` (a test keeps the two equal)."""
# the DPHE paper's condition (Section 2.5): an aggregate of fewer than 3 users
# would let one user (or the server) recover another's update
DPHE_MIN_CONTRIBUTORS = 3
MAX_SCALE_BITS = 40
# PFMH (README "PFMH"): personalized = only prototypes travel, the model stays on
# the client; fedavg = the model is also FedAvg'd
PFMH_MODES = ("personalized", "fedavg")
# pfmh-variant -> the Table 2 ablation name of hashing.pfmh.losses.ABLATIONS
PFMH_VARIANTS = {
    "full": "full",
    "wo-p": "w/o-P",
    "wo-pe": "w/o-PE",
    "wo-ls": "w/o-Ls",
    "wo-ll": "w/o-Ll",
}


class ConfigError(ValueError):
    """A run-config value is invalid; the message names the key."""


@dataclass(frozen=True)
class RunSettings:
    """Every knob of a run, validated. Field names mirror the config keys."""

    strategy: str = "fedavg"
    rounds: int = 30
    fraction_train: float = 1.0
    min_train_nodes: int = 2
    proximal_mu: float = 0.01
    code_length: int = 32
    local_epochs: int = 3
    learning_rate: float = 5e-4
    batch_size: int = 64
    weight_decay: float = 0.0
    loss: str = "dpsh"
    quantization_weight: float = 0.1
    model: str = "auto"
    model_weights: str = ""
    hidden_dim: int = 256
    dataset: str = "digits"
    data_path: str = ""
    download: bool = False
    query_fraction: float = 0.1
    partitioning: str = "iid"
    dirichlet_alpha: float = 0.5
    classes_per_client: int = 3
    seed: int = 42
    eval_every: int = 5
    map_top_k: int = 100
    precision_k: str = "10,50,100,500"
    results_dir: str = "results"
    run_name: str = ""
    device: str = "auto"
    fedhap_variant: str = "full"
    triplet_margin: float = 0.5
    triplet_distance: str = "cosine"
    fedhap_mu: float = 0.05
    fedhap_lambda: float = 0.1
    prototype_weighting: str = "mean"
    discriminator_hidden_dim: int = 128
    code_flip_epsilon: float = 0.0
    prototype_flip_epsilon: float = 0.0
    flip_calibration: str = "rr"
    privacy_noise: str = "secure"
    fedhap_initial_prototypes: str = "none"
    dp_sgd: bool = False
    dp_noise_multiplier: float = 1.0
    dp_target_epsilon: float = 0.0
    dp_max_grad_norm: float = 1.0
    dp_delta: float = 1e-5
    update_sparsity: float = 0.0
    elastic_net_l1: float = 0.0
    elastic_net_l2: float = 0.0
    secure_aggregation: str = "none"
    dphe_key_dir: str = ""
    dphe_keyholder_url: str = ""
    dphe_keyholder_ca: str = ""
    dphe_packing: int = 0
    dphe_scale_bits: int = 20
    dphe_clip: float = 1.0
    dphe_weighting: str = "num-examples"
    dphe_max_weight: int = 4096
    dphe_max_contributors: int = 128
    dphe_capacity: int = 0
    dphe_pad: bool = True
    dphe_prototypes: bool = False
    dphe_block_sparsity: bool = False
    dphe_obfuscators: str = "full"
    pfmh_mode: str = "personalized"
    pfmh_variant: str = "full"
    pfmh_tau: float = 0.07
    pfmh_alpha: float = 0.01
    pfmh_beta: float = 0.001
    pfmh_k: int = 512
    pfmh_dropout: float = 0.1

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RunSettings:
        """Build and validate settings from a flat ``run_config`` mapping.

        Unknown keys are refused (``flwr run`` refuses them too; this catches typos
        in programmatic overrides); known keys are type-checked and range-checked.
        """
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in config.items():
            name = key.replace("-", "_")
            if name not in known:
                raise ConfigError(
                    f"unknown config key {key!r}; accepted keys are those of "
                    "[tool.flwr.app.config] in pyproject.toml"
                )
            values[name] = _coerce(key, raw, type(known[name].default))
        settings = cls(**values)
        settings.validate()
        return settings

    @property
    def seeded_noise(self) -> bool:
        """``privacy-noise = "seeded"``: the server can rebuild the privacy noise."""
        return self.privacy_noise == SEEDED

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid key."""
        _choice(K.STRATEGY, self.strategy, STRATEGIES)
        _choice(K.DATASET, self.dataset, DATASETS)
        _choice(K.PARTITIONING, self.partitioning, PARTITIONINGS)
        _choice(K.MODEL, self.model, MODELS)
        _choice(K.LOSS, self.loss, LOSSES)
        _choice(K.DEVICE, self.device, DEVICES)
        _choice(K.FEDHAP_VARIANT, self.fedhap_variant, FEDHAP_VARIANTS)
        _choice(K.TRIPLET_DISTANCE, self.triplet_distance, TRIPLET_DISTANCES)
        _choice(K.PROTOTYPE_WEIGHTING, self.prototype_weighting, PROTOTYPE_WEIGHTINGS)
        if not MIN_BITS <= self.code_length <= MAX_BITS:
            raise ConfigError(
                f"{K.CODE_LENGTH}={self.code_length}: accepted are integers in "
                f"{MIN_BITS}..{MAX_BITS}"
            )
        for key, value in (
            (K.ROUNDS, self.rounds),
            (K.LOCAL_EPOCHS, self.local_epochs),
            (K.BATCH_SIZE, self.batch_size),
            (K.EVAL_EVERY, self.eval_every),
            (K.MAP_TOP_K, self.map_top_k),
            (K.HIDDEN_DIM, self.hidden_dim),
            (K.MIN_TRAIN_NODES, self.min_train_nodes),
            (K.DISCRIMINATOR_HIDDEN_DIM, self.discriminator_hidden_dim),
        ):
            if value <= 0:
                raise ConfigError(f"{key}={value}: must be a positive integer")
        for key, value in (
            (K.LEARNING_RATE, self.learning_rate),
            (K.DIRICHLET_ALPHA, self.dirichlet_alpha),
            (K.TRIPLET_MARGIN, self.triplet_margin),
        ):
            if not value > 0:
                raise ConfigError(f"{key}={value}: must be > 0")
        for key, value in (
            (K.WEIGHT_DECAY, self.weight_decay),
            (K.QUANTIZATION_WEIGHT, self.quantization_weight),
            (K.PROXIMAL_MU, self.proximal_mu),
            (K.FEDHAP_MU, self.fedhap_mu),
            (K.FEDHAP_LAMBDA, self.fedhap_lambda),
        ):
            if not value >= 0:
                raise ConfigError(f"{key}={value}: must be >= 0")
        if not 0 < self.fraction_train <= 1:
            raise ConfigError(
                f"{K.FRACTION_TRAIN}={self.fraction_train}: accepted is (0, 1]"
            )
        if not 0 < self.query_fraction <= 0.5:
            raise ConfigError(
                f"{K.QUERY_FRACTION}={self.query_fraction}: accepted is (0, 0.5]"
            )
        if self.classes_per_client < 1:
            raise ConfigError(
                f"{K.CLASSES_PER_CLIENT}={self.classes_per_client}: must be >= 1"
            )
        if self.dataset in ("npz",) and not self.data_path:
            raise ConfigError(
                f"{K.DATA_PATH} is empty: dataset '{self.dataset}' needs the path of "
                "a .npz feature file"
            )
        if self.dataset == "cifar10" and not self.data_path:
            raise ConfigError(
                f"{K.DATA_PATH} is empty: dataset 'cifar10' needs the folder that "
                "holds (or will hold, with download=true) cifar-10-batches-py/"
            )
        self.precision_ks()  # parses or raises
        self._validate_flipping()
        _choice(
            K.FEDHAP_INITIAL_PROTOTYPES,
            self.fedhap_initial_prototypes,
            INITIAL_PROTOTYPES,
        )
        self._validate_dp_sgd()
        self._validate_secure_aggregation()
        self._validate_pfmh()

    def _validate_pfmh(self) -> None:
        _choice(K.PFMH_MODE, self.pfmh_mode, PFMH_MODES)
        _choice(K.PFMH_VARIANT, self.pfmh_variant, tuple(PFMH_VARIANTS))
        if not (_finite(self.pfmh_tau) and self.pfmh_tau > 0):
            raise ConfigError(
                f"{K.PFMH_TAU}={self.pfmh_tau}: the temperature must be a finite "
                "number > 0 (paper: 0.07)"
            )
        for key, value in (
            (K.PFMH_ALPHA, self.pfmh_alpha),
            (K.PFMH_BETA, self.pfmh_beta),
        ):
            if not (_finite(value) and value >= 0):
                raise ConfigError(f"{key}={value}: must be a finite number >= 0")
        if self.pfmh_k < 1:
            raise ConfigError(f"{K.PFMH_K}={self.pfmh_k}: must be a positive integer")
        if not 0 <= self.pfmh_dropout < 1:
            raise ConfigError(
                f"{K.PFMH_DROPOUT}={self.pfmh_dropout}: accepted is 0 <= p < 1"
            )
        if self.strategy != "pfmh":
            return
        if self.dataset in SINGLE_MODAL_DATASETS:
            raise ConfigError(
                f"{K.DATASET}={self.dataset!r} has a single modality; strategy "
                '"pfmh" fuses at least two: use dataset="multiview-digits" or an '
                ".npz with two or more x_<modality> arrays"
            )
        if self.batch_size < 2:
            raise ConfigError(
                f'{K.BATCH_SIZE}={self.batch_size} with {K.STRATEGY}="pfmh": must be '
                ">= 2 (similarity matching compares pairs within a mini-batch)"
            )
        if self.dp_sgd:
            raise ConfigError(
                f'{K.DP_SGD}=true with {K.STRATEGY}="pfmh": not implemented (the '
                "PFMH objective has in-batch pairs, so per-sample clipping would not "
                "bound one record's influence)"
            )
        if self.pfmh_mode == "personalized" and (
            self.update_sparsity > 0
            or self.elastic_net_l1 > 0
            or self.elastic_net_l2 > 0
        ):
            raise ConfigError(
                f"{K.UPDATE_SPARSITY}/{K.ELASTIC_NET_L1}/{K.ELASTIC_NET_L2} with "
                f'{K.PFMH_MODE}="personalized": no model update is sent in that mode; '
                f'use {K.PFMH_MODE}="fedavg" or leave them at 0'
            )

    @property
    def pfmh_ablation(self) -> str:
        """The Table 2 variant name (``hashing.pfmh.losses.ABLATIONS``)."""
        return PFMH_VARIANTS[self.pfmh_variant]

    @property
    def pfmh_personalized(self) -> bool:
        """PFMH with models kept on the clients (only prototypes travel)."""
        return self.strategy == "pfmh" and self.pfmh_mode == "personalized"

    def _validate_secure_aggregation(self) -> None:
        if not 0 <= self.update_sparsity < 1:
            raise ConfigError(
                f"{K.UPDATE_SPARSITY}={self.update_sparsity}: accepted is 0 <= s < 1 "
                "(the fraction of update values zeroed; 0 = dense)"
            )
        for key, value in (
            (K.ELASTIC_NET_L1, self.elastic_net_l1),
            (K.ELASTIC_NET_L2, self.elastic_net_l2),
        ):
            if not value >= 0 or value == float("inf"):
                raise ConfigError(f"{key}={value}: must be a finite number >= 0")
        _choice(K.SECURE_AGGREGATION, self.secure_aggregation, SECURE_AGGREGATIONS)
        _choice(K.DPHE_WEIGHTING, self.dphe_weighting, DPHE_WEIGHTINGS)
        _choice(K.DPHE_OBFUSCATORS, self.dphe_obfuscators, DPHE_OBFUSCATORS)
        if self.dphe_block_sparsity and (
            self.secure_aggregation != "dphe" or self.update_sparsity <= 0
        ):
            raise ConfigError(
                f'{K.DPHE_BLOCK_SPARSITY}=true needs {K.SECURE_AGGREGATION}="dphe" and '
                f"{K.UPDATE_SPARSITY} > 0: it applies the top-k to DPHE's packed "
                "blocks of the phi-permuted space"
            )
        if self.dphe_packing < 0:
            raise ConfigError(
                f"{K.DPHE_PACKING}={self.dphe_packing}: accepted is 0 (as many values "
                "per plaintext as the key allows), 1 (the paper) or more"
            )
        if not 1 <= self.dphe_scale_bits <= MAX_SCALE_BITS:
            raise ConfigError(
                f"{K.DPHE_SCALE_BITS}={self.dphe_scale_bits}: accepted are integers "
                f"in 1..{MAX_SCALE_BITS}"
            )
        if not (0 < self.dphe_clip < float("inf")):
            raise ConfigError(f"{K.DPHE_CLIP}={self.dphe_clip}: must be finite and > 0")
        if self.dphe_max_weight < 1:
            raise ConfigError(
                f"{K.DPHE_MAX_WEIGHT}={self.dphe_max_weight}: must be >= 1"
            )
        if self.dphe_max_contributors < DPHE_MIN_CONTRIBUTORS:
            raise ConfigError(
                f"{K.DPHE_MAX_CONTRIBUTORS}={self.dphe_max_contributors}: must be >= "
                f"{DPHE_MIN_CONTRIBUTORS}"
            )
        if self.dphe_capacity < 0:
            raise ConfigError(
                f"{K.DPHE_CAPACITY}={self.dphe_capacity}: accepted is 0 (no limit) or "
                "the number of encrypted blocks per shard"
            )
        if self.dphe_keyholder_ca and not self.dphe_keyholder_url.startswith(
            "https://"
        ):
            raise ConfigError(
                f"{K.DPHE_KEYHOLDER_CA}={self.dphe_keyholder_ca!r} needs an https "
                f"{K.DPHE_KEYHOLDER_URL} (got {self.dphe_keyholder_url!r}): the CA "
                "verifies the keyholder's TLS certificate"
            )
        if self.dphe_prototypes:
            if self.secure_aggregation != "dphe" or not self.uses_prototypes:
                raise ConfigError(
                    f"{K.DPHE_PROTOTYPES}=true needs {K.SECURE_AGGREGATION}="
                    f'"dphe" and {K.STRATEGY}="fedhap" with a variant that uses '
                    "prototypes (full, fedhap-2, fedhap-3)"
                )
            if self.prototype_weighting != "mean":
                raise ConfigError(
                    f"{K.DPHE_PROTOTYPES}=true needs {K.PROTOTYPE_WEIGHTING}='mean': "
                    "the encrypted sums carry one holder count per class, not the "
                    "clients' sample counts"
                )
        if self.secure_aggregation != "dphe":
            return
        if self.strategy not in DPHE_STRATEGIES:
            raise ConfigError(
                f'{K.SECURE_AGGREGATION}="dphe" with {K.STRATEGY}={self.strategy!r}: '
                f"accepted strategies are {', '.join(DPHE_STRATEGIES)}"
            )
        if self.min_train_nodes < DPHE_MIN_CONTRIBUTORS:
            raise ConfigError(
                f"{K.MIN_TRAIN_NODES}={self.min_train_nodes} with "
                f'{K.SECURE_AGGREGATION}="dphe": DPHE needs at least '
                f"{DPHE_MIN_CONTRIBUTORS} contributors per aggregate (with 2, each "
                "learns the other's update from the average); set "
                f"{K.MIN_TRAIN_NODES} >= {DPHE_MIN_CONTRIBUTORS}"
            )
        if not self.dphe_key_dir:
            raise ConfigError(
                f'{K.DPHE_KEY_DIR} is empty: {K.SECURE_AGGREGATION}="dphe" needs the '
                "folder of key bundles written by `python -m crypto.keygen --out DIR "
                "--clients N`"
            )

    def _validate_dp_sgd(self) -> None:
        if not self.dp_max_grad_norm > 0:
            raise ConfigError(
                f"{K.DP_MAX_GRAD_NORM}={self.dp_max_grad_norm}: must be > 0"
            )
        if not 0 < self.dp_delta < 1:
            raise ConfigError(
                f"{K.DP_DELTA}={self.dp_delta}: accepted is 0 < delta < 1"
            )
        if not self.dp_target_epsilon >= 0:
            raise ConfigError(
                f"{K.DP_TARGET_EPSILON}={self.dp_target_epsilon}: accepted is 0 "
                "(use dp-noise-multiplier) or a per-round target epsilon > 0"
            )
        if not self.dp_noise_multiplier > 0:
            raise ConfigError(
                f"{K.DP_NOISE_MULTIPLIER}={self.dp_noise_multiplier}: must be > 0 "
                "(0 adds no noise and gives no guarantee)"
            )
        if not self.dp_sgd:
            return
        if self.strategy == "fedhap":
            if self.fedhap_variant != "fedhap-3":
                raise ConfigError(
                    f"{K.DP_SGD}=true with {K.FEDHAP_VARIANT}={self.fedhap_variant!r}: "
                    "DP-SGD needs per-sample losses; the discriminator is trained on "
                    "the client's codes without DP, so only 'fedhap-3' (no "
                    "discriminator) is accepted"
                )
            if self.fedhap_initial_prototypes != "centers":
                raise ConfigError(
                    f"{K.DP_SGD}=true with fedhap needs "
                    f"{K.FEDHAP_INITIAL_PROTOTYPES}='centers': under DP-SGD the "
                    "local (in-batch) triplet loss is dropped, so round 1 needs "
                    "prototypes to train against"
                )
            if not self.prototype_flip_epsilon > 0:
                raise ConfigError(
                    f"{K.DP_SGD}=true with fedhap needs {K.PROTOTYPE_FLIP_EPSILON} "
                    "> 0: the uploaded prototypes are computed from the client's data "
                    "and would otherwise be released without any guarantee"
                )
        elif self.loss != "csq":
            raise ConfigError(
                f"{K.DP_SGD}=true with {K.LOSS}={self.loss!r}: DP-SGD clips per-sample "
                "gradients, which bounds one record's influence only for a loss that "
                "is a sum of per-sample terms; DPSH's in-batch pairs couple samples. "
                "Accepted: loss='csq' (per-sample)"
            )

    def _validate_flipping(self) -> None:
        _choice(K.FLIP_CALIBRATION, self.flip_calibration, FLIP_CALIBRATIONS)
        _choice(K.PRIVACY_NOISE, self.privacy_noise, NOISE_MODES)
        for key, eps in (
            (K.CODE_FLIP_EPSILON, self.code_flip_epsilon),
            (K.PROTOTYPE_FLIP_EPSILON, self.prototype_flip_epsilon),
        ):
            if not eps >= 0 or eps == float("inf"):
                raise ConfigError(
                    f"{key}={eps}: accepted is 0 (no flipping) or a finite epsilon > 0"
                )
            if eps > 0:
                try:
                    flip_beta(eps, self.flip_calibration)
                except ValueError as exc:
                    raise ConfigError(f"{key}={eps}: {exc}") from None
        if self.prototype_flip_epsilon > 0 and not self.uses_prototypes:
            raise ConfigError(
                f"{K.PROTOTYPE_FLIP_EPSILON}={self.prototype_flip_epsilon}: needs "
                'strategy = "fedhap" with a variant that uses prototypes (full, '
                "fedhap-2, fedhap-3)"
            )

    @property
    def uses_discriminator(self) -> bool:
        """FedHAP with its discriminator (full and FedHAP-2)."""
        return self.strategy == "fedhap" and self.fedhap_variant in ("full", "fedhap-2")

    @property
    def uses_global_triplet(self) -> bool:
        """FedHAP with the global-prototype triplet loss (full and FedHAP-3)."""
        return self.strategy == "fedhap" and self.fedhap_variant in ("full", "fedhap-3")

    @property
    def uses_prototypes(self) -> bool:
        """Whether clients upload and the server broadcasts class prototypes."""
        return self.uses_discriminator or self.uses_global_triplet

    @property
    def required_train_mechanisms(self) -> tuple[str, ...]:
        """Privacy mechanisms every train reply must report for this run."""
        out = []
        if self.dp_sgd:
            out.append(K.MECH_DP_SGD)
        if self.prototype_flip_epsilon > 0:
            out.append(K.MECH_PROTOTYPES_FLIP)
        return tuple(out)

    @property
    def required_encode_mechanisms(self) -> tuple[str, ...]:
        """Privacy mechanisms every published-codes reply must report."""
        return (K.MECH_CODES_FLIP,) if self.code_flip_epsilon > 0 else ()

    def precision_ks(self) -> tuple[int, ...]:
        """Parse ``precision-k`` ("10,50,100") into sorted positive integers."""
        try:
            ks = tuple(sorted({int(tok) for tok in self.precision_k.split(",")}))
        except ValueError:
            ks = ()
        if not ks or ks[0] <= 0:
            raise ConfigError(
                f"{K.PRECISION_K}={self.precision_k!r}: accepted is a comma-separated "
                "list of positive integers, e.g. '10,50,100'"
            )
        return ks

    def to_dict(self) -> dict[str, Any]:
        """Return the resolved config with the dashed key names, JSON-friendly."""
        return {
            f.name.replace("_", "-"): getattr(self, f.name)
            for f in dataclasses.fields(self)
        }


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def _choice(key: str, value: str, accepted: tuple[str, ...]) -> None:
    if value not in accepted:
        raise ConfigError(f"{key}={value!r}: accepted are {', '.join(accepted)}")


def _coerce(key: str, raw: Any, kind: type) -> Any:
    """Convert a config value to the field's type, or raise naming the key."""
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ConfigError(f"{key}={raw!r}: must be true or false")
    if kind is int:
        if isinstance(raw, bool) or not (
            isinstance(raw, int) or (isinstance(raw, float) and raw.is_integer())
        ):
            raise ConfigError(f"{key}={raw!r}: must be an integer")
        return int(raw)
    if kind is float:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ConfigError(f"{key}={raw!r}: must be a number")
        return float(raw)
    if kind is str:
        if not isinstance(raw, str):
            raise ConfigError(f"{key}={raw!r}: must be a string")
        return raw
    raise TypeError(f"unsupported settings field type {kind} for {key}")
