"""End-to-end tests of DPHE: users encrypt, the aggregator sums, the keyholder decrypts.

Accuracy bound used throughout: each user's encoded coordinate ``q_i`` is within
0.5 units (``2**-scale_bits``, plus float64 rounding far below that) of
``clip(w_i) * weight * 2**scale_bits``, so the decoded weighted average over ``N``
users with total weight ``W`` is within ``N * 0.5 / 2**scale_bits / W`` of the
weighted average of the clipped updates.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Sequence
from pathlib import Path

import gmpy2
import numpy as np
import pytest

from crypto import (
    AggregateRefused,
    AggregationContext,
    AggregatorBundle,
    ClientBundle,
    DPHEAggregator,
    DPHEParams,
    EncryptedSum,
    EncryptedUpdate,
    FixedPointParams,
    Keyholder,
    KeyholderBundle,
    KeyholderLike,
    Shard,
    decode_average,
    encrypt_update,
    generate_keys,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
    naive_aggregate,
    naive_decrypt,
    naive_encrypt,
)
from crypto.dphe import tag_shift

KEY_BITS = 512
CTX0 = AggregationContext(bytes(16), "model", 1)
"""A context for tests that never decrypt (the aggregator does not check it)."""
NUM_CLIENTS = 10
DIM = 24


@dataclasses.dataclass
class Keys:
    keyholder_bundle: KeyholderBundle
    aggregator_bundle: AggregatorBundle
    clients: list[ClientBundle]
    directory: Path


@dataclasses.dataclass
class Run:
    """A keyholder pinned to one stream's params, and the context of round 1."""

    keyholder: Keyholder
    context: AggregationContext


def new_run(keys: Keys, params: DPHEParams, **kwargs: int) -> Run:
    keyholder = Keyholder(keys.keyholder_bundle, {"model": params}, **kwargs)
    return Run(keyholder, AggregationContext(keyholder.session_id(), "model", 1))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    paths = generate_keys(
        tmp_path_factory.mktemp("dphe") / "keys",
        num_clients=NUM_CLIENTS,
        key_bits=KEY_BITS,
        allow_test_keys=True,
    )
    keyholder_bundle = load_keyholder_bundle(paths.keyholder)
    return Keys(
        keyholder_bundle=keyholder_bundle,
        aggregator_bundle=load_aggregator_bundle(paths.aggregator),
        clients=[
            load_client_bundle(p, client_id=i) for i, p in enumerate(paths.clients)
        ],
        directory=paths.directory,
    )


def make_updates(
    rng: np.random.Generator, count: int, dim: int, sparsity: float, scale: float = 0.3
) -> list[np.ndarray]:
    updates = []
    for _ in range(count):
        update = rng.normal(scale=scale, size=dim)
        update[rng.random(dim) < sparsity] = 0.0
        updates.append(update)
    return updates


def encrypt_all(
    keys: Keys,
    updates: Sequence[np.ndarray],
    weights: Sequence[int],
    params: DPHEParams,
    seed: int = 0,
    *,
    run: Run,
) -> list[EncryptedUpdate]:
    rng = np.random.default_rng(seed)
    return [
        encrypt_update(
            u,
            weight=w,
            bundle=keys.clients[i],
            params=params,
            context=run.context,
            rng=rng,
        )
        for i, (u, w) in enumerate(zip(updates, weights, strict=True))
    ]


def aggregate(
    keys: Keys,
    encrypted: Sequence[EncryptedUpdate],
    params: DPHEParams,
    ids: Sequence[int] | None = None,
    *,
    run: Run,
) -> tuple[EncryptedSum, DPHEAggregator]:
    aggregator = DPHEAggregator(keys.aggregator_bundle, params, run.context)
    for client_id in range(len(encrypted)) if ids is None else ids:
        aggregator.add(client_id, encrypted[client_id])
    return aggregator.result(), aggregator


