"""Fast DPHE (issue 16): DJN / precomputed obfuscators and block-structured sparsity.

Small (512-bit) test keys; every decryption goes through the hardened keyholder
(tags, touch-set MACs, session, pinned stream, once per round).
"""

from __future__ import annotations

import dataclasses

import gmpy2
import numpy as np
import pytest

from crypto import (
    OBFUSCATORS,
    AggregateRefused,
    AggregationContext,
    DJNObfuscators,
    DPHEAggregator,
    DPHEParams,
    FixedPointParams,
    FullObfuscators,
    Keyholder,
    ObfuscatorPool,
    block_capacity,
    coordinate_blocks,
    decode_average,
    encrypt_update,
    generate_keys,
    kept_blocks,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
    make_obfuscators,
)
from hashing.update_sparsity import block_top_k_sparsify
from settings.run_settings import ConfigError, RunSettings
from strategies.dphe.config import DPHEConfig

KEY_BITS = 512
CLIENTS = 3
FP = FixedPointParams(scale_bits=16, clip=1.0, max_weight=1, max_summands=8)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict:
    paths = generate_keys(
        tmp_path_factory.mktemp("fast") / "keys",
        num_clients=CLIENTS,
        key_bits=KEY_BITS,
        allow_test_keys=True,
    )
    return {
        "keyholder": load_keyholder_bundle(paths.keyholder),
        "aggregator": load_aggregator_bundle(paths.aggregator),
        "clients": [
            load_client_bundle(p, client_id=i) for i, p in enumerate(paths.clients)
        ],
    }


def _round(keys: dict, params: DPHEParams, updates: list, obfuscators: list) -> tuple:
    keyholder = Keyholder(keys["keyholder"], {"model": params})
    context = AggregationContext(keyholder.session_id(), "model", 1)
    rng = np.random.default_rng(0)
    aggregator = DPHEAggregator(keys["aggregator"], params, context)
    sent = []
    for i, update in enumerate(updates):
        encrypted = encrypt_update(
            update,
            weight=1,
            bundle=keys["clients"][i],
            params=params,
            context=context,
            rng=rng,
            obfuscators=obfuscators[i],
        )
        sent.append(encrypted)
        aggregator.add(i, encrypted)
    sums = keyholder.decrypt_aggregate(aggregator.result())
    average, total = decode_average(np.asarray(sums), params)
    return average, total, sent


def test_obfuscator_names_match_settings():
    assert (
        tuple(OBFUSCATORS) == DPHEConfig.keys()["dphe.obfuscators"].metadata["choices"]
    )
    with pytest.raises(ValueError, match="obfuscators must be one of"):
        make_obfuscators("short", 35)


