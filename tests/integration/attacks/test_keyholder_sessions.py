"""The keyholder's session serves one run; what it decrypted survives its restarts.

Issue 35, finding 3 (keyholder side): a restarted keyholder opened a new session
and forgot everything, so run 1 {0,1,2,3} and run 2 {1,2,3} over the same model
(bit-identical updates with seeded training) were both decrypted: their difference
is client 0's update. Now the keyholder binds its session to one run id (the
clients check the proof) and, with a state file, refuses a sum for a (stream,
round, model) it decrypted before over another contributor set, across restarts.
Also: when a sum fails its tags but every contributor's own tags check, the
aggregator is at fault and no client is named. 512-bit test keys.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from clients.train_reply import finish_train_reply
from crypto import (
    AggregateRefused,
    AggregationContext,
    DPHEAggregator,
    Keyholder,
    encrypt_update,
)
from crypto.dphe import tag_shift
from settings import keys as K
from tests.integration.attacks.test_keyholder_attacks import (
    PARAMS,
    service,  # noqa: F401  (fixture)
    world,  # noqa: F401  (fixture)
)
from tests.integration.test_dphe_strategy import (
    NODES,
    RUN_ID,
    SHAPES,
    configure,
    key_dir,  # noqa: F401  (fixture)
    model,
    record,
    settings_for,
    strategy_for,
)

MODEL = bytes(range(32))  # the digest of the model every contributor received


def _sum(setup, kh, round_, ids, model_digest=MODEL):
    context = AggregationContext(kh.session_id(), "model", round_)
    rng = np.random.default_rng(round_)
    aggregator = DPHEAggregator(setup.aggregator_bundle, PARAMS, context)
    for i in ids:
        aggregator.add(
            i,
            encrypt_update(
                setup.updates[i],
                weight=1,
                bundle=setup.clients[i],
                params=PARAMS,
                context=context,
                rng=rng,
                model_digest=model_digest,
            ),
        )
    return aggregator


def test_cross_run_keyholder_refuses_another_set_after_a_restart(world, tmp_path):  # noqa: F811
    state = tmp_path / "keyholder-state.json"
    run1 = Keyholder(world.keyholder_bundle, {"model": PARAMS}, state_path=state)
    run1.bind_run(1)
    first = run1.decrypt_aggregate(_sum(world, run1, 1, [0, 1, 2, 3]).result())
    # the keyholder restarts (new session) for run 2: same model, same round
    run2 = Keyholder(world.keyholder_bundle, {"model": PARAMS}, state_path=state)
    assert run2.session_id() != run1.session_id()
    run2.bind_run(2)
    with pytest.raises(AggregateRefused) as info:
        run2.decrypt_aggregate(_sum(world, run2, 1, [1, 2, 3]).result())
    assert info.value.category == "replay"
    # another restart: the same set over that model is decrypted (nothing new)
    run3 = Keyholder(world.keyholder_bundle, {"model": PARAMS}, state_path=state)
    run3.bind_run(3)
    again = run3.decrypt_aggregate(_sum(world, run3, 1, [0, 1, 2, 3]).result())
    np.testing.assert_allclose(again[:-1], first[:-1], atol=4)
    # another model (training moved on): any set
    run4 = Keyholder(world.keyholder_bundle, {"model": PARAMS}, state_path=state)
    run4.bind_run(4)
    run4.decrypt_aggregate(_sum(world, run4, 1, [1, 2, 3], bytes(32)).result())


def test_cross_run_keyholder_binds_one_run_per_session(world, tmp_path):  # noqa: F811
    state = tmp_path / "state.json"
    kh = Keyholder(world.keyholder_bundle, {"model": PARAMS}, state_path=state)
    proof = kh.bind_run(7)
    assert kh.bind_run(7) == proof and kh.run_id == 7
    with pytest.raises(AggregateRefused, match=r"\(session\)"):
        kh.bind_run(8)
    restarted = Keyholder(world.keyholder_bundle, {"model": PARAMS}, state_path=state)
    with pytest.raises(AggregateRefused, match=r"\(session\)"):
        restarted.bind_run(7)  # run 7 belongs to the earlier session


@pytest.mark.usefixtures("task_identity")
def test_cross_run_client_refuses_a_session_bound_to_another_run(key_dir):  # noqa: F811
    settings = settings_for(key_dir)
    s = strategy_for(settings)  # its keyholder session is bound to RUN_ID
    zeros = record({k: np.zeros(v, np.float32) for k, v in SHAPES.items()})
    config = configure(s, zeros)[0].content[K.CONFIG]
    content = RecordDict(
        {
            K.ARRAYS: record(model(np.random.default_rng(0))),
            K.METRICS: MetricRecord({K.NUM_EXAMPLES: 3, K.TRAIN_LOSS: 1.0}),
        }
    )
    for run_id, cfg in (
        (RUN_ID + 1, config),  # the session replayed into another run
        (RUN_ID, ConfigRecord({**dict(config), K.DPHE_SESSION_PROOF: "00" * 32})),
    ):
        with pytest.raises(ValueError, match="dphe-session-proof"):
            finish_train_reply(
                content,
                global_arrays=zeros,
                settings=settings,
                partition_id=NODES[100],
                rng=np.random.default_rng(0),
                train_config=cfg,
                run_id=run_id,
            )


def test_malicious_client_identification_does_not_blame_a_client_for_the_aggregator(
    world,  # noqa: F811
):
    kh = Keyholder(world.keyholder_bundle, {"model": PARAMS})
    aggregator = _sum(world, kh, 1, [0, 1, 2, 3])
    honest = aggregator.result()
    public = world.aggregator_bundle.public_key
    # the aggregator adds 5 to one block's tag field: the sum fails its tags
    bump = public.raw_encrypt(5 << tag_shift(PARAMS))
    doctored = list(honest.ciphertexts)
    doctored[0] = doctored[0] * bump % public.nsquare
    with pytest.raises(AggregateRefused) as info:
        kh.decrypt_aggregate(dataclasses.replace(honest, ciphertexts=doctored))
    assert info.value.category == "integrity" and info.value.identify
    # every contributor's own tags check: nobody is named, nothing more decrypted
    with pytest.raises(AggregateRefused) as info:
        kh.identify("model", 1, aggregator.masked_blocks())
    assert info.value.category == "integrity" and not info.value.culprits
    with pytest.raises(AggregateRefused, match=r"\(replay\)"):
        kh.decrypt_aggregate(honest)
    with pytest.raises(AggregateRefused, match=r"\(replay\)"):
        kh.identify("model", 1, aggregator.masked_blocks())  # once only


def test_malicious_client_is_named_through_the_keyholder_service(world, service):  # noqa: F811
    """The same flow over HTTP: bind the run, refused sum, identify, the rest."""
    from crypto import RemoteKeyholder
    from crypto.binding import check_session_proof

    kh, _, url = service
    remote = RemoteKeyholder(url, world.aggregator_bundle.auth_token)
    proof = remote.bind_run(11)
    assert check_session_proof(world.clients[0].phi_seed, kh.session_id(), 11, proof)
    with pytest.raises(AggregateRefused, match=r"\(session\)"):
        remote.bind_run(12)
    context = AggregationContext(kh.session_id(), "model", 1)
    rng = np.random.default_rng(3)
    aggregator = DPHEAggregator(world.aggregator_bundle, PARAMS, context)
    for i in range(4):
        update = encrypt_update(
            world.updates[i],
            weight=1,
            bundle=world.clients[i],
            params=PARAMS,
            context=context,
            rng=rng,
            model_digest=MODEL,
        )
        if i == 1:  # client 1's blocks carry another block's ciphertexts
            shard = update.shards[0]
            update = dataclasses.replace(
                update,
                shards=[
                    dataclasses.replace(shard, ciphertexts=shard.ciphertexts[::-1])
                ],
            )
        aggregator.add(i, update)
    with pytest.raises(AggregateRefused) as info:
        remote.decrypt_aggregate(aggregator.result())
    assert info.value.category == "integrity" and info.value.identify
    assert remote.identify("model", 1, aggregator.masked_blocks()) == (1,)
    aggregator.drop([1])
    sums = remote.decrypt_aggregate(aggregator.result())
    assert int(sums[-1]) == 3