def expected_average(
    updates: Sequence[np.ndarray], weights: Sequence[int], clip: float
) -> np.ndarray:
    clipped = [
        np.clip(u, -clip, clip) * w for u, w in zip(updates, weights, strict=True)
    ]
    return np.sum(clipped, axis=0) / sum(weights)


def bound(count: int, total_weight: int, fp: FixedPointParams) -> float:
    return count * (0.5 + 1e-6) / 2**fp.scale_bits / total_weight


@pytest.mark.parametrize("num_clients", range(3, NUM_CLIENTS + 1))
@pytest.mark.parametrize("sparsity", [0.0, 0.9], ids=["dense", "sparse90"])
@pytest.mark.parametrize("packing", [1, 5])
@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "weighted"])
def test_decrypted_average_matches_plaintext(
    keys: Keys, num_clients: int, sparsity: float, packing: int, weighted: bool
) -> None:
    fp = FixedPointParams(scale_bits=20, clip=1.0, max_weight=50 if weighted else 1)
    params = DPHEParams(dimension=DIM, packing=packing, fixed_point=fp)
    run = new_run(keys, params)
    rng = np.random.default_rng(1000 * num_clients + 10 * packing + int(weighted))
    updates = make_updates(rng, num_clients, DIM, sparsity)
    weights = (
        rng.integers(1, 51, size=num_clients).tolist()
        if weighted
        else [1] * num_clients
    )
    encrypted = encrypt_all(keys, updates, weights, params, run=run)
    encrypted_sum, aggregator = aggregate(keys, encrypted, params, run=run)
    assert aggregator.contributors == num_clients
    assert encrypted_sum.summands == num_clients
    sums = run.keyholder.decrypt_aggregate(encrypted_sum)
    assert sums.dtype == np.int64 and sums.shape == (DIM + 1,)
    average, total_weight = decode_average(sums, params)
    assert total_weight == sum(weights)
    error = np.abs(average - expected_average(updates, weights, fp.clip)).max()
    assert error <= bound(num_clients, total_weight, fp)


def test_sparse_update_encrypts_only_touched_blocks(keys: Keys) -> None:
    params = DPHEParams(dimension=200)
    run = new_run(keys, params)
    update = np.zeros(200)
    update[[3, 50, 199]] = [0.1, -0.2, 0.3]
    encrypted = encrypt_update(
        update,
        weight=1,
        bundle=keys.clients[0],
        params=params,
        context=run.context,
        rng=np.random.default_rng(0),
    )
    assert encrypted.num_blocks == 4  # three non-zeros plus the weight coordinate
    assert len(encrypted.shards) == 1


def test_dropouts_average_over_survivors(keys: Keys) -> None:
    params = DPHEParams(dimension=DIM, packing=3)
    run = new_run(keys, params)
    rng = np.random.default_rng(7)
    updates = make_updates(rng, NUM_CLIENTS, DIM, 0.5)
    weights = [1] * NUM_CLIENTS
    encrypted = encrypt_all(keys, updates, weights, params, run=run)
    survivors = [0, 2, 3, 7, 9]
    encrypted_sum, aggregator = aggregate(
        keys, encrypted, params, ids=survivors, run=run
    )
    assert aggregator.contributor_ids == tuple(survivors)
    sums = run.keyholder.decrypt_aggregate(encrypted_sum)
    average, total_weight = decode_average(sums, params)
    assert total_weight == len(survivors)
    target = expected_average([updates[i] for i in survivors], [1] * 5, 1.0)
    assert np.abs(average - target).max() <= bound(5, 5, params.fixed_point)


def test_clipping_end_to_end(keys: Keys) -> None:
    fp = FixedPointParams(scale_bits=16, clip=0.5)
    params = DPHEParams(dimension=4, fixed_point=fp)
    run = new_run(keys, params)
    updates = [np.array([2.0, -3.0, 0.25, 0.0])] * 3
    encrypted = encrypt_all(keys, updates, [1, 1, 1], params, run=run)
    sums = run.keyholder.decrypt_aggregate(
        aggregate(keys, encrypted, params, run=run)[0]
    )
    average, _ = decode_average(sums, params)
    np.testing.assert_allclose(average, [0.5, -0.5, 0.25, 0.0], atol=1e-12)


