"""A node's privacy policy: what a run must give a node before it takes part.

The protected party decides: a SuperNode's operator writes a policy file (TOML) and
names it in the node config; the ClientApp checks every message of every run
against it before any work (``clients/node_policy.py`` is the Flower glue). The run
config, which the server's side writes, can make a run stricter than the policy,
never weaker.

Format (every key optional; an absent key is no rule)::

    version = 1
    secure-aggregation = "dphe"      # model updates only under DPHE ("none": no rule)
    refuse-seeded-noise = true   # default true with any epsilon, DP-SGD, budget rule

    [max-epsilon]                    # the largest epsilon of ONE release, with its unit
    codes = { epsilon = 16.0, unit = "per code" }       # or unit = "per bit"
    prototypes = { epsilon = 64.0, unit = "per record" }

    [dp-sgd]
    required = true                  # every run trains with DP-SGD
    min-noise-multiplier = 0.8       # sigma of the Gaussian, at least this

    [budget]                         # total epsilon per unit, across runs (ledger)
    "per record" = 200.0
    "per code" = 2000.0

Units are the neighbouring relations of :mod:`privacy.ledger` and
:mod:`privacy.flipping`: published codes are charged ``per code`` (one record's
code replaced; ``bits x`` the per-bit epsilon), prototype flips and DP-SGD ``per
record``. A code limit may be stated ``per bit``; it is compared with the
mechanism's per-bit epsilon. Codes or prototypes published without their flips
have an infinite epsilon: a limit or a budget in their unit refuses them.

Pure Python; no Flower, no torch.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privacy.flipping import UNIT_BIT, UNIT_CODE, epsilon_per_bit, epsilon_per_code
from privacy.ledger import UNIT_RECORD

POLICY_VERSION = 1
DPHE = "dphe"
SECURE_AGGREGATIONS = ("none", DPHE)

#: which units each epsilon limit may be stated in
LIMIT_UNITS = {"codes": (UNIT_CODE, UNIT_BIT), "prototypes": (UNIT_RECORD,)}

#: the text every refusal starts with; the server recognises refusals by it
REFUSAL_PREFIX = "node privacy policy refuses this run"

_TOP = (
    "version",
    "secure-aggregation",
    "refuse-seeded-noise",
    "max-epsilon",
    "dp-sgd",
    "budget",
)
_DP_SGD = ("required", "min-noise-multiplier")


class PolicyError(ValueError):
    """A policy file is invalid; the message names the key and what is accepted."""


@dataclass(frozen=True)
class EpsilonLimit:
    """The largest epsilon of one release, in ``unit``."""

    epsilon: float
    unit: str


@dataclass(frozen=True)
class NodePolicy:
    """What this node requires of every run (see the module docstring).

    Attributes
    ----------
    source : str
        Where the policy came from (a path), quoted in refusals.
    secure_aggregation : str
        ``"dphe"``: model updates leave only DPHE-encrypted; ``"none"``: no rule.
    max_code_epsilon, max_prototype_epsilon : EpsilonLimit or None
        Largest epsilon of one release of database codes / of prototypes.
    dp_sgd_required : bool
        Every run must train with DP-SGD.
    min_noise_multiplier : float or None
        Under DP-SGD, sigma must be at least this.
    refuse_seeded_noise : bool
        Refuse ``privacy.noise = "seeded"`` (the server could rebuild the noise).
    budget : mapping
        ``{unit: total epsilon}`` this node spends across all runs.
    """

    source: str = "<none>"
    secure_aggregation: str = "none"
    max_code_epsilon: EpsilonLimit | None = None
    max_prototype_epsilon: EpsilonLimit | None = None
    dp_sgd_required: bool = False
    min_noise_multiplier: float | None = None
    refuse_seeded_noise: bool = False
    budget: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunTerms:
    """What a run asks of this node, read from its run config by the node.

    ``labels`` maps each term to the run-config key (and value) quoted in a
    refusal, e.g. ``{"secure_aggregation": "secure-aggregation='none'"}``.

    Attributes
    ----------
    secure_aggregation : str
        ``"none"`` or ``"dphe"``.
    sends_model : bool
        Train replies carry a model update (not PFMH personalized, not DPcode).
    publishes_codes : bool
        The run asks for the node's database codes (retrieval evaluation).
    code_bits : int
        Bits per code.
    code_flip_beta : float or None
        Flip probability of published codes; ``None``: published as computed.
    publishes_prototypes : bool
        Train replies carry class prototypes (FedHAP with prototypes, PFMH).
    prototype_flip_beta : float or None
        Flip probability of prototype bits; ``None``: prototypes as computed.
    dp_sgd : bool
        Training uses DP-SGD.
    noise_multiplier : float or None
        DP-SGD's sigma; ``None`` when not known yet (derived from a target
        epsilon and the node's data size).
    target_epsilon : float
        DP-SGD's per-round target (> 0: sigma is derived from it).
    seeded_noise : bool
        ``privacy.noise = "seeded"``.
    """

    secure_aggregation: str = "none"
    sends_model: bool = True
    publishes_codes: bool = True
    code_bits: int = 32
    code_flip_beta: float | None = None
    publishes_prototypes: bool = False
    prototype_flip_beta: float | None = None
    dp_sgd: bool = False
    noise_multiplier: float | None = None
    target_epsilon: float = 0.0
    seeded_noise: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)

    def label(self, name: str) -> str:
        """Return the run-config key and value of term ``name``, for messages."""
        return self.labels.get(name, f"{name}={getattr(self, name)!r}")


@dataclass(frozen=True)
class Charge:
    """One release's privacy cost, as the node charges its own ledger."""

    mechanism: str
    epsilon: float
    unit: str
    delta: float = 0.0


