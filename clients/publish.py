"""Code publication: the one place where a client's database codes leave the node.

Evaluation asks every client to encode its database partition with the global model
and return the codes (never raw data). Privacy mechanisms that perturb published
codes (Random Flipping / PHashing, a later feature) hook in here and only here.
"""

from __future__ import annotations

import numpy as np

from settings.run_settings import RunSettings


def publish_codes(
    codes: np.ndarray, *, settings: RunSettings, rng: np.random.Generator
) -> np.ndarray:
    """Return the codes this client publishes for retrieval.

    Parameters
    ----------
    codes : np.ndarray
        (n, bits) int8 in {-1, +1}: sign of the global model's outputs.
    settings : RunSettings
        The run's settings (privacy mechanisms read their keys from here).
    rng : np.random.Generator
        Seeded generator for any randomised mechanism.

    Returns
    -------
    np.ndarray
        (n, bits) int8 in {-1, +1}. No perturbation is configured in this version,
        so the codes are returned unchanged.
    """
    del settings, rng  # used by perturbation mechanisms once they exist
    return codes
