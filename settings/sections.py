"""The config sections every method shares: privacy noise and flips, DP-SGD, updates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from privacy.flipping import CALIBRATIONS, flip_beta
from privacy.noise import NOISE_MODES, SEEDED
from settings.schema import ConfigError, Section, option
from strategies.catalog import METHODS


@dataclass(frozen=True)
class PrivacyConfig(Section):
    """Random Flipping of published codes and prototypes; where noise comes from."""

    NAME: ClassVar[str] = "privacy"
    TITLE: ClassVar[str] = "Random Flipping and privacy noise"

    code_flip_epsilon: float = option(
        0.0, "PHashing: Random Flipping of every published database code; 0 = off",
        low=0,
    )
    prototype_flip_epsilon: float = option(
        0.0,
        "FedHAP private mode: clients upload binarised, flipped prototypes; 0 = off",
        low=0,
    )
    flip_calibration: str = option(
        "rr",
        "`rr`: beta = 1/(1+e^eps), eps per bit; `paper`: beta = e^-eps, refused for "
        "eps <= ln 2",
        choices=CALIBRATIONS,
    )
    noise: str = option(
        "secure",
        "where privacy noise (flips, DP-SGD) comes from: `secure` = the OS CSPRNG; "
        "`seeded` = rebuilt from the run seed, for reproducing paper tables, NO "
        "guarantee against the server, refused outside the simulation engine",
        choices=NOISE_MODES,
    )

    @property
    def seeded(self) -> bool:
        """``privacy.noise = "seeded"``: the server can rebuild the privacy noise."""
        return self.noise == SEEDED

    def check(self, run: Any) -> None:
        """Each epsilon must give a valid flip probability; prototypes need FedHAP."""
        for name in ("code_flip_epsilon", "prototype_flip_epsilon"):
            eps = getattr(self, name)
            if eps > 0:
                try:
                    flip_beta(eps, self.flip_calibration)
                except ValueError as exc:
                    raise ConfigError(f"{self.key(name)}={eps}: {exc}") from None
        if self.prototype_flip_epsilon > 0 and not run.uses_prototypes:
            raise ConfigError(
                f"{self.key('prototype_flip_epsilon')}={self.prototype_flip_epsilon}: "
                'needs strategy = "fedhap" with a variant that uses prototypes (full, '
                "fedhap-2, fedhap-3)"
            )


@dataclass(frozen=True)
class DPSGDRunConfig(Section):
    """DP-SGD of the local training with Opacus."""

    NAME: ClassVar[str] = "dp-sgd"
    TITLE: ClassVar[str] = "DP-SGD (Opacus)"

    enabled: bool = option(False, "train the hashing network with DP-SGD (Opacus)")
    noise_multiplier: float = option(
        1.0,
        "sigma of the Gaussian noise",
        low=0,
        low_open=True,
        note="0 adds no noise and gives no guarantee",
    )
    target_epsilon: float = option(
        0.0,
        "> 0: per-round target epsilon per record; sigma is derived from it (Opacus "
        "RDP); 0 = use noise-multiplier",
        low=0,
    )
    max_grad_norm: float = option(
        1.0, "per-sample clipping norm C", low=0, low_open=True
    )
    delta: float = option(
        1e-5, "delta of every round's guarantee", low=0, high=1, low_open=True,
        high_open=True,
    )

    def check(self, run: Any) -> None:
        """DP-SGD bounds one record's influence only for a per-sample loss."""
        if self.enabled and not run.method.per_sample_objective and run.loss != "csq":
            raise ConfigError(
                f"{self.key('enabled')}=true with {run.key('loss')}={run.loss!r}: "
                "DP-SGD clips per-sample gradients, which bounds one record's "
                "influence only for a loss that is a sum of per-sample terms; DPSH's "
                "in-batch pairs couple samples. Accepted: loss='csq' (per-sample)"
            )


SPARSIFIERS = ("none", "top-k", "soft-threshold", "elastic-net")
"""How a client's update ``d = w_local - w_global`` is made sparse (``updates``)."""
ERROR_FEEDBACK = ("auto", "on", "off")
"""``updates.error-feedback``: whether a client carries its dropped residual."""