def test_djn_table_equals_square_and_multiply(keys):
    source = DJNObfuscators(keys["aggregator"].n)
    assert source.exponent_bits == KEY_BITS // 2
    for exponent in (0, 1, 255, 256, 2**source.exponent_bits - 1, 123456789**5):
        exponent %= 2**source.exponent_bits
        assert source.power(exponent) == source.base_power(exponent)
    with pytest.raises(ValueError, match="exponent_bits must be >="):
        DJNObfuscators(keys["aggregator"].n, exponent_bits=KEY_BITS // 2 - 1)


def test_obfuscators_are_nth_powers_of_units(keys):
    # r**n has order dividing lambda: raising to lambda gives 1 mod n**2
    bundle = keys["keyholder"]
    n = gmpy2.mpz(bundle.n)
    lam = gmpy2.lcm(bundle.p - 1, bundle.q - 1)
    for source in (FullObfuscators(bundle.n), DJNObfuscators(bundle.n)):
        values = {int(source.draw()) for _ in range(4)}
        assert len(values) == 4  # fresh each time
        for value in values:
            assert gmpy2.powmod(value, lam, n * n) == 1


@pytest.mark.parametrize("kind", ["full", "djn", "pool", "pool-2-workers"])
def test_every_obfuscator_source_decrypts_through_the_keyholder(keys, kind):
    dim = 150
    params = DPHEParams(dimension=dim, packing=4, fixed_point=FP, capacity=2, pad=True)
    rng = np.random.default_rng(1)
    updates = [
        rng.normal(scale=0.1, size=dim) * (rng.random(dim) < 0.05) for _ in "abc"
    ]
    n = keys["aggregator"].n
    if kind.startswith("pool"):
        sources = []
        for _ in updates:
            pool = ObfuscatorPool(DJNObfuscators(n))
            pool.precompute(8, workers=2 if kind.endswith("workers") else 1)
            assert len(pool) == 8
            sources.append(pool)
    else:
        sources = [make_obfuscators(kind, n) for _ in updates]
    average, total, _ = _round(keys, params, updates, sources)
    assert total == 3
    np.testing.assert_allclose(average, np.mean(updates, axis=0), atol=2.0**-16)
    if kind.startswith("pool"):
        for pool in sources:
            used = 8 - len(pool) + pool.drawn_online
            assert used >= 1 and pool.drawn_online == max(0, used - 8)


def test_pool_draws_online_when_empty(keys):
    pool = ObfuscatorPool(FullObfuscators(keys["aggregator"].n))
    pool.precompute(2)
    first = [pool.take() for _ in range(3)]
    assert len(set(first)) == 3 and pool.drawn_online == 1 and len(pool) == 0


def test_obfuscators_of_another_key_are_refused(keys, tmp_path):
    other = generate_keys(
        tmp_path, num_clients=3, key_bits=KEY_BITS, allow_test_keys=True
    )
    params = DPHEParams(dimension=10, packing=2, fixed_point=FP)
    with pytest.raises(ValueError, match="another public key"):
        encrypt_update(
            np.zeros(10),
            weight=1,
            bundle=keys["clients"][0],
            params=params,
            context=AggregationContext(bytes(16), "model", 1),
            rng=np.random.default_rng(0),
            obfuscators=FullObfuscators(load_aggregator_bundle(other.aggregator).n),
        )


def test_block_top_k_keeps_whole_blocks_and_forced_ones():
    blocks = np.array([0, 1, 2, 0, 1, 2, 3, 3, 3])
    update = np.array([5.0, 0.1, 0.0, 5.0, 0.1, 0.0, 1.0, 1.0, 1.0])
    out = block_top_k_sparsify(update, sparsity=0.5, blocks=blocks, num_blocks=4)
    np.testing.assert_array_equal(out, [5, 0, 0, 5, 0, 0, 1, 1, 1])
    forced = block_top_k_sparsify(
        update, sparsity=0.5, blocks=blocks, num_blocks=4, always=np.array([2])
    )
    np.testing.assert_array_equal(forced, [5, 0, 0, 5, 0, 0, 0, 0, 0])
    assert np.array_equal(
        block_top_k_sparsify(update, sparsity=0.0, blocks=blocks, num_blocks=4),
        update,
    )
    with pytest.raises(ValueError, match="blocks has"):
        block_top_k_sparsify(update, sparsity=0.5, blocks=blocks[:3], num_blocks=4)


def test_single_shard_params_and_refusals(keys):
    with pytest.raises(ValueError, match="single_shard=True needs pad"):
        DPHEParams(dimension=10, packing=1, fixed_point=FP, single_shard=True)
    params = DPHEParams(
        dimension=10, packing=1, fixed_point=FP, capacity=3, pad=True, single_shard=True
    )
    assert DPHEParams.from_dict(params.to_dict()) == params
    old = dataclasses.replace(params, capacity=11, single_shard=False).to_dict()
    del old["single_shard"]  # a streams file written before issue 16
    assert DPHEParams.from_dict(old).single_shard is False
    with pytest.raises(ValueError, match="more than the single shard"):
        encrypt_update(
            np.full(10, 0.5),
            weight=1,
            bundle=keys["clients"][0],
            params=params,
            context=AggregationContext(bytes(16), "model", 1),
            rng=np.random.default_rng(0),
        )


def test_kept_blocks_and_capacity():
    assert kept_blocks(4260, 0.9) == 426
    assert block_capacity(4260, 426) == 426
    assert kept_blocks(366, 0.9) == 37 and block_capacity(366, 37) == 61
    assert kept_blocks(10, 0.99) == 1


def test_block_sparse_users_send_one_padded_shard_and_decrypt(keys):
    dim = 400
    packing = 4
    num_blocks = -(-(dim + 1) // packing)
    keep = kept_blocks(num_blocks, 0.9)
    capacity = keep
    assert num_blocks % capacity  # no divisor needed with single_shard
    params = DPHEParams(
        dimension=dim,
        packing=packing,
        fixed_point=FP,
        capacity=capacity,
        pad=True,
        single_shard=True,
    )
    keyholder = Keyholder(keys["keyholder"], {"model": params})
    context = AggregationContext(keyholder.session_id(), "model", 1)
    rng = np.random.default_rng(3)
    updates = []
    for bundle in keys["clients"]:
        blocks = coordinate_blocks(bundle, params, context)
        dense = rng.normal(scale=0.1, size=dim)
        sparse = block_top_k_sparsify(
            dense,
            sparsity=0.9,
            blocks=blocks,
            num_blocks=num_blocks,
            always=blocks[-1:],
        )
        assert len(np.unique(blocks[:dim][sparse != 0])) <= keep
        updates.append(sparse)
    aggregator = DPHEAggregator(keys["aggregator"], params, context)
    for i, update in enumerate(updates):
        encrypted = encrypt_update(
            update,
            weight=1,
            bundle=keys["clients"][i],
            params=params,
            context=context,
            rng=rng,
            obfuscators=DJNObfuscators(keys["aggregator"].n),
        )
        assert encrypted.shard_sizes == [capacity]  # size says nothing
        aggregator.add(i, encrypted)
    sums = keyholder.decrypt_aggregate(aggregator.result())
    average, _ = decode_average(np.asarray(sums), params)
    np.testing.assert_allclose(average, np.mean(updates, axis=0), atol=2.0**-16)


def test_sparsity_layout_is_shared_by_default_and_the_old_key_is_renamed():
    assert RunSettings.from_config({}).dphe.sparsity_layout == "shared"
    with pytest.raises(ConfigError, match="renamed: use 'dphe.sparsity-layout'"):
        RunSettings.from_config({"dphe.block-sparsity": True, "updates.sparsity": 0.9})
    with pytest.raises(ConfigError, match="dphe.sparsity-layout"):
        RunSettings.from_config({"dphe.sparsity-layout": "rows"})
    with pytest.raises(ConfigError, match="dphe.obfuscators"):
        RunSettings.from_config({"dphe.obfuscators": "short"})
    assert (
        RunSettings.from_config({"dphe.obfuscators": "djn"}).dphe.obfuscators == "djn"
    )


def test_aggregator_refuses_several_shards_under_single_shard(keys):
    params = DPHEParams(
        dimension=10, packing=1, fixed_point=FP, capacity=3, pad=True, single_shard=True
    )
    context = AggregationContext(bytes(16), "model", 1)
    encrypted = encrypt_update(
        np.r_[0.5, np.zeros(9)],
        weight=1,
        bundle=keys["clients"][0],
        params=params,
        context=context,
        rng=np.random.default_rng(0),
    )
    assert encrypted.shard_sizes == [3]
    shard = encrypted.shards[0]
    split = dataclasses.replace(
        encrypted,
        shards=[
            dataclasses.replace(
                shard, block_ids=shard.block_ids[:1], ciphertexts=shard.ciphertexts[:1]
            ),
            dataclasses.replace(
                shard, block_ids=shard.block_ids[1:], ciphertexts=shard.ciphertexts[1:]
            ),
        ],
    )
    aggregator = DPHEAggregator(keys["aggregator"], params, context)
    with pytest.raises(ValueError, match="single_shard params allow one"):
        aggregator.add(0, split)


def test_keyholder_workers_decrypt_the_same_and_keep_every_check(keys):
    dim = 300  # 301 ciphertexts: above PARALLEL_MIN, so workers > 1 fork
    params = DPHEParams(dimension=dim, packing=1, fixed_point=FP)
    rng = np.random.default_rng(5)
    updates = [rng.normal(scale=0.1, size=dim) for _ in range(CLIENTS)]

    def aggregate(keyholder: Keyholder):
        context = AggregationContext(keyholder.session_id(), "model", 1)
        aggregator = DPHEAggregator(keys["aggregator"], params, context)
        for i, update in enumerate(updates):
            encrypted = encrypt_update(
                update,
                weight=1,
                bundle=keys["clients"][i],
                params=params,
                context=context,
                rng=rng,
                obfuscators=DJNObfuscators(keys["aggregator"].n),
            )
            aggregator.add(i, encrypted)
        return aggregator.result()

    results = []
    nsquare = keys["aggregator"].n ** 2
    for workers in (1, 2):
        keyholder = Keyholder(keys["keyholder"], {"model": params}, workers=workers)
        results.append(keyholder.decrypt_aggregate(aggregate(keyholder)))
        # a ciphertext squared (the cube attack's cousin) fails the tag check
        keyholder = Keyholder(keys["keyholder"], {"model": params}, workers=workers)
        honest = aggregate(keyholder)
        forged = dataclasses.replace(
            honest,
            ciphertexts=[
                int(gmpy2.powmod(honest.ciphertexts[0], 2, nsquare)),
                *honest.ciphertexts[1:],
            ],
        )
        with pytest.raises(AggregateRefused, match=r"\(integrity\)"):
            keyholder.decrypt_aggregate(forged)
    np.testing.assert_array_equal(results[0], results[1])
    with pytest.raises(ValueError, match="workers"):
        Keyholder(keys["keyholder"], {"model": params}, workers=0)
