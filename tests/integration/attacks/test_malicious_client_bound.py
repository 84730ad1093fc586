"""A malicious client under DPHE: what it can do to the average, measured.

The keyholder checks that a sum is honest (every contributor counted once, with
its own ciphertexts), not that a contributor's values are. A client may send any
update inside the clip, so it moves the weighted average by at most its weight
share times the clip range. This is a documented limit (docs/threat-model.md):
the test measures the shift through the real encrypt / aggregate / decrypt path
and checks it against that bound, so the bound in the docs is what the code does.
"""

from __future__ import annotations

import numpy as np
import pytest

from crypto import (
    AggregationContext,
    DPHEAggregator,
    DPHEParams,
    FixedPointParams,
    Keyholder,
    decode_average,
    encrypt_update,
    generate_keys,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
)

CLIENTS, DIM, CLIP = 10, 20, 1.0


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    paths = generate_keys(
        tmp_path_factory.mktemp("keys") / "k",
        num_clients=CLIENTS,
        key_bits=512,
        allow_test_keys=True,
    )
    return (
        load_keyholder_bundle(paths.keyholder),
        load_aggregator_bundle(paths.aggregator),
        [load_client_bundle(p) for p in paths.clients],
    )


@pytest.mark.parametrize(
    ("max_weight", "honest_weight"), [(1, 1), (4096, 180)], ids=["uniform", "examples"]
)
def test_one_client_moves_the_average_by_at_most_its_weight_share(
    bundles, max_weight, honest_weight
):
    keyholder_bundle, aggregator_bundle, clients = bundles
    fixed = FixedPointParams(
        scale_bits=16, clip=CLIP, max_weight=max_weight, max_summands=16
    )
    params = DPHEParams(dimension=DIM, packing=1, fixed_point=fixed)
    keyholder = Keyholder(keyholder_bundle, {"model": params})
    context = AggregationContext(keyholder.session_id(), "model", 1)
    rng = np.random.default_rng(0)
    honest = [rng.normal(scale=0.01, size=DIM) for _ in range(CLIENTS)]
    aggregator = DPHEAggregator(aggregator_bundle, params, context)
    for i, bundle in enumerate(clients):
        # client 0 sends the clip on every coordinate with the largest weight
        update = np.full(DIM, CLIP) if i == 0 else honest[i]
        weight = max_weight if i == 0 else honest_weight
        aggregator.add(
            i,
            encrypt_update(
                update,
                weight=weight,
                bundle=bundle,
                params=params,
                context=context,
                rng=rng,
            ),
        )
    average, _ = decode_average(
        keyholder.decrypt_aggregate(aggregator.result()), params
    )
    honest_average = np.mean(honest[1:], axis=0)
    shift = float(np.max(np.abs(average - honest_average)))
    share = max_weight / (max_weight + (CLIENTS - 1) * honest_weight)
    # the attacker reaches its bound: share x (clip - honest value) ...
    assert shift == pytest.approx(share * (CLIP - honest_average.min()), rel=0.02)
    # ... and cannot exceed share x 2 clip (the whole clip range)
    assert shift <= share * 2 * CLIP
    print(f"{max_weight=} {honest_weight=}: shift {shift:.3f}, share {share:.3f}")
