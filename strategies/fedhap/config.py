"""FedHAP's config section ``[tool.flwr.app.config.fedhap]``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from settings.schema import ConfigError, Section, option

# full FedHAP, and the paper's ablations (Section 4.5): FedHAP-1 no global
# prototypes at all, FedHAP-2 prototypes only in the discriminator, FedHAP-3
# prototypes only in the global triplet loss (no discriminator).
VARIANTS = ("full", "fedhap-1", "fedhap-2", "fedhap-3")
TRIPLET_DISTANCES = ("cosine", "euclidean")
INITIAL_PROTOTYPES = ("none", "centers")
# hashing.fedhap.discriminator.DISCRIMINATORS, repeated so that the config check
# need not import torch; a test keeps the two equal
DISCRIMINATORS = ("concat", "projection")
DISCRIMINATOR_INPUTS = ("relaxed", "sign")


@dataclass(frozen=True)
class FedHAPConfig(Section):
    """FedHAP (``strategy = "fedhap"``): federated hashing with global prototypes."""

    NAME: ClassVar[str] = "fedhap"
    TITLE: ClassVar[str] = 'FedHAP (strategy = "fedhap")'

    variant: str = option(
        "full",
        "`full`, or the paper's ablations `fedhap-1` (no global prototypes, no "
        "discriminator), `fedhap-2` (prototypes only in the discriminator), "
        "`fedhap-3` (prototypes only in the triplet loss)",
        choices=VARIANTS,
    )
    triplet_margin: float = option(
        0.5, "triplet margin a; the paper gives no value", low=0, low_open=True
    )
    triplet_distance: str = option(
        "cosine",
        "`cosine` (paper default) or `euclidean` (Table 7)",
        choices=TRIPLET_DISTANCES,
    )
    mu: float = option(0.05, "weight of the quantization loss (paper)", low=0)
    lambda_: float = option(0.1, "weight of the adversarial loss (paper)", low=0)
    discriminator: str = option(
        "concat",
        "`concat`: the paper's D over [code, one-hot class]; `projection`: "
        "psi(phi(h)) + <embed(y), phi(h)> (Miyato & Koyama 2018), the class enters "
        "the score by construction",
        choices=DISCRIMINATORS,
    )
    discriminator_input: str = option(
        "relaxed",
        "what D sees of a local code b: `relaxed` (the paper: b itself) or `sign` "
        "(sign(b), gradient straight through, so reals and fakes are both binary)",
        choices=DISCRIMINATOR_INPUTS,
    )
    discriminator_hidden_dim: int = option(
        128, "hidden width of the two-layer discriminator", low=1
    )
    initial_prototypes: str = option(
        "none",
        "`centers`: round-1 prototypes are data-independent hash centres (the "
        "paper's H^0); required by FedHAP + DP-SGD",
        choices=INITIAL_PROTOTYPES,
    )

    @property
    def uses_discriminator(self) -> bool:
        """Full FedHAP and FedHAP-2 train the discriminator."""
        return self.variant in ("full", "fedhap-2")

    @property
    def uses_global_triplet(self) -> bool:
        """Full FedHAP and FedHAP-3 use the global-prototype triplet loss."""
        return self.variant in ("full", "fedhap-3")

    def check(self, run: Any) -> None:
        """DP-SGD needs per-sample losses, round-1 prototypes and flipped uploads."""
        if run.strategy != "fedhap" or not run.dp_sgd.enabled:
            return
        dp_key = run.dp_sgd.key("enabled")
        if self.variant != "fedhap-3":
            raise ConfigError(
                f"{dp_key}=true with {self.key('variant')}={self.variant!r}: "
                "DP-SGD needs per-sample losses; the discriminator is trained on "
                "the client's codes without DP, so only 'fedhap-3' (no "
                "discriminator) is accepted"
            )
        if self.initial_prototypes != "centers":
            raise ConfigError(
                f"{dp_key}=true with fedhap needs "
                f"{self.key('initial_prototypes')}='centers': under DP-SGD the "
                "local (in-batch) triplet loss is dropped, so round 1 needs "
                "prototypes to train against"
            )
        if not run.privacy.prototype_flip_epsilon > 0:
            raise ConfigError(
                f"{dp_key}=true with fedhap needs "
                f"{run.privacy.key('prototype_flip_epsilon')} > 0: the uploaded "
                "prototypes are computed from the client's data and would "
                "otherwise be released without any guarantee"
            )