# --- reading a policy ------------------------------------------------------------


def read_policy(path: str | Path) -> NodePolicy:
    """Read and validate a policy file (TOML).

    Raises
    ------
    PolicyError
        One line naming the file, the key, the value and what is accepted.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"privacy policy {source!r}: cannot read it: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"privacy policy {source!r}: not valid TOML: {exc}") from None
    return parse_policy(data, source=source)


def parse_policy(data: Mapping[str, Any], *, source: str = "<mapping>") -> NodePolicy:
    """Validate a parsed policy mapping (see the module docstring for the keys)."""

    def fail(key: str, value: Any, accepted: str) -> PolicyError:
        return PolicyError(
            f"privacy policy {source!r}: {key}={value!r}: accepted is {accepted}"
        )

    _unknown(data, _TOP, "", source)
    version = data.get("version", POLICY_VERSION)
    if version != POLICY_VERSION:
        raise fail("version", version, str(POLICY_VERSION))
    secure = data.get("secure-aggregation", "none")
    if secure not in SECURE_AGGREGATIONS:
        raise fail(
            "secure-aggregation", secure, " or ".join(map(repr, SECURE_AGGREGATIONS))
        )
    limits = data.get("max-epsilon", {})
    if not isinstance(limits, Mapping):
        raise fail("max-epsilon", limits, "a table")
    _unknown(limits, tuple(LIMIT_UNITS), "max-epsilon.", source)
    parsed: dict[str, EpsilonLimit] = {}
    for kind, entry in limits.items():
        key = f"max-epsilon.{kind}"
        if not isinstance(entry, Mapping) or set(entry) != {"epsilon", "unit"}:
            raise fail(key, entry, '{ epsilon = <number >= 0>, unit = "<unit>" }')
        eps = _number(entry["epsilon"])
        if eps is None or eps < 0:
            raise fail(f"{key}.epsilon", entry["epsilon"], "a finite number >= 0")
        if entry["unit"] not in LIMIT_UNITS[kind]:
            raise fail(
                f"{key}.unit", entry["unit"], " or ".join(map(repr, LIMIT_UNITS[kind]))
            )
        parsed[kind] = EpsilonLimit(eps, str(entry["unit"]))
    dp = data.get("dp-sgd", {})
    if not isinstance(dp, Mapping):
        raise fail("dp-sgd", dp, "a table")
    _unknown(dp, _DP_SGD, "dp-sgd.", source)
    required = dp.get("required", False)
    if not isinstance(required, bool):
        raise fail("dp-sgd.required", required, "true or false")
    sigma = dp.get("min-noise-multiplier")
    if sigma is not None:
        sigma = _number(sigma)
        if sigma is None or sigma <= 0:
            raise fail(
                "dp-sgd.min-noise-multiplier",
                dp["min-noise-multiplier"],
                "a finite number > 0",
            )
    budget = data.get("budget", {})
    if not isinstance(budget, Mapping):
        raise fail("budget", budget, 'a table {"<unit>" = <epsilon>}')
    budgets: dict[str, float] = {}
    for unit, value in budget.items():
        eps = _number(value)
        if not unit.strip() or eps is None or eps < 0:
            raise fail(f'budget."{unit}"', value, "a finite number >= 0 per unit")
        budgets[unit] = eps
    claims = bool(parsed) or required or sigma is not None or bool(budgets)
    seeded = data.get("refuse-seeded-noise", claims)
    if not isinstance(seeded, bool):
        raise fail("refuse-seeded-noise", seeded, "true or false")
    return NodePolicy(
        source=source,
        secure_aggregation=secure,
        max_code_epsilon=parsed.get("codes"),
        max_prototype_epsilon=parsed.get("prototypes"),
        dp_sgd_required=required,
        min_noise_multiplier=sigma,
        refuse_seeded_noise=seeded,
        budget=budgets,
    )


def _unknown(
    table: Mapping[str, Any], known: Sequence[str], prefix: str, source: str
) -> None:
    extra = sorted(set(table) - set(known))
    if extra:
        raise PolicyError(
            f"privacy policy {source!r}: unknown key {prefix}{extra[0]}; accepted: "
            + ", ".join(prefix + k for k in known)
        )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# --- the run's terms against the policy -----------------------------------------


def code_epsilon(terms: RunTerms, unit: str) -> float:
    """Epsilon of one release of the run's codes in ``unit`` (inf: no flips)."""
    if terms.code_flip_beta is None:
        return math.inf
    if unit == UNIT_BIT:
        return epsilon_per_bit(terms.code_flip_beta)
    return epsilon_per_code(terms.code_flip_beta, terms.code_bits)


