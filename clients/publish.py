"""Code publication: the one place where a client's database codes leave the node.

Evaluation asks every client to encode its database partition with the global model
and return the codes (never raw data). Privacy mechanisms that perturb published
codes (Random Flipping / PHashing, a later feature) hook in here and only here.
"""

from __future__ import annotations

import numpy as np

from hashing.prototypes import ClassPrototypes
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


def publish_prototypes(
    protos: ClassPrototypes, *, settings: RunSettings, rng: np.random.Generator
) -> ClassPrototypes:
    """Return the class prototypes this client uploads to the FedHAP server.

    The one place where a client's prototypes leave the node; Random Flipping of
    binarised prototypes (a later feature) hooks in here.

    Parameters
    ----------
    protos : ClassPrototypes
        Relaxed per-class means (Eq. 5) of the classes this client holds.
    settings : RunSettings
        The run's settings.
    rng : np.random.Generator
        Seeded generator for any randomised mechanism.

    Returns
    -------
    ClassPrototypes
        Unchanged in this version (no perturbation is configured).
    """
    del settings, rng
    return protos
