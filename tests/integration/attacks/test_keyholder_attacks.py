"""A malicious aggregator against the DPHE keyholder (issue 12, findings 3, 4, 6).

Each test runs one concrete attack through the real code path (client encryption,
:class:`crypto.DPHEAggregator`, :class:`crypto.Keyholder` or its HTTP service) and
asserts that the keyholder now refuses it, generically. Small test keys (512 bits).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient

from crypto import (
    AggregateRefused,
    AggregationContext,
    Contribution,
    DPHEAggregator,
    DPHEParams,
    EncryptedSum,
    FixedPointParams,
    Keyholder,
    encrypt_update,
    generate_keys,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
    pack,
)
from crypto.keyholder_service import create_app

DIM = 11
PARAMS = DPHEParams(
    dimension=DIM,
    packing=3,
    fixed_point=FixedPointParams(scale_bits=16, max_weight=4, max_summands=8),
)
GENERIC = re.compile(r"^aggregate refused \((\w+)\)$")


@dataclasses.dataclass
class World:
    keyholder_bundle: object
    aggregator_bundle: object
    clients: list
    updates: list


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    paths = generate_keys(
        tmp_path_factory.mktemp("attack") / "keys",
        num_clients=5,
        key_bits=512,
        allow_test_keys=True,
    )
    rng = np.random.default_rng(12)
    return World(
        keyholder_bundle=load_keyholder_bundle(paths.keyholder),
        aggregator_bundle=load_aggregator_bundle(paths.aggregator),
        clients=[load_client_bundle(p) for p in paths.clients],
        updates=[rng.uniform(-0.5, 0.5, size=DIM) for _ in range(5)],
    )


def keyholder(world: World) -> Keyholder:
    return Keyholder(world.keyholder_bundle, {"model": PARAMS})


def encrypted(world, kh, round_, ids, *, sparse=False):
    """Client updates of ``ids`` for one round, as the aggregator receives them."""
    context = AggregationContext(kh.session_id(), "model", round_)
    rng = np.random.default_rng(round_)
    out = {}
    for i in ids:
        update = world.updates[i].copy()
        if sparse:
            update[: DIM // 2] = 0.0
        out[i] = encrypt_update(
            update,
            weight=i + 1,
            bundle=world.clients[i],
            params=PARAMS,
            context=context,
            rng=rng,
        )
    return context, out


def honest_sum(world, context, updates, ids) -> EncryptedSum:
    aggregator = DPHEAggregator(world.aggregator_bundle, PARAMS, context)
    for i in ids:
        aggregator.add(i, updates[i])
    return aggregator.result()


def refused(kh, encrypted_sum, category):
    with pytest.raises(AggregateRefused) as info:
        kh.decrypt_aggregate(encrypted_sum)
    assert GENERIC.match(str(info.value)), str(info.value)
    assert info.value.category == category
    return info.value


def phi_space(world, client_id, update):
    """What the aggregator computes: client ``client_id``'s phi-space blocks."""
    phi_n = world.aggregator_bundle.phi_n(client_id, PARAMS.num_blocks)
    inverse = np.argsort(phi_n)
    ids = np.concatenate([inverse[s.block_ids] for s in update.shards])
    cts = [c for s in update.shards for c in s.ciphertexts]
    return dict(zip(ids.tolist(), cts, strict=True))


def test_cube_attack_is_refused(world):
    """c**3 of client 0 claimed as the sum of clients 0, 1, 2 (finding 3)."""
    kh = keyholder(world)
    context, updates = encrypted(world, kh, 1, [0, 1, 2])
    honest = honest_sum(world, context, updates, [0, 1, 2])
    nsquare = world.aggregator_bundle.n**2
    mine = phi_space(world, 0, updates[0])
    assert set(mine) == set(honest.block_ids.tolist())  # dense: every block
    cubed = [pow(mine[b], 3, nsquare) for b in honest.block_ids.tolist()]
    # the weight check alone passed this before: weights 1+1+1 = 3 = S
    refused(kh, dataclasses.replace(honest, ciphertexts=cubed), "integrity")


