"""DPcode's config section ``[tool.flwr.app.config.dpcode]``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from settings.schema import ConfigError, Section, option

SOURCES = ("frames", "codes")
"""``frames``: visual words of image patches (the paper); ``codes``: m-bit chunks of
the hash codes a trained model gives the client's items (beyond the paper)."""
IMAGE_DATASETS = ("digits", "cifar10")
VARIANTS = ("paper", "pruned")
"""``paper``: Alg. 1's primitive noise and Eq. 6 on infrequent candidates;
``pruned``: neither (same epsilon; docs/methods/dpcode.md shows it is more useful)."""


@dataclass(frozen=True)
class DPcodeConfig(Section):
    """DPcode (``strategy = "dpcode"``): private top-k frequent patterns, federated."""

    NAME: ClassVar[str] = "dpcode"
    TITLE: ClassVar[str] = 'DPcode federated analytics (strategy = "dpcode")'

    k: int = option(100, "patterns each client publishes and the merged top-k", low=1)
    epsilon: float = option(
        1.0, "each client's budget per frame (phase 1 + phase 2)", low=0, low_open=True
    )
    split: float = option(
        0.65,
        "share of epsilon for phase 1 (the paper finds 0.6-0.7 best)",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
    )
    max_length: int = option(3, "longest pattern (public)", low=1)
    variant: str = option(
        "paper",
        "`paper`: Alg. 1's primitive perturbation and Eq. 6 on infrequent "
        "candidates; `pruned`: neither (same epsilon, more useful)",
        choices=VARIANTS,
    )
    source: str = option(
        "frames",
        "`frames`: visual words of image patches (the paper); `codes`: m-bit "
        "chunks of the hash codes of a trained model (codes-model)",
        choices=SOURCES,
    )
    patch: int = option(
        4, "frames: patch side; patch^2 (a power of two) is the codebook size", low=1
    )
    stride: int = option(2, "frames: patch step", low=1)
    codes_model: str = option(
        "",
        "codes: a trained model's state dict (e.g. a run's model.pt) of this run's "
        "model / code-length / hidden-dim",
    )
    chunk_bits: int = option(4, "codes: bits per chunk (divides code-length)", low=1)

    def reads_codes_model(self, run: Any) -> bool:
        """Whether the run reads ``codes-model`` (DPcode over hash codes)."""
        return bool(run.strategy == "dpcode" and self.source == "codes")

    def check(self, run: Any) -> None:
        """Frames need images and a power-of-two codebook; codes need a model."""
        if run.strategy != "dpcode":
            return
        if self.source == "frames":
            if run.dataset not in IMAGE_DATASETS:
                raise ConfigError(
                    f"{run.key('dataset')}={run.dataset!r} with "
                    f'{self.key("source")}="frames": accepted datasets are '
                    f"{', '.join(IMAGE_DATASETS)} (frames are images; use "
                    f'{self.key("source")}="codes" for feature vectors)'
                )
            d = self.patch * self.patch
            if d < 2 or d & (d - 1):
                raise ConfigError(
                    f"{self.key('patch')}={self.patch}: the Hadamard codebook needs "
                    "patch^2 to be a power of two (accepted: 2, 4, 8, ...)"
                )
        elif not self.codes_model:
            raise ConfigError(
                f'{self.key("codes_model")} is empty: {self.key("source")}="codes" '
                "needs a trained model's state dict (e.g. <run dir>/model.pt)"
            )
        elif run.code_length % self.chunk_bits:
            raise ConfigError(
                f"{self.key('chunk_bits')}={self.chunk_bits}: must divide "
                f"{run.key('code_length')}={run.code_length}"
            )
        if run.secure_aggregation != "none":
            raise ConfigError(
                f'{run.key("strategy")}="dpcode" trains nothing: '
                f"{run.key('secure_aggregation')} must be 'none'"
            )
