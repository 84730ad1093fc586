"""The node's privacy policy, enforced on every message (Flower glue).

The policy (:mod:`privacy.policy`) is the node operator's, not the run's:

* node config ``privacy-policy`` = the policy file (TOML) on this node;
  ``FEDHASH_PRIVACY_POLICY`` (environment of the node process) sets one policy
  for every node of a simulation (Flower's simulation engine gives its virtual
  nodes no node config beyond their partition); the node config wins.
* node config ``state-dir`` (or ``FEDHASH_NODE_STATE_DIR``; default: the policy
  file's folder) holds the node's own ledger, ``privacy-ledger-partition-<id>.json``
  (:mod:`privacy.node_ledger`), which the policy's budget is checked against across
  runs.

:func:`policy_mod` wraps every handler of the ClientApp (outermost). Before the
handler runs it checks the run's terms against the policy and the charges known from
the config against the budget; a run that breaks a rule gets an error reply that
names each rule, and the handler never runs (no data read, nothing trained, no
arrays, no ``num-examples``, no ``train-loss``). After the handler it charges what
the reply reports in its ``privacy`` record to the node's ledger (atomically); a
reply whose actual charge would exceed the budget is withheld and replaced by a
refusal. Without a policy the run config decides, as before, with a warning.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from flwr.app import Context, Error, Message
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.common.constant import ErrorCode

from privacy.flipping import flip_beta
from privacy.node_ledger import NodeLedger, node_ledger_path
from privacy.policy import (
    Charge,
    NodePolicy,
    PolicyError,
    RunTerms,
    charged_units,
    check_budget,
    check_run,
    code_epsilon,
    exhausted_units,
    prototype_epsilon_floor,
    read_policy,
    refusal,
)
from settings import keys as K
from settings.privacy_records import read_privacy
from settings.run_settings import ConfigError, RunSettings
from settings.sections import DPSGDRunConfig, PrivacyConfig

logger = logging.getLogger(__name__)

ENV_POLICY = "FEDHASH_PRIVACY_POLICY"
ENV_STATE_DIR = "FEDHASH_NODE_STATE_DIR"
REFUSAL_CODE = ErrorCode.MOD_FAILED_PRECONDITION
"""Error code of a policy refusal (a Flower mod's precondition failed)."""

_warned: set[str] = set()


def policy_path(node_config: Mapping[str, Any]) -> str:
    """Return the policy file this node names (node config, then environment)."""
    path = str(node_config.get(K.PRIVACY_POLICY, "") or "")
    return path or os.environ.get(ENV_POLICY, "")


def node_policy(node_config: Mapping[str, Any]) -> NodePolicy | None:
    """Return this node's policy, or ``None`` (a bad one: PolicyError)."""
    path = policy_path(node_config)
    if not path:
        return None
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError as exc:
        raise PolicyError(
            f"node config {K.PRIVACY_POLICY}={path!r}: cannot read it: {exc}"
        ) from None
    return _read(path, stamp)


@lru_cache(maxsize=8)
def _read(path: str, stamp: int) -> NodePolicy:
    del stamp  # part of the cache key: an edited file is read again
    return read_policy(path)


def state_dir(node_config: Mapping[str, Any], policy: NodePolicy) -> Path:
    """Return the node's state folder (its ledger lives there)."""
    path = str(node_config.get(K.NODE_STATE_DIR, "") or "")
    path = path or os.environ.get(ENV_STATE_DIR, "")
    return Path(path) if path else Path(policy.source).resolve().parent


def run_terms(
    settings: RunSettings, *, noise_multiplier: float | None = None
) -> RunTerms:
    """Return what ``settings`` ask of this node, for :func:`privacy.policy.check_run`.

    ``noise_multiplier``: DP-SGD's sigma when the node computed it from a target
    epsilon (it depends on the node's number of examples).
    """
    p, dp = settings.privacy, settings.dp_sgd
    calibration = p.flip_calibration
    method = settings.method
    prototypes = method.prototypes(settings)
    if dp.target_epsilon <= 0:
        noise_multiplier = dp.noise_multiplier
    sigma_label = (
        f"{DPSGDRunConfig.key('noise_multiplier')}={dp.noise_multiplier}"
        if dp.target_epsilon <= 0
        else f"{DPSGDRunConfig.key('target_epsilon')}={dp.target_epsilon}"
    )
    return RunTerms(
        secure_aggregation=settings.secure_aggregation,
        sends_model=method.global_model(settings),
        publishes_codes=method.trains,
        code_bits=settings.code_length,
        code_flip_beta=(
            flip_beta(p.code_flip_epsilon, calibration)
            if p.code_flip_epsilon > 0
            else None
        ),
        publishes_prototypes=prototypes,
        prototype_flip_beta=(
            flip_beta(p.prototype_flip_epsilon, calibration)
            if p.prototype_flip_epsilon > 0 and method.flippable_prototypes
            else None
        ),
        dp_sgd=dp.enabled,
        noise_multiplier=noise_multiplier,
        target_epsilon=dp.target_epsilon,
        seeded_noise=settings.seeded_noise,
        labels={
            "secure_aggregation": (
                f"{RunSettings.key('secure_aggregation')}="
                f"{settings.secure_aggregation!r}"
            ),
            "seeded_noise": f"{PrivacyConfig.key('noise')}={p.noise!r}",
            "code_flip_beta": (
                f"{PrivacyConfig.key('code_flip_epsilon')}={p.code_flip_epsilon}"
            ),
            "prototype_flip_beta": (
                f"{PrivacyConfig.key('prototype_flip_epsilon')}="
                f"{p.prototype_flip_epsilon}"
                + (
                    f" (strategy {settings.strategy!r} publishes its prototypes "
                    "unflipped)"
                    if prototypes and not method.flippable_prototypes
                    else ""
                )
            ),
            "dp_sgd": f"{DPSGDRunConfig.key('enabled')}={str(dp.enabled).lower()}",
            "noise_multiplier": sigma_label,
        },
    )


def expected_charges(terms: RunTerms, message_type: str) -> list[Charge]:
    """Charges of a message known from the run config alone (before any work).

    Codes: exact. Prototype flips: their floor (one label per record). DP-SGD with
    a target epsilon: the target. DP-SGD with a noise multiplier depends on the
    node's data size: it is checked when the reply reports it.
    """
    from privacy.flipping import UNIT_CODE
    from privacy.ledger import UNIT_RECORD

    if message_type.startswith("query.") and message_type not in (
        K.QUERY_DESCRIBE,
        K.QUERY_DPCODE,
    ):
        if terms.publishes_codes:
            eps = code_epsilon(terms, UNIT_CODE)
            return [Charge(K.MECH_CODES_FLIP, eps, UNIT_CODE)]
        return []
    if message_type == K.QUERY_DESCRIBE:
        # the run's first release must fit: the server encodes at round 0
        return expected_charges(terms, K.QUERY_ENCODE)
    if message_type.startswith("train"):
        out = []
        if terms.publishes_prototypes:
            eps = prototype_epsilon_floor(terms)
            out.append(Charge(K.MECH_PROTOTYPES_FLIP, eps, UNIT_RECORD))
        if terms.dp_sgd and terms.target_epsilon > 0:
            out.append(Charge(K.MECH_DP_SGD, terms.target_epsilon, UNIT_RECORD))
        return out
    return []


def refusal_reply(msg: Message, reason: str) -> Message:
    """Return an error reply carrying only the refusal (no content at all)."""
    return Message(Error(code=REFUSAL_CODE, reason=reason), reply_to=msg)


def policy_mod(
    settings_of: Callable[[Context], RunSettings],
    partition_of: Callable[[Context], tuple[int, int]],
    noise_multiplier_of: Callable[[RunSettings, Context], float],
) -> Mod:
    """Build the mod that enforces the node's policy on every message.

    ``noise_multiplier_of(settings, context)``: DP-SGD's sigma on this node when
    the run gives a target epsilon (reads the node's number of examples).
    """

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        msg_type = msg.metadata.message_type
        try:
            policy = node_policy(context.node_config)
        except PolicyError as exc:  # a broken policy refuses everything
            logger.error("%s", exc)
            return refusal_reply(
                msg, refusal([str(exc)], policy_path(context.node_config))
            )
        if policy is None:
            if "none" not in _warned:
                _warned.add("none")
                logger.warning(
                    "this node has no privacy policy (node config %s or %s): the "
                    "run config decides its protections",
                    K.PRIVACY_POLICY,
                    ENV_POLICY,
                )
            return call_next(msg, context)
        try:
            settings = settings_of(context)
            pid, _ = partition_of(context)
        except (ConfigError, ValueError):
            return call_next(msg, context)  # the handler raises the same, no work
        sigma = None
        if (
            settings.dp_sgd.enabled
            and settings.dp_sgd.target_epsilon > 0
            and policy.min_noise_multiplier is not None
        ):
            sigma = noise_multiplier_of(settings, context)
        terms = run_terms(settings, noise_multiplier=sigma)
        reasons = check_run(policy, terms)
        ledger = NodeLedger(
            node_ledger_path(state_dir(context.node_config, policy), pid), client=pid
        )
        if not reasons and policy.budget:
            try:
                spent = ledger.spent()
            except (OSError, ValueError) as exc:  # fail closed
                reasons = [f"cannot read the node's ledger: {exc}"]
            else:
                units = charged_units(terms) if msg_type == K.QUERY_DESCRIBE else ()
                reasons = check_budget(
                    policy, spent, expected_charges(terms, msg_type)
                ) + exhausted_units(policy, spent, units)
        if reasons:
            text = refusal(reasons, policy.source, partition_of(context))
            logger.warning("partition %d: %s: %s", pid, msg_type, text)
            return refusal_reply(msg, text)
        reply = call_next(msg, context)
        if reply.has_error() or K.PRIVACY not in reply.content:
            return reply
        uses = read_privacy(reply.content[K.PRIVACY])
        charges = [Charge(u.mechanism, u.epsilon, u.unit, u.delta) for u in uses]
        server_round = (
            int(msg.content[K.CONFIG].get(K.SERVER_ROUND, 0))
            if (K.CONFIG in msg.content)
            else 0
        )
        try:
            reasons = ledger.charge_if_within(
                charges,
                partial(check_budget, policy),
                server_round=server_round,
                note=f"run {context.run_id} {msg_type}",
            )
        except (OSError, ValueError) as exc:  # fail closed: nothing uncharged leaves
            reasons = [f"cannot charge the node's ledger {str(ledger.path)!r}: {exc}"]
        if reasons:  # the reply is withheld: nothing of it leaves the node
            text = refusal(reasons, policy.source, partition_of(context))
            logger.warning("partition %d: %s: reply withheld: %s", pid, msg_type, text)
            return refusal_reply(msg, text)
        return reply

    return mod
