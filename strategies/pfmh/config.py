"""PFMH's config section ``[tool.flwr.app.config.pfmh]``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hashing.pfmh.forms import CONTRASTS
from settings.schema import ConfigError, Section, option

# personalized = only prototypes travel, the model stays on the client;
# fedavg = the model is also FedAvg'd
MODES = ("personalized", "fedavg")
# pfmh.variant -> the Table 2 ablation name of hashing.pfmh.losses.ABLATIONS
VARIANTS = {
    "full": "full",
    "wo-p": "w/o-P",
    "wo-pe": "w/o-PE",
    "wo-ls": "w/o-Ls",
    "wo-ll": "w/o-Ll",
}


@dataclass(frozen=True)
class PFMHConfig(Section):
    """PFMH (``strategy = "pfmh"``): prototype-based federated multi-modal hashing."""

    NAME: ClassVar[str] = "pfmh"
    TITLE: ClassVar[str] = 'PFMH (strategy = "pfmh")'

    mode: str = option(
        "personalized",
        "`personalized`: only prototypes travel, each client keeps its model in "
        "`context.state`; `fedavg`: the model is FedAvg'd too",
        choices=MODES,
    )
    variant: str = option(
        "full",
        "`full`, or the Table 2 ablations `wo-p`, `wo-pe`, `wo-ls`, `wo-ll`",
        choices=tuple(VARIANTS),
    )
    tau: float = option(
        0.07, "temperature of the prototype contrast (Eqs. 9-10)", low=0, low_open=True
    )
    alpha: float = option(0.01, "weight of similarity matching (Eq. 11)", low=0)
    beta: float = option(0.001, "weight of information preservation (Eq. 11)", low=0)
    contrast: str = option(
        "infonce",
        "form of the prototype contrast (Eqs. 9-10): `infonce`, the positive "
        "prototype in the denominator (as the released code's SupCon loss); "
        "`decoupled`, left out as the paper prints it (keeps pushing at cos = 1)",
        choices=CONTRASTS,
    )
    prototype_weight: float = option(
        1.0,
        "weight of the two prototype terms (Eqs. 9-10) in the total loss; the "
        "paper's Eq. 12 adds them with weight 1 (ours, to tune them like alpha and "
        "beta)",
        low=0,
    )
    k: int = option(512, "common latent dimension k = prototype dimension", low=1)
    dropout: float = option(
        0.1,
        "FeaExtractor dropout (ours; the paper gives none)",
        low=0,
        high=1,
        high_open=True,
    )

    @property
    def personalized(self) -> bool:
        """Models stay on the clients (only prototypes travel)."""
        return self.mode == "personalized"

    @property
    def ablation(self) -> str:
        """The Table 2 variant name (``hashing.pfmh.losses.ABLATIONS``)."""
        return VARIANTS[self.variant]

    def check(self, run: Any) -> None:
        """PFMH needs >= 2 modalities, in-batch pairs, and no DP-SGD."""
        if run.strategy != "pfmh":
            return
        if run.dataset in run.SINGLE_MODAL_DATASETS:
            raise ConfigError(
                f"{run.key('dataset')}={run.dataset!r} has a single modality; "
                'strategy "pfmh" fuses at least two: use dataset="multiview-digits" '
                "or an .npz with two or more x_<modality> arrays"
            )
        if run.batch_size < 2:
            raise ConfigError(
                f"{run.key('batch_size')}={run.batch_size} with "
                f'{run.key("strategy")}="pfmh": must be >= 2 (similarity matching '
                "compares pairs within a mini-batch)"
            )
        if run.dp_sgd.enabled:
            raise ConfigError(
                f'{run.dp_sgd.key("enabled")}=true with {run.key("strategy")}="pfmh": '
                "not implemented (the PFMH objective has in-batch pairs, so "
                "per-sample clipping would not bound one record's influence)"
            )
        updates = run.updates
        if self.mode == "personalized" and (
            updates.sparsity > 0
            or updates.elastic_net_l1 > 0
            or updates.elastic_net_l2 > 0
        ):
            raise ConfigError(
                f"{updates.key('sparsity')}/{updates.key('elastic_net_l1')}/"
                f"{updates.key('elastic_net_l2')} with {self.key('mode')}="
                '"personalized": no model update is sent in that mode; use '
                f'{self.key("mode")}="fedavg" or leave them at 0'
            )