@dataclass(frozen=True)
class UpdatesConfig(Section):
    """Sparse model updates (the DPHE paper's; plaintext or under DPHE).

    ``sparsifier`` names the mechanism; ``sparsity`` is top-k's fraction (and, with
    ``soft-threshold`` or ``elastic-net``, an optional top-k applied after them).
    """

    NAME: ClassVar[str] = "updates"
    TITLE: ClassVar[str] = "Sparse updates"

    sparsifier: str = option(
        "top-k",
        "how the update d = w_local - w_global is made sparse: `none` (dense); "
        "`top-k` keeps the D - floor(sparsity * D) largest |d_i| after training "
        "(with sparsity = 0, the default, it keeps all: dense); `soft-threshold` "
        "sets d_i <- sign(d_i) * max(|d_i| - soft-threshold, 0) once after training; "
        "`elastic-net` is the DPHE paper's: the local loss gets the penalty "
        "elastic-net-l1 * ||d||_1 + (elastic-net-l2 / 2) * ||d||_2^2 during training, "
        "and the coordinates left within one Adam step (learning-rate) of w_global "
        "are then set to it, so d_i = 0 exactly there (fedavg / fedprox, without "
        "DP-SGD)",
        choices=SPARSIFIERS,
    )
    sparsity: float = option(
        0.0,
        "top-k: fraction of each update's values zeroed (by magnitude, after "
        "training); with `soft-threshold` / `elastic-net` a top-k applied after "
        "them; 0 = off",
        low=0, high=1, high_open=True,
    )
    error_feedback: str = option(
        "auto",
        "keep, on the node, what the sparsifier dropped from the update (the "
        "residual) and add it to the next round's update before sparsifying: `on`, "
        "`off`, or `auto` (on under secure aggregation, where DPHE's block top-k "
        "drops whole blocks; off for plaintext updates)",
        choices=ERROR_FEEDBACK,
    )
    soft_threshold: float = option(
        0.0,
        "`soft-threshold` only: the threshold t subtracted from every |d_i| after "
        "training (the elastic net's proximal step, once, on the finished update)",
        low=0,
    )
    elastic_net_l1: float = option(
        0.0,
        "`elastic-net` only: lambda_1 of the training-time penalty "
        "lambda_1 * ||w - w_global||_1 (> 0: it makes the zeros)",
        low=0,
    )
    elastic_net_l2: float = option(
        0.0,
        "`elastic-net` only: lambda_2 of the training-time penalty "
        "(lambda_2 / 2) * ||w - w_global||_2^2 (the paper's L1 ratio 0.5 is l1 = l2)",
        low=0,
    )

    def feeds_back(self, secure_aggregation: str) -> bool:
        """Whether the dropped residual is kept and added to the next update."""
        if self.error_feedback == "auto":
            return secure_aggregation != "none"
        return self.error_feedback == "on"

    def elastic_net_weights(self) -> tuple[float, float]:
        """``(l1, l2)`` of the training-time penalty; ``(0, 0)`` unless it is on."""
        if self.sparsifier != "elastic-net":
            return 0.0, 0.0
        return self.elastic_net_l1, self.elastic_net_l2

    def check(self, run: Any) -> None:
        """Each knob belongs to one sparsifier; the elastic net needs our loop."""
        name = self.key("sparsifier")
        if self.sparsifier == "none" and self.sparsity > 0:
            raise ConfigError(
                f"{self.key('sparsity')}={self.sparsity} with {name}=\"none\": "
                f'sparsity is top-k\'s fraction; set {name}="top-k" or leave it at 0'
            )
        for field in ("elastic_net_l1", "elastic_net_l2"):
            value = getattr(self, field)
            if value > 0 and self.sparsifier != "elastic-net":
                was = (
                    f'{name}="soft-threshold" with '
                    f"{self.key('soft_threshold')}={value}"
                    if field == "elastic_net_l1"
                    else "gone (it only rescaled the update by 1 / (1 + l2))"
                )
                raise ConfigError(
                    f"{self.key(field)}={value} with {name}={self.sparsifier!r}: "
                    "this key is the DPHE paper's training-time elastic-net penalty "
                    f'and needs {name}="elastic-net"; the one-off step after '
                    f"training it used to select is now {was}"
                )
        if self.soft_threshold > 0 and self.sparsifier != "soft-threshold":
            raise ConfigError(
                f"{self.key('soft_threshold')}={self.soft_threshold} with {name}="
                f'{self.sparsifier!r}: it needs {name}="soft-threshold"'
            )
        if self.sparsifier == "soft-threshold" and self.soft_threshold <= 0:
            raise ConfigError(
                f'{name}="soft-threshold" needs {self.key("soft_threshold")} > 0'
            )
        if (
            self.soft_threshold > 0
            and run.method.trains
            and not run.method.global_model(run)
        ):
            raise ConfigError(
                f"{self.key('soft_threshold')}={self.soft_threshold} with "
                f'{run.pfmh.key("mode")}="personalized": no model update is sent'
            )
        if self.sparsifier == "elastic-net":
            self._check_elastic_net(run)

    def _check_elastic_net(self, run: Any) -> None:
        name = self.key("sparsifier")
        if self.elastic_net_l1 <= 0:
            raise ConfigError(
                f'{name}="elastic-net" needs {self.key("elastic_net_l1")} > 0 (the '
                "L1 part makes the zeros; the L2 part alone only shrinks); got "
                f"{self.elastic_net_l1}"
            )
        if not run.method.baseline_losses:
            # the FedAvg / FedProx loop (hashing/train.py) adds the penalty; FedHAP,
            # PFMH and DPcode have their own loops
            accepted = [n for n in METHODS if METHODS[n].baseline_losses]
            raise ConfigError(
                f'{name}="elastic-net" with {run.key("strategy")}={run.strategy!r}: '
                "the penalty is added in the FedAvg / FedProx training loop "
                "(hashing/train.py); accepted strategies: "
                f"{', '.join(accepted)} (or use {name}=\"top-k\")"
            )
        if run.dp_sgd.enabled:
            raise ConfigError(
                f'{name}="elastic-net" with {run.dp_sgd.key("enabled")}=true: '
                "DP-SGD trains in its own loop (Opacus), without the penalty; use "
                f'{name}="top-k"'
            )
