"""Publication: the only places where a client's codes or prototypes leave the node.

* :func:`publish_codes` -- database codes for retrieval evaluation (PHashing: Random
  Flipping with ``privacy.code-flip-epsilon``).
* :func:`publish_prototypes` -- FedHAP's class prototypes (private mode with
  ``privacy.prototype-flip-epsilon``: binarised prototypes, Random Flipping).
* :func:`publish_pfmh_prototypes` -- PFMH's class prototypes (no mechanism).

Each returns what is published together with the privacy mechanisms applied (with
their epsilon and its unit), which the client reports to the server's ledger.

What the epsilons mean (docs/methods/random-flipping.md): flipping with ``beta`` is
``ln((1-beta)/beta)``-DP per bit and ``bits`` times that per code, i.e. when one
record's code is replaced by any other code. That holds *given the hashing network*:
the network is trained on the same data and is not itself private unless trained
with DP-SGD, so these are guarantees for the released codes with the model fixed.
"""

from __future__ import annotations

import numpy as np
import torch

from hashing.prototypes import ClassPrototypes
from privacy.flipping import UNIT_CODE, epsilon_per_code, flip_beta, flip_codes
from privacy.ledger import UNIT_RECORD, MechanismUse
from privacy.noise import NoiseSource
from settings import keys as K
from settings.run_settings import RunSettings

CODES_MECHANISM = K.MECH_CODES_FLIP
PROTOTYPES_MECHANISM = K.MECH_PROTOTYPES_FLIP


def publish_codes(
    codes: np.ndarray, *, settings: RunSettings, noise: NoiseSource
) -> tuple[np.ndarray, list[MechanismUse]]:
    """Return the database codes this client publishes, and the mechanisms applied.

    Parameters
    ----------
    codes : np.ndarray
        (n, bits) int8 in {-1, +1}: sign of the global model's outputs.
    settings : RunSettings
        ``privacy.code-flip-epsilon`` (0 = publish as is) and
        ``privacy.flip-calibration``.
    noise : NoiseSource
        The node's privacy noise (:func:`clients.privacy_noise.node_noise`).

    Returns
    -------
    tuple
        (n, bits) int8 in {-1, +1}, and ``[]`` or one :class:`MechanismUse` with
        the true epsilon per code.
    """
    eps = settings.privacy.code_flip_epsilon
    if eps <= 0:
        return codes, []
    beta = flip_beta(eps, settings.privacy.flip_calibration)
    use = MechanismUse(
        CODES_MECHANISM, epsilon_per_code(beta, codes.shape[1]), 0.0, UNIT_CODE
    )
    return flip_codes(codes, beta, noise), [use]


def publish_prototypes(
    protos: ClassPrototypes,
    *,
    settings: RunSettings,
    noise: NoiseSource,
    labels_per_record: int = 1,
) -> tuple[ClassPrototypes, list[MechanismUse]]:
    """Return the class prototypes this client uploads, and the mechanisms applied.

    Without ``privacy.prototype-flip-epsilon`` the relaxed class means (Eq. 5) go as
    they are. In the private mode each prototype is binarised (sign, ties +1), every bit
    is flipped with the calibrated ``beta``, and the counts are replaced by 1, so
    the server learns neither the relaxed values nor the class sizes (it still
    learns which classes the client holds). The server's per-class mean of these
    +-1 codes followed by sign is a per-bit majority vote.

    Parameters
    ----------
    protos : ClassPrototypes
        Relaxed per-class means of the classes this client holds.
    settings : RunSettings
        ``privacy.prototype-flip-epsilon`` (0 = off) and ``privacy.flip-calibration``.
    noise : NoiseSource
        The node's privacy noise (:func:`clients.privacy_noise.node_noise`).
    labels_per_record : int
        Most labels any one record of this client has (1 for single-label data).
        Adding or removing one record moves the class mean of each of its labels,
        so it can change that many published prototypes.

    Returns
    -------
    tuple
        The prototypes to upload, and ``[]`` or one :class:`MechanismUse` with the
        true epsilon **per record** (add/remove one record, network fixed):
        ``labels_per_record * bits * L(beta)``, basic composition over the
        prototypes one record can change (each flipped independently).

    Raises
    ------
    ValueError
        If ``labels_per_record < 1``.
    """
    eps = settings.privacy.prototype_flip_epsilon
    if eps <= 0:
        return protos, []
    if isinstance(labels_per_record, bool) or labels_per_record < 1:
        raise ValueError(
            f"labels_per_record={labels_per_record!r}: must be an integer >= 1"
        )
    beta = flip_beta(eps, settings.privacy.flip_calibration)
    signs = np.where(protos.vectors >= 0, 1, -1).astype(np.int8)
    flipped = flip_codes(signs, beta, noise).astype(np.float32)
    use = MechanismUse(
        PROTOTYPES_MECHANISM,
        int(labels_per_record) * epsilon_per_code(beta, signs.shape[1]),
        0.0,
        UNIT_RECORD,
    )
    published = ClassPrototypes(
        classes=protos.classes,
        vectors=flipped,
        counts=np.ones_like(protos.counts),
    )
    return published, [use]


def labels_per_record(labels: np.ndarray | torch.Tensor) -> int:
    """Most labels any one record has: 1 for ``(n,)`` class ids, else max row sum.

    ``labels`` is ``(n,)`` integer class ids or ``(n, C)`` multi-hot {0, 1}.
    """
    values = np.asarray(labels)
    if values.ndim == 1:
        return 1
    if values.ndim != 2:
        raise ValueError(f"labels must be (n,) or (n, C), got shape {values.shape}")
    if values.shape[0] == 0:
        return 1
    return max(1, int((values != 0).sum(axis=1).max()))


def publish_pfmh_prototypes(protos: ClassPrototypes) -> ClassPrototypes:
    """Return the PFMH prototypes this client uploads: as computed (Eq. 5).

    PFMH's uploads are the unit-norm class means of the fused representation H,
    with the per-class counts and the ids of the classes the client holds. No
    privacy mechanism is applied (the paper has none;
    ``privacy.prototype-flip-epsilon`` is FedHAP's), so nothing is charged to the
    ledger: the server learns the client's classes, their sizes and the class
    means. docs/methods/pfmh.md says what this leaks.
    """
    return protos
