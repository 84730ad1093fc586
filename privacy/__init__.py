"""Privacy mechanisms and accounting: Random Flipping and a privacy ledger. No Flower.

See :mod:`privacy.flipping` for what the Random Flipping paper (PHashing, PITQ)
claims and what actually holds.
"""

from privacy.flipping import (
    CALIBRATIONS,
    PAPER,
    RANDOMIZED_RESPONSE,
    UNIT_BIT,
    UNIT_CODE,
    FlipGuarantee,
    PitqGuarantee,
    beta_paper,
    beta_randomized_response,
    check_epsilon,
    epsilon_per_bit,
    epsilon_per_code,
    flip_beta,
    flip_codes,
    flip_guarantee,
    pitq_guarantee,
)
from privacy.ledger import MechanismUse, PrivacyCharge, PrivacyLedger

DPHE_MIN_CONTRIBUTORS = 3
"""Fewest users in one DPHE aggregate: the DPHE paper's condition (Section 2.5), an
aggregate of fewer than 3 would let one user (or the server) recover another's
update. Defined here, beside the mechanisms, so that the keyholder
(:mod:`crypto.keyholder`) and the run config (:mod:`strategies.dphe.config`, which
imports no Paillier code) read one value."""

__all__ = [
    "DPHE_MIN_CONTRIBUTORS",
    "CALIBRATIONS",
    "PAPER",
    "RANDOMIZED_RESPONSE",
    "UNIT_BIT",
    "UNIT_CODE",
    "FlipGuarantee",
    "MechanismUse",
    "PitqGuarantee",
    "PrivacyCharge",
    "PrivacyLedger",
    "beta_paper",
    "beta_randomized_response",
    "check_epsilon",
    "epsilon_per_bit",
    "epsilon_per_code",
    "flip_beta",
    "flip_codes",
    "flip_guarantee",
    "pitq_guarantee",
]