def test_capacity_sharding_and_padding_leave_the_result_unchanged(keys: Keys) -> None:
    dim, capacity = 29, 5  # num_blocks = 30, divisible by the capacity
    base = DPHEParams(dimension=dim)
    sharded = dataclasses.replace(base, capacity=capacity)
    padded = dataclasses.replace(base, capacity=capacity, pad=True)
    rng = np.random.default_rng(3)
    updates = make_updates(rng, 4, dim, 0.7)
    updates[3][:] = rng.normal(scale=0.3, size=dim)  # one dense user: 30 blocks
    weights = [1, 1, 1, 1]
    results = {}
    for name, params in {"base": base, "sharded": sharded, "padded": padded}.items():
        run = new_run(keys, params)
        encrypted = encrypt_all(keys, updates, weights, params, seed=11, run=run)
        for update, enc in zip(updates, encrypted, strict=True):
            touched = np.count_nonzero(update) + 1
            if name == "base":
                assert enc.shard_sizes == [touched]
            elif name == "sharded":
                assert all(1 <= s <= capacity for s in enc.shard_sizes)
                assert sum(enc.shard_sizes) == touched
            else:
                assert all(s == capacity for s in enc.shard_sizes)
                assert len(enc.shard_sizes) == -(-touched // capacity)
        encrypted_sum, _ = aggregate(keys, encrypted, params, run=run)
        results[name] = run.keyholder.decrypt_aggregate(encrypted_sum)
    np.testing.assert_array_equal(results["sharded"], results["base"])
    np.testing.assert_array_equal(results["padded"], results["base"])


def test_aggregator_and_its_bundle_hold_no_secret(keys: Keys) -> None:
    params = DPHEParams(dimension=DIM, packing=2)
    run = new_run(keys, params)
    updates = make_updates(np.random.default_rng(5), 3, DIM, 0.3)
    encrypted = encrypt_all(keys, updates, [1, 1, 1], params, run=run)
    _, aggregator = aggregate(keys, encrypted, params, run=run)
    secret = keys.keyholder_bundle
    forbidden = [secret.phi_seed, secret.phi_seed.hex().encode()]
    for value in (secret.p, secret.q):
        size = (value.bit_length() + 7) // 8
        forbidden += [
            value.to_bytes(size, "big"),
            value.to_bytes(size, "little"),
            format(value, "x").encode(),
            str(value).encode(),
            gmpy2.to_binary(gmpy2.mpz(value)),
        ]
    for obj in (aggregator, keys.aggregator_bundle):
        dump = pickle.dumps(obj)
        assert b"PaillierPrivateKey" not in dump
        assert b"KeyholderBundle" not in dump
        for needle in forbidden:
            assert needle not in dump
    # the aggregator still works after a pickle round trip
    restored = pickle.loads(pickle.dumps(aggregator))
    assert restored.contributors == 3
    assert restored.result().to_json() == aggregator.result().to_json()
    run.keyholder.decrypt_aggregate(restored.result())


def test_two_encryptions_of_one_update_differ(keys: Keys) -> None:
    params = DPHEParams(dimension=8)
    run = new_run(keys, params)
    update = np.linspace(-0.5, 0.5, 8)
    a, b = encrypt_all(keys, [update, update], [1, 1], params, seed=0, run=run)[0], None
    b = encrypt_update(
        update,
        weight=1,
        bundle=keys.clients[0],
        params=params,
        context=run.context,
        rng=np.random.default_rng(0),
    )
    assert set(a.shards[0].ciphertexts).isdisjoint(b.shards[0].ciphertexts)
    np.testing.assert_array_equal(a.shards[0].block_ids, b.shards[0].block_ids)
    private = keys.keyholder_bundle.private_key
    # the data parts are equal; the tags differ (a fresh nonce per encryption)
    data = (1 << tag_shift(params)) - 1
    assert sorted(private.raw_decrypt(c) & data for c in a.shards[0].ciphertexts) == (
        sorted(private.raw_decrypt(c) & data for c in b.shards[0].ciphertexts)
    )
    assert a.attestation.nonce != b.attestation.nonce


def test_block_ids_are_doubly_permuted(keys: Keys) -> None:
    params = DPHEParams(dimension=99)
    run = new_run(keys, params)
    update = np.zeros(99)
    update[:10] = 0.1
    sent = [
        encrypt_update(
            update,
            weight=1,
            bundle=keys.clients[i],
            params=params,
            context=run.context,
            rng=np.random.default_rng(0),
        )
        .shards[0]
        .block_ids
        for i in range(2)
    ]
    # Same support, different user permutations: different ids on the wire.
    assert set(sent[0].tolist()) != set(sent[1].tolist())
    assert set(sent[0].tolist()) != set(range(10)) | {99}


# --- serialization ------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_update(keys: Keys) -> tuple[DPHEParams, EncryptedUpdate]:
    params = DPHEParams(dimension=DIM, capacity=4)
    run = new_run(keys, params)
    update = make_updates(np.random.default_rng(9), 1, DIM, 0.6)[0]
    return params, encrypt_update(
        update,
        weight=1,
        bundle=keys.clients[0],
        params=params,
        context=run.context,
        rng=np.random.default_rng(1),
    )


def test_array_round_trip(one_update: tuple[DPHEParams, EncryptedUpdate]) -> None:
    _, update = one_update
    arrays = update.to_arrays(KEY_BITS)
    assert arrays["block-ids"].dtype == np.int64
    assert arrays["shard-sizes"].dtype == np.int64
    assert arrays["ciphertexts"].dtype == np.uint8
    assert arrays["ciphertexts"].shape == (update.num_blocks, 2 * KEY_BITS // 8)
    assert arrays["key-id"].shape == (32,)
    back = EncryptedUpdate.from_arrays(arrays, key_bits=KEY_BITS)
    assert back.key_id == update.key_id
    assert back.shard_sizes == update.shard_sizes
    for a, b in zip(back.shards, update.shards, strict=True):
        np.testing.assert_array_equal(a.block_ids, b.block_ids)
        assert a.ciphertexts == b.ciphertexts


def _broken(arrays: dict[str, np.ndarray], key: str, value: object) -> dict:
    out = dict(arrays)
    if value is None:
        del out[key]
    else:
        out[key] = value
    return out


@pytest.mark.parametrize(
    ("key", "make", "match"),
    [
        ("ciphertexts", None, "lacks arrays"),
        ("block-ids", lambda a: a.astype(np.int32), "dtype int64"),
        ("ciphertexts", lambda a: a[:, :-1], "rows must be 128 bytes"),
        ("ciphertexts", lambda a: a.reshape(-1), "2-D"),
        ("ciphertexts", lambda a: a[:-1], "ciphertexts for"),
        ("shard-sizes", lambda a: a + 1, "sum to"),
        ("shard-sizes", lambda a: np.concatenate([a, [-1, 1]]), "negative"),
        ("key-id", lambda a: a[:16], "shape \\(32,\\)"),
        ("block-ids", lambda a: list(a), "numpy array"),
    ],
)
def test_from_arrays_rejects_malformed_parts(
    one_update: tuple[DPHEParams, EncryptedUpdate], key: str, make: object, match: str
) -> None:
    arrays = one_update[1].to_arrays(KEY_BITS)
    value = None if make is None else make(arrays[key])  # type: ignore[operator]
    with pytest.raises(ValueError, match=match):
        EncryptedUpdate.from_arrays(_broken(arrays, key, value), key_bits=KEY_BITS)


def test_encrypted_sum_json_round_trip(keys: Keys) -> None:
    params = DPHEParams(dimension=DIM, packing=4)
    run = new_run(keys, params)
    encrypted = encrypt_all(
        keys,
        make_updates(np.random.default_rng(2), 3, DIM, 0.5),
        [1] * 3,
        params,
        run=run,
    )
    encrypted_sum, _ = aggregate(keys, encrypted, params, run=run)
    data = encrypted_sum.to_json()
    back = EncryptedSum.from_json(data, params=params, key_bits=KEY_BITS)
    assert back.params == params and back.summands == 3
    assert back.context == encrypted_sum.context
    assert back.to_json() == data
    for field, value, match in [
        ("ciphertexts", ["xyz"] * len(data["ciphertexts"]), "hex"),
        ("ciphertexts", data["ciphertexts"][:-1], "as many as"),
        ("ciphertexts", ["f" * 1000] * len(data["ciphertexts"]), "at most"),
        ("block_ids", [10**6], "at most"),
        ("key_id", "nothex", "key_id"),
        ("session", "00", "session"),
        ("round", "1", "round"),
        ("params", {"dimension": 3}, "pinned"),
        ("contributions", [], "1 to"),
    ]:
        with pytest.raises(ValueError, match=match):
            EncryptedSum.from_json(data | {field: value}, params=params, key_bits=512)
    with pytest.raises(ValueError, match="exactly the fields"):
        EncryptedSum.from_json(data | {"extra": 1}, params=params, key_bits=512)
    # the keyholder's parser refuses the same, generically
    with pytest.raises(AggregateRefused, match="parameters"):
        run.keyholder.parse_request(data | {"stream": "other"})
    np.testing.assert_array_equal(
        run.keyholder.decrypt_aggregate(run.keyholder.parse_request(data))[:-1].shape,
        (DIM,),
    )


# --- aggregator refusals ------------------------------------------------------------


def _replace_shard(
    update: EncryptedUpdate, index: int, shard: Shard
) -> EncryptedUpdate:
    shards = list(update.shards)
    shards[index] = shard
    return EncryptedUpdate(
        key_id=update.key_id,
        shards=shards,
        touch_mac=update.touch_mac,
        attestation=update.attestation,
    )


def test_aggregator_rejects_bad_updates_and_keeps_its_state(
    keys: Keys, one_update: tuple[DPHEParams, EncryptedUpdate]
) -> None:
    params, good = one_update
    n = keys.aggregator_bundle.n
    first = good.shards[0]
    ids, cts = first.block_ids, first.ciphertexts
    other_id = int(good.shards[1].block_ids[0])
    cases = [
        (
            EncryptedUpdate(
                b"\x00" * 32, good.shards, good.touch_mac, good.attestation
            ),
            "another key",
        ),
        (
            EncryptedUpdate(good.key_id, [], good.touch_mac, good.attestation),
            "no shards",
        ),
        (EncryptedUpdate(good.key_id, good.shards), "touch MAC"),
        (_replace_shard(good, 0, Shard(ids.copy(), cts[:-1])), "ciphertexts"),
        (
            _replace_shard(good, 0, Shard(np.r_[ids[:-1], 10**6], cts)),
            "outside \\[0, 25\\)",
        ),
        (_replace_shard(good, 0, Shard(np.r_[ids[:-1], -1], cts)), "outside"),
        (
            _replace_shard(good, 0, Shard(np.r_[ids[:-1], ids[0]], cts)),
            "more than once",
        ),
        (
            _replace_shard(good, 0, Shard(np.r_[ids[:-1], other_id], cts)),
            "across all shards",
        ),
        (
            _replace_shard(good, 0, Shard(ids, [*cts[:-1], n * n])),
            "outside \\(0, n\\*\\*2\\)",
        ),
        (
            _replace_shard(good, 0, Shard(ids, [*cts[:-1], 0])),
            "outside \\(0, n\\*\\*2\\)",
        ),
        (_replace_shard(good, 0, Shard(ids, [*cts[:-1], n])), "not coprime"),
        (_replace_shard(good, 0, Shard(ids, [*cts[:-1], 1.5])), "not an integer"),
        (_replace_shard(good, 0, Shard(ids.astype(float), cts)), "1-D integers"),
        (_replace_shard(good, 0, Shard(ids[:0], [])), "empty"),
        (
            EncryptedUpdate(
                key_id=good.key_id,
                shards=[
                    Shard(
                        np.concatenate([s.block_ids for s in good.shards]),
                        [c for s in good.shards for c in s.ciphertexts],
                    )
                ],
                touch_mac=good.touch_mac,
                attestation=good.attestation,
            ),
            "above the capacity 4",
        ),
        ("not an update", "EncryptedUpdate"),
    ]
    aggregator = DPHEAggregator(keys.aggregator_bundle, params, CTX0)
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            aggregator.add(0, bad)  # type: ignore[arg-type]
        assert aggregator.contributors == 0
    with pytest.raises(ValueError, match="unknown client id 99"):
        aggregator.add(99, good)
    with pytest.raises(ValueError, match="client id must be an integer"):
        aggregator.add(True, good)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no contributions"):
        aggregator.result()
    aggregator.add(0, good)
    with pytest.raises(ValueError, match="already added"):
        aggregator.add(0, good)
    assert aggregator.contributors == 1
    aggregator.start()
    assert aggregator.contributors == 0
    aggregator.add(0, good)  # a new aggregate accepts the client again


def test_aggregator_checks_padded_shard_sizes(keys: Keys) -> None:
    params = DPHEParams(dimension=29, capacity=5, pad=True)
    run = new_run(keys, params)
    update = np.zeros(29)
    update[0] = 0.1
    good = encrypt_update(
        update,
        weight=1,
        bundle=keys.clients[0],
        params=params,
        context=run.context,
        rng=np.random.default_rng(0),
    )
    assert good.shard_sizes == [5]
    shard = good.shards[0]
    short = EncryptedUpdate(
        good.key_id,
        [Shard(shard.block_ids[:4], shard.ciphertexts[:4])],
        good.touch_mac,
        good.attestation,
    )
    with pytest.raises(ValueError, match="exactly capacity = 5"):
        DPHEAggregator(keys.aggregator_bundle, params, CTX0).add(0, short)


def test_aggregator_refuses_more_than_max_summands(keys: Keys) -> None:
    params = DPHEParams(dimension=4, fixed_point=FixedPointParams(max_summands=3))
    run = new_run(keys, params)
    encrypted = encrypt_all(keys, [np.full(4, 0.1)] * 4, [1] * 4, params, run=run)
    aggregator = DPHEAggregator(keys.aggregator_bundle, params, CTX0)
    for client_id in range(3):
        aggregator.add(client_id, encrypted[client_id])
    with pytest.raises(ValueError, match="max_summands = 3"):
        aggregator.add(3, encrypted[3])


def test_encrypt_update_rejects_bad_input(keys: Keys) -> None:
    params = DPHEParams(dimension=4)
    rng = np.random.default_rng(0)
    client = keys.clients[0]
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        encrypt_update(
            np.zeros(5), weight=1, bundle=client, params=params, context=CTX0, rng=rng
        )
    with pytest.raises(ValueError, match="non-finite"):
        encrypt_update(
            np.array([0, np.nan, 0, 0]),
            weight=1,
            bundle=client,
            params=params,
            context=CTX0,
            rng=rng,
        )
    with pytest.raises(ValueError, match="weight"):
        encrypt_update(
            np.zeros(4), weight=2, bundle=client, params=params, context=CTX0, rng=rng
        )
    with pytest.raises(ValueError, match="packing must be in"):
        encrypt_update(
            np.zeros(4),
            weight=1,
            bundle=client,
            params=DPHEParams(dimension=4, packing=15),
            context=CTX0,
            rng=rng,
        )


# --- keyholder refusals (the attacks are in tests/attacks/) --------------------------


def test_keyholder_refuses_fewer_than_three_contributors(keys: Keys) -> None:
    params = DPHEParams(dimension=6, packing=2)
    run = new_run(keys, params)
    updates = make_updates(np.random.default_rng(4), 4, 6, 0.0)
    encrypted = encrypt_all(keys, updates, [1] * 4, params, run=run)
    two, _ = aggregate(keys, encrypted, params, ids=range(2), run=run)
    with pytest.raises(AggregateRefused, match=r"refused \(contributors\)"):
        run.keyholder.decrypt_aggregate(two)
    strict = new_run(keys, params, min_contributors=4)
    encrypted = encrypt_all(keys, updates, [1] * 4, params, run=strict)
    three, _ = aggregate(keys, encrypted, params, ids=range(3), run=strict)
    with pytest.raises(AggregateRefused, match="contributors"):
        strict.keyholder.decrypt_aggregate(three)
    four, _ = aggregate(keys, encrypted, params, ids=range(4), run=strict)
    strict.keyholder.decrypt_aggregate(four)
    with pytest.raises(ValueError, match=">= 3"):
        new_run(keys, params, min_contributors=2)
    assert isinstance(strict.keyholder, KeyholderLike)
    assert issubclass(AggregateRefused, ValueError)


def test_keyholder_refuses_malformed_sums(keys: Keys) -> None:
    params = DPHEParams(dimension=6, packing=2)
    run = new_run(keys, params)
    updates = make_updates(np.random.default_rng(4), 3, 6, 0.0)
    good, _ = aggregate(
        keys, encrypt_all(keys, updates, [1] * 3, params, run=run), params, run=run
    )
    n = keys.keyholder_bundle.n
    ids = good.block_ids
    cases = [
        (dataclasses.replace(good, key_id=b"\x01" * 32), "malformed"),
        (dataclasses.replace(good, block_ids=np.r_[ids[:-1], 99]), "malformed"),
        (dataclasses.replace(good, block_ids=np.r_[ids[:-1], ids[0]]), "malformed"),
        (dataclasses.replace(good, block_ids=ids[:-1]), "malformed"),
        (
            dataclasses.replace(good, ciphertexts=[*good.ciphertexts[:-1], n * n]),
            "malformed",
        ),
        (
            dataclasses.replace(good, params=DPHEParams(dimension=6, packing=3)),
            "parameters",
        ),
    ]
    for bad, category in cases:
        with pytest.raises(AggregateRefused, match=f"refused \\({category}\\)"):
            run.keyholder.decrypt_aggregate(bad)
    run.keyholder.decrypt_aggregate(good)  # none of the refusals consumed the round


# --- naive baseline -----------------------------------------------------------------


def test_naive_baseline_decrypts_to_the_same_sums(keys: Keys) -> None:
    fp = FixedPointParams(scale_bits=18, max_weight=5)
    params = DPHEParams(dimension=8, packing=3, fixed_point=fp)
    run = new_run(keys, params)
    updates = make_updates(np.random.default_rng(8), 3, 8, 0.5)
    weights = [1, 5, 2]
    encrypted = encrypt_all(keys, updates, weights, params, run=run)
    dphe_sums = run.keyholder.decrypt_aggregate(
        aggregate(keys, encrypted, params, run=run)[0]
    )
    public = keys.aggregator_bundle.public_key
    naive = [
        naive_encrypt(u, weight=w, public_key=public, params=params)
        for u, w in zip(updates, weights, strict=True)
    ]
    assert all(len(c) == 9 for c in naive)
    total = naive_aggregate(naive, public)
    naive_sums = naive_decrypt(total, keys.keyholder_bundle.private_key, 3, params)
    np.testing.assert_array_equal(naive_sums, dphe_sums)
    with pytest.raises(ValueError, match="user 1 sent 8"):
        naive_aggregate([naive[0], naive[1][:-1]], public)
    with pytest.raises(ValueError, match="expected 9"):
        naive_decrypt(total[:-1], keys.keyholder_bundle.private_key, 3, params)
