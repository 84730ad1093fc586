"""DPHE's config section ``[tool.flwr.app.config.dphe]``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from privacy import DPHE_MIN_CONTRIBUTORS as MIN_CONTRIBUTORS
from settings.schema import ConfigError, Section, option

OBFUSCATORS = ("full", "djn")
"""``crypto.obfuscators.OBFUSCATORS``, repeated so that the config (and the
ClientApp, which parses it) imports no Paillier code; a test keeps the two equal."""
STRATEGIES = ("fedavg", "fedprox", "fedhap")
"""Strategies DPHE secure aggregation composes with."""
WEIGHTINGS = ("num-examples", "uniform")
SPARSITY_LAYOUTS = ("block", "shared", "element")
MAX_SCALE_BITS = 40


@dataclass(frozen=True)
class DPHEConfig(Section):
    """DPHE secure aggregation (``secure-aggregation = "dphe"``)."""

    NAME: ClassVar[str] = "dphe"
    TITLE: ClassVar[str] = 'DPHE secure aggregation (secure-aggregation = "dphe")'

    key_dir: str = option(
        "",
        "folder of the bundles from `python -m crypto.keygen`; the server reads "
        "`aggregator.json` (and `keyholder.json` in simulation), clients "
        "`client-<partition-id>.json` unless the node config gives `dphe-key-bundle`",
    )
    keyholder_url: str = option(
        "",
        "the keyholder service (deployment); empty = in-process keyholder from "
        "`keyholder.json` (simulation only)",
    )
    keyholder_ca: str = option(
        "",
        "CA certificate (PEM, on the ServerApp's machine) that signed the keyholder's "
        "TLS certificate; needs an `https` keyholder-url; empty = system trust store",
    )
    packing: int = option(
        0,
        "slots per Paillier plaintext: 0 = as many as the key holds, 1 = the paper",
        low=0,
    )
    scale_bits: int = option(
        20,
        "fixed point: values are multiples of 2^-scale-bits",
        low=1,
        high=MAX_SCALE_BITS,
    )
    clip: float = option(
        1.0,
        "update values are clipped to +-clip before encryption",
        low=0,
        low_open=True,
    )
    weighting: str = option(
        "uniform",
        "`uniform` (the paper's mean: every client weighs 1) or `num-examples` "
        "(FedAvg's weights, encrypted; each client's weight is checked by the "
        "keyholder against `max-weight`, but nothing verifies a claimed count)",
        choices=WEIGHTINGS,
    )
    max_weight: int = option(
        256,
        "with `num-examples`: largest weight a client may claim (fixed-point "
        "headroom; the keyholder names and drops a client above it)",
        low=1,
    )
    max_contributors: int = option(
        128, "most clients in one aggregate (slot headroom)", low=MIN_CONTRIBUTORS
    )
    capacity: int = option(
        0,
        "most encrypted blocks per shard (the paper's M); 0 = no limit, or with "
        "padding the automatic M (smallest divisor of the block count >= 1/4 of it)",
        low=0,
    )
    pad: bool = option(
        True,
        "pad every shard to exactly M blocks with tagged dummies: the aggregator "
        "learns only ceil(touched / M)",
    )
    prototypes: bool = option(
        False, "FedHAP: the class-prototype sums are DPHE-encrypted too"
    )
    sparsity_layout: str = option(
        "shared",
        "with updates.sparsity > 0, what the model stream's top-k keeps: `block` "
        "(each client's largest packed blocks of the phi-permuted space, so a client "
        "encrypts about (1 - sparsity) of the blocks; with updates.error-feedback the "
        "dropped mass is sent in later rounds), `shared` (the same blocks for every "
        "client, a fresh random set each round: the keyholder decrypts one client's "
        "worth of ciphertexts, not the union of everyone's top-k) or `element` "
        "(single values: nearly every block stays touched, about 10x the "
        "ciphertexts at 90% sparsity)",
        choices=SPARSITY_LAYOUTS,
    )
    obfuscators: str = option(
        "full",
        "`full`: r**n with r uniform (DCR only); `djn`: Damgard-Jurik-Nielsen "
        "short-exponent obfuscators from a fixed-base table, about 10x cheaper per "
        "ciphertext; adds the short-exponent assumption",
        choices=OBFUSCATORS,
    )
    obfuscator_pool_rounds: int = option(
        2,
        "each node precomputes the obfuscators of this many rounds ahead, in the "
        "background between messages, into its state folder (0600 files, each value "
        "used once and deleted); a round that finds the pool short draws the rest "
        "online and logs it; 0 = every obfuscator drawn online",
        low=0,
    )

    def check(self, run: Any) -> None:
        """Cross-key conditions of secure aggregation."""
        agg = run.key("secure_aggregation")
        if self.keyholder_ca and not self.keyholder_url.startswith("https://"):
            raise ConfigError(
                f"{self.key('keyholder_ca')}={self.keyholder_ca!r} needs an https "
                f"{self.key('keyholder_url')} (got {self.keyholder_url!r}): the CA "
                "verifies the keyholder's TLS certificate"
            )
        if self.prototypes:
            if run.secure_aggregation != "dphe" or not run.uses_prototypes:
                raise ConfigError(
                    f'{self.key("prototypes")}=true needs {agg}="dphe" and '
                    f'{run.key("strategy")}="fedhap" with a variant that uses '
                    "prototypes (full, fedhap-2, fedhap-3)"
                )
            if run.prototype_weighting != "mean":
                raise ConfigError(
                    f"{self.key('prototypes')}=true needs "
                    f"{run.key('prototype_weighting')}='mean': the encrypted sums "
                    "carry one holder count per class, not the clients' sample counts"
                )
        if run.secure_aggregation != "dphe":
            return
        if run.strategy not in STRATEGIES:
            raise ConfigError(
                f'{agg}="dphe" with {run.key("strategy")}={run.strategy!r}: '
                f"accepted strategies are {', '.join(STRATEGIES)}"
            )
        nodes = run.key("min_train_nodes")
        if run.min_train_nodes < MIN_CONTRIBUTORS:
            raise ConfigError(
                f'{nodes}={run.min_train_nodes} with {agg}="dphe": DPHE needs at '
                f"least {MIN_CONTRIBUTORS} contributors per aggregate (with 2, each "
                f"learns the other's update from the average); set {nodes} >= "
                f"{MIN_CONTRIBUTORS}"
            )
        if not self.key_dir:
            raise ConfigError(
                f'{self.key("key_dir")} is empty: {agg}="dphe" needs the folder of '
                "key bundles written by `python -m crypto.keygen --out DIR --clients N`"
            )


@dataclass(frozen=True)
class DPHERun:
    """What DPHE's set-up reads of a run (both apps derive the same parameters).

    Its ``dphe`` section, the code length (layout of the prototype sums) and the
    model update's sparsity under DPHE (``updates.sparsity``; 0 outside DPHE):
    :attr:`settings.run_settings.RunSettings.dphe_run`.
    """

    config: DPHEConfig
    code_length: int
    sparsity: float = 0.0