def prototype_epsilon_floor(terms: RunTerms) -> float:
    """Least epsilon per record of one prototype release (one label per record).

    A record with ``L`` labels moves ``L`` prototypes: the charge is ``L`` times
    this (known once the node reads its labels).
    """
    if terms.prototype_flip_beta is None:
        return math.inf
    return epsilon_per_code(terms.prototype_flip_beta, terms.code_bits)


def _above(epsilon: float, limit: float) -> bool:
    """Whether ``epsilon > limit`` beyond float rounding.

    An epsilon set in the run config comes back from the flip probability it sets
    (4.0 per bit x 32 bits gives 128.00000000000003 per record), and must meet a
    limit of the same value.
    """
    return epsilon > limit and not math.isclose(epsilon, limit, rel_tol=1e-9)


def check_run(policy: NodePolicy, terms: RunTerms) -> list[str]:
    """Every rule of ``policy`` that ``terms`` break, one sentence each.

    Empty when the run is acceptable. Each sentence names the policy rule and the
    run-config value that breaks it.
    """
    out: list[str] = []
    if (
        policy.secure_aggregation == DPHE
        and terms.sends_model
        and terms.secure_aggregation != DPHE
    ):
        out.append(
            f"{terms.label('secure_aggregation')} but the policy requires "
            'secure-aggregation = "dphe" (model updates only encrypted)'
        )
    if policy.refuse_seeded_noise and terms.seeded_noise:
        out.append(
            f"{terms.label('seeded_noise')}: the server could rebuild every flip and "
            "DP-SGD draw; the policy refuses seeded noise (refuse-seeded-noise)"
        )
    limit = policy.max_code_epsilon
    if limit is not None and terms.publishes_codes:
        eps = code_epsilon(terms, limit.unit)
        if _above(eps, limit.epsilon):
            out.append(
                f"{terms.label('code_flip_beta')} publishes codes at epsilon "
                f"{_eps(eps)} {limit.unit}, above the policy's max-epsilon.codes = "
                f"{limit.epsilon:g} {limit.unit}"
            )
    limit = policy.max_prototype_epsilon
    if limit is not None and terms.publishes_prototypes:
        eps = prototype_epsilon_floor(terms)
        if _above(eps, limit.epsilon):
            out.append(
                f"{terms.label('prototype_flip_beta')} publishes prototypes at "
                f"epsilon {_eps(eps)} {limit.unit} or more, above the policy's "
                f"max-epsilon.prototypes = {limit.epsilon:g} {limit.unit}"
            )
    if policy.dp_sgd_required and terms.sends_model and not terms.dp_sgd:
        out.append(
            f"{terms.label('dp_sgd')} but the policy requires DP-SGD "
            "(dp-sgd.required = true)"
        )
    floor = policy.min_noise_multiplier
    if (
        floor is not None
        and terms.dp_sgd
        and terms.noise_multiplier is not None
        and terms.noise_multiplier < floor
    ):
        out.append(
            f"{terms.label('noise_multiplier')} gives DP-SGD noise multiplier "
            f"{terms.noise_multiplier:.4g}, below the policy's "
            f"dp-sgd.min-noise-multiplier = {floor:g}"
        )
    return out


