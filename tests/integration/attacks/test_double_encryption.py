"""Two encryptions by one client in one round (issue 35).

A server that obtains two encryptions ``c1``, ``c2`` of one client for the same
(session, stream, round) holds ``c1 * c2**-1``: the client's tags cancel, so the
quotient is a tag-free encryption of the difference of the two plaintexts, which
multiplied into a later round's honest sum went through every check. Now a client
refuses a second encryption for the same (session, stream, round), and every
encryption carries a fresh nonce in its tags, so the quotient no longer cancels and
the keyholder refuses the doctored sum. 512-bit test keys.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from crypto import AggregateRefused, AggregationContext, encrypt_update
from tests.integration.attacks.test_keyholder_attacks import (
    PARAMS,
    encrypted,
    honest_sum,
    keyholder,
    phi_space,
    world,  # noqa: F401  (fixture)
)
from tests.integration.test_dphe_strategy import (
    NODES,
    SHAPES,
    client_reply,
    configure,
    key_dir,  # noqa: F401  (fixture)
    model,
    record,
    settings_for,
    strategy_for,
)


@pytest.mark.usefixtures("task_identity")
def test_double_encryption_client_refuses_a_second_encryption(key_dir):  # noqa: F811
    settings = settings_for(key_dir)
    s = strategy_for(settings)
    rng = np.random.default_rng(0)
    global_arrays = record({k: np.zeros(v, np.float32) for k, v in SHAPES.items()})
    configure(s, global_arrays)
    node = list(NODES)[0]
    client_reply(settings, node, global_arrays, model(rng), 3)
    with pytest.raises(ValueError, match="second encryption"):
        client_reply(settings, node, global_arrays, model(rng), 3)


def test_double_encryption_quotient_does_not_cancel_the_tag(world):  # noqa: F811
    kh = keyholder(world)
    # round 1: the server gets two encryptions of client 0, u and u + 0.25 e_0
    context1 = AggregationContext(kh.session_id(), "model", 1)
    rng = np.random.default_rng(1)
    first = encrypt_update(
        world.updates[0],
        weight=1,
        bundle=world.clients[0],
        params=PARAMS,
        context=context1,
        rng=rng,
    )
    changed = world.updates[0].copy()
    changed[0] += 0.25  # a retry that differs in one value
    second = encrypt_update(
        changed,
        weight=1,
        bundle=world.clients[0],
        params=PARAMS,
        context=context1,
        rng=rng,
    )
    nsquare = world.aggregator_bundle.n**2
    c1, c2 = phi_space(world, 0, first), phi_space(world, 0, second)
    quotient = {b: c1[b] * pow(c2[b], -1, nsquare) % nsquare for b in c1}
    # round 2: an honest sum of clients 0, 1, 2 ...
    context2, updates = encrypted(world, kh, 2, [0, 1, 2])
    honest = honest_sum(world, context2, updates, [0, 1, 2])
    # ... with the quotient multiplied in (dense: every block is in both)
    doctored = [
        c * quotient[b] % nsquare
        for b, c in zip(honest.block_ids.tolist(), honest.ciphertexts, strict=True)
    ]
    with pytest.raises(AggregateRefused) as info:
        kh.decrypt_aggregate(dataclasses.replace(honest, ciphertexts=doctored))
    assert info.value.category == "integrity"
