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

__all__ = [
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
