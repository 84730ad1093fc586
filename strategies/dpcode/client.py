"""DPcode's client side: the ``query.dpcode`` action, one private release per node.

The node counts its own items (frames of its images, or chunks of its hash codes),
runs :func:`privacy.dpcode.dpcode_release` with noise from its node-local source
(``privacy.noise``: the OS CSPRNG unless the run is a seeded simulation) and
returns only the noisy top-k patterns, their noisy supports and the epsilon spent
(per frame). This is the one place a DPcode release leaves the node.
"""

from __future__ import annotations

from typing import Any

import torch
from flwr.app import RecordDict

from privacy.dpcode import dpcode_release
from privacy.ledger import MechanismUse
from privacy.noise import NoiseSource
from settings import keys as K
from settings.privacy_records import privacy_record
from settings.run_settings import RunSettings
from strategies.client_side import ClientSide
from strategies.dpcode.items import client_items, codebook
from strategies.dpcode.records import release_records

MECHANISM = "dpcode/patterns"
DPCODE = "dpcode"  # ArrayRecord: the published patterns and supports


def dpcode_reply(
    content: RecordDict,
    *,
    settings: RunSettings,
    data: Any,
    state: RecordDict,
    partition_id: int,
    device: torch.device,
    noise: NoiseSource,
) -> RecordDict:
    """Answer ``query.dpcode``: this node's DPcode release and its privacy report."""
    cfg = settings.dpcode
    model_state = (
        content[K.ARRAYS].to_torch_state_dict() if cfg.source == "codes" else None
    )
    items = client_items(settings, data.inputs, model_state=model_state, device=device)
    release = dpcode_release(
        items,
        k=cfg.k,
        epsilon=cfg.epsilon,
        split=cfg.split,
        codebook=codebook(settings),
        max_length=cfg.max_length,
        noise=noise,
        primitive_noise="paper" if cfg.variant == "paper" else "off",
        infrequent="laplace" if cfg.variant == "paper" else "prune",
    )
    arrays, config = release_records(release)
    use = MechanismUse(MECHANISM, release.epsilon_spent, release.delta, release.unit)
    return RecordDict(
        {DPCODE: arrays, K.CONFIG: config, K.PRIVACY: privacy_record([use])}
    )


CLIENT_SIDE = ClientSide(None, queries={DPCODE: dpcode_reply})
"""DPcode's client half: no training, one query (:mod:`strategies.client_side`)."""
