"""The config sections every method shares: privacy noise and flips, DP-SGD, updates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from privacy.flipping import CALIBRATIONS, flip_beta
from privacy.noise import NOISE_MODES, SEEDED
from settings.schema import ConfigError, Section, option


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
        if self.enabled and run.strategy != "fedhap" and run.loss != "csq":
            raise ConfigError(
                f"{self.key('enabled')}=true with {run.key('loss')}={run.loss!r}: "
                "DP-SGD clips per-sample gradients, which bounds one record's "
                "influence only for a loss that is a sum of per-sample terms; DPSH's "
                "in-batch pairs couple samples. Accepted: loss='csq' (per-sample)"
            )


@dataclass(frozen=True)
class UpdatesConfig(Section):
    """Sparse model updates (the DPHE paper's; plaintext or under DPHE)."""

    NAME: ClassVar[str] = "updates"
    TITLE: ClassVar[str] = "Sparse updates"

    sparsity: float = option(
        0.0,
        "fraction of each update's values zeroed (top-k by magnitude); 0 = dense",
        low=0, high=1, high_open=True,
    )
    elastic_net_l1: float = option(
        0.0, "elastic-net proximal step on the update before top-k; 0 = off", low=0
    )
    elastic_net_l2: float = option(
        0.0, "elastic-net proximal step (L2 part); 0 = off", low=0
    )