def check_budget(
    policy: NodePolicy, spent: Mapping[str, float], charges: Sequence[Charge]
) -> list[str]:
    """Budget rules that ``charges`` (on top of ``spent``) would break.

    ``spent``: the node ledger's totals per unit (every earlier run). Units the
    policy gives no budget are not limited.
    """
    new: dict[str, float] = {}
    for c in charges:
        new[c.unit] = new.get(c.unit, 0.0) + c.epsilon
    out = []
    for unit, eps in sorted(new.items()):
        if unit not in policy.budget:
            continue
        used, total = spent.get(unit, 0.0), policy.budget[unit]
        if used + eps > total * (1 + 1e-12):
            out.append(
                f"this release costs epsilon {_eps(eps)} {unit}; the node has spent "
                f'{used:.6g} of its budget."{unit}" = {total:g} across runs '
                f"({_left(total, used):.6g} left)"
            )
    return out


def exhausted_units(
    policy: NodePolicy, spent: Mapping[str, float], units: Sequence[str]
) -> list[str]:
    """Budget rules broken before any cost is known: no budget left in ``units``."""
    out = []
    for unit in units:
        if (
            unit in policy.budget
            and _left(policy.budget[unit], spent.get(unit, 0.0)) <= 0
        ):
            out.append(
                f'the node\'s budget."{unit}" = {policy.budget[unit]:g} is spent '
                f"({spent.get(unit, 0.0):.6g} across earlier runs); this run charges "
                f"{unit}"
            )
    return out


def charged_units(terms: RunTerms) -> tuple[str, ...]:
    """Units the run charges on this node (known from the run's terms)."""
    units = set()
    if terms.publishes_codes:
        units.add(UNIT_CODE)
    if terms.dp_sgd or terms.publishes_prototypes:
        units.add(UNIT_RECORD)
    return tuple(sorted(units))


def refusal(
    reasons: Sequence[str], source: str, partition: tuple[int, int] | None = None
) -> str:
    """Return the one-line refusal a node replies with, naming every broken rule.

    ``partition``: ``(partition id, number of partitions)``, appended as
    `` [partition i of n]`` so the server's discovery knows how many nodes to wait
    for even when every node refuses (:func:`split_refusal`).
    """
    text = f"{REFUSAL_PREFIX} (policy {source}): " + "; ".join(reasons)
    if partition is not None:
        text += f" [partition {int(partition[0])} of {int(partition[1])}]"
    return text


_PARTITION = re.compile(r" \[partition (\d+) of (\d+)\]$")


def split_refusal(reason: str) -> tuple[str, tuple[int, int] | None]:
    """Split a refusal into its text and its ``(partition id, partitions)``."""
    match = _PARTITION.search(reason.rstrip())
    if match is None:
        return reason, None
    text = reason.rstrip()[: match.start()]
    return text, (int(match.group(1)), int(match.group(2)))


def _left(total: float, used: float) -> float:
    """Budget left; sums of float charges within 1e-9 of the total are spent."""
    left = total - used
    return 0.0 if left <= 1e-9 * max(total, 1.0) else left


def _eps(value: float) -> str:
    return "inf (published without flips)" if math.isinf(value) else f"{value:.6g}"