def test_replay_of_an_earlier_rounds_sum_is_refused(world):
    kh = keyholder(world)
    context1, updates1 = encrypted(world, kh, 1, [0, 1, 2])
    first = honest_sum(world, context1, updates1, [0, 1, 2])
    kh.decrypt_aggregate(first)
    refused(kh, first, "replay")  # the same request again
    # round 1's ciphertexts under round 2's context and MACs
    context2, updates2 = encrypted(world, kh, 2, [0, 1, 2])
    second = honest_sum(world, context2, updates2, [0, 1, 2])
    refused(kh, dataclasses.replace(second, ciphertexts=first.ciphertexts), "integrity")
    # a restarted keyholder (new session) refuses the old session's sums
    refused(keyholder(world), second, "session")


def test_differencing_within_a_round_is_refused(world):
    """{0,1,2} then {0,1,2,3} in one round would give client 3's update."""
    kh = keyholder(world)
    context, updates = encrypted(world, kh, 5, [0, 1, 2, 3])
    kh.decrypt_aggregate(honest_sum(world, context, updates, [0, 1, 2]))
    refused(kh, honest_sum(world, context, updates, [0, 1, 2, 3]), "replay")


def test_forged_or_duplicated_client_sets_are_refused(world):
    kh = keyholder(world)
    context, updates = encrypted(world, kh, 1, [0, 1, 2])
    honest = honest_sum(world, context, updates, [0, 1, 2])
    c = honest.contributions
    duplicated = (c[0], c[1], dataclasses.replace(c[1]))
    refused(kh, dataclasses.replace(honest, contributions=duplicated), "contributors")
    unknown = (c[0], c[1], dataclasses.replace(c[2], client_id=99))
    refused(kh, dataclasses.replace(honest, contributions=unknown), "contributors")
    two = honest_sum(world, context, updates, [0, 1])
    refused(kh, two, "contributors")
    # a fake 4th contributor: an encrypted block of zeros and a made-up MAC
    public = world.aggregator_bundle.public_key
    fill = public.raw_encrypt(pack([PARAMS.offset] * PARAMS.packing, PARAMS.slot_bits))
    fake = Contribution(3, honest.block_ids.copy(), bytes(32), c[2].attestation)
    padded = dataclasses.replace(
        honest,
        ciphertexts=[x * fill % public.nsquare for x in honest.ciphertexts],
        contributions=(*c, fake),
    )
    refused(kh, padded, "authentication")
    kh.decrypt_aggregate(honest)  # none of these consumed the round


def test_dropping_a_client_from_some_blocks_is_refused(world):
    kh = keyholder(world)
    context, updates = encrypted(world, kh, 1, [0, 1, 2], sparse=True)
    honest = honest_sum(world, context, updates, [0, 1, 2])
    victim = honest.contributions[1]
    dropped_block = int(victim.block_ids[0])
    # claim client 1 touched one block fewer: its MAC no longer verifies
    fewer = dataclasses.replace(victim, block_ids=victim.block_ids[1:])
    claims = (honest.contributions[0], fewer, honest.contributions[2])
    refused(kh, dataclasses.replace(honest, contributions=claims), "authentication")
    # keep the MAC but leave client 1's ciphertext out of that block
    aggregator = DPHEAggregator(world.aggregator_bundle, PARAMS, context)
    for i in (0, 2):
        aggregator.add(i, updates[i])
    without = aggregator.result()
    position = honest.block_ids.tolist().index(dropped_block)
    public = world.aggregator_bundle.public_key
    fill = public.raw_encrypt(pack([PARAMS.offset] * PARAMS.packing, PARAMS.slot_bits))
    others = {
        b: c
        for b, c in zip(without.block_ids.tolist(), without.ciphertexts, strict=True)
    }
    forged = list(honest.ciphertexts)
    forged[position] = others.get(dropped_block, fill) * fill % public.nsquare
    refused(kh, dataclasses.replace(honest, ciphertexts=forged), "integrity")


def test_parameters_other_than_the_pinned_ones_are_refused(world):
    kh = keyholder(world)
    context, updates = encrypted(world, kh, 1, [0, 1, 2])
    data = honest_sum(world, context, updates, [0, 1, 2]).to_json()
    for change in (
        {"packing": 1},
        {"dimension": 10**12},
        {"fixed_point": {**data["params"]["fixed_point"], "max_summands": 10**6}},
    ):
        with pytest.raises(AggregateRefused, match=r"refused \(parameters\)"):
            kh.parse_request(data | {"params": data["params"] | change})
    with pytest.raises(AggregateRefused, match=r"refused \(parameters\)"):
        kh.parse_request(data | {"stream": "prototypes"})


def test_phi_recovery_by_crafted_queries_is_refused(world):
    """Known plaintexts as a 'sum': the answer would map phi-space back (finding 3)."""
    kh = keyholder(world)
    context, updates = encrypted(world, kh, 1, [0, 1, 2])
    honest = honest_sum(world, context, updates, [0, 1, 2])
    public = world.aggregator_bundle.public_key
    offset = 3 * PARAMS.offset
    crafted = []
    for rank, _ in enumerate(honest.block_ids.tolist()):
        slots = [offset + rank * PARAMS.packing + s for s in range(PARAMS.packing)]
        crafted.append(public.raw_encrypt(pack(slots, PARAMS.slot_bits)))
    refused(kh, dataclasses.replace(honest, ciphertexts=crafted), "integrity")


def test_refusals_carry_no_decrypted_value(world, caplog):
    """Finding 4: neither the caller nor the logs see a slot sum or the weight."""
    kh = keyholder(world)
    context, updates = encrypted(world, kh, 1, [0, 1, 2])
    honest = honest_sum(world, context, updates, [0, 1, 2])
    private = world.keyholder_bundle.private_key
    nsquare = world.aggregator_bundle.n**2
    cubed = [pow(c, 3, nsquare) for c in honest.ciphertexts]
    secrets = set()
    for c in cubed + list(honest.ciphertexts):
        m = private.raw_decrypt(c)
        secrets |= {str(m), format(m, "x")}
        secrets |= {str(v) for v in (m & ((1 << 200) - 1),) if v > 999}
    secrets.add(str(1 + 2 + 3))  # the honest total weight is 6
    with caplog.at_level(logging.DEBUG):
        error = refused(kh, dataclasses.replace(honest, ciphertexts=cubed), "integrity")
    texts = [str(error), *(r.getMessage() for r in caplog.records)]
    for text in texts:
        assert not any(s in text for s in secrets if len(s) > 1), text
    assert not re.search(r"\d", str(error))
    # over HTTP: the 422 body is the same generic sentence
    client = TestClient(create_app(kh, world.aggregator_bundle.auth_token))
    answer = client.post(
        "/v1/decrypt-aggregate",
        json={
            "encrypted_sum": dataclasses.replace(honest, ciphertexts=cubed).to_json()
        },
        headers={"Authorization": f"Bearer {world.aggregator_bundle.auth_token}"},
    )
    assert answer.status_code == 422
    assert GENERIC.match(answer.json()["detail"])


# --- service resource limits (finding 6) ---------------------------------------------


@pytest.fixture()
def service(world):
    kh = keyholder(world)
    app = create_app(kh, world.aggregator_bundle.auth_token, max_concurrent=2)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", ws="none")
    )
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    yield kh, app, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def _post(url, token, data: bytes) -> int:
    request = urllib.request.Request(
        url + "/v1/decrypt-aggregate",
        data=data,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        },
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_service_limits_dimension_body_and_flood(world, service):
    kh, app, url = service
    token = world.aggregator_bundle.auth_token
    context, updates = encrypted(world, kh, 1, [0, 1, 2])
    data = honest_sum(world, context, updates, [0, 1, 2]).to_json()
    # dimension = 10**12: refused before any allocation (4xx, not a MemoryError/500)
    huge = data | {"params": data["params"] | {"dimension": 10**12, "pad": False}}
    assert _post(url, token, json.dumps({"encrypted_sum": huge}).encode()) == 422
    # a body over the limit: 413 without reading it all
    limit = app.state.max_body_bytes
    assert limit < 10 * 2**20
    assert _post(url, token, b" " * (limit + 1)) == 413
    deep = b"[" * 100_000 + b"]" * 100_000  # JSON too deep to parse
    assert _post(url, token, deep) in (413, 422)
    # a flood, bounded, on loopback: never a 5xx; the service stays healthy
    bodies = [
        json.dumps({"encrypted_sum": data | {"round": r}}).encode()
        for r in range(2, 42)
    ]
    with ThreadPoolExecutor(max_workers=8) as pool:
        codes = list(pool.map(lambda b: _post(url, token, b), bodies))
    assert all(code in (200, 422, 429) for code in codes), codes
    assert all(code < 500 for code in codes)
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        url + "/v1/health", timeout=10
    ) as answer:
        assert json.loads(answer.read())["status"] == "ok"
