"""Cost of secure aggregation per client per round: DPHE against TenSEAL CKKS, naive.

Parts (``--part a,b``; each merges its section into ``--out`` and the ``summary``
is recomputed from every section present):

* ``cnn`` (issue 16 goals): the app's default ``cnn`` update (model + loss), 90%
  sparsity, ``--clients`` 3, ``--key-bits`` 2048. TenSEAL CKKS dense encryption
  (optional ``ckks-bench`` extra; skipped with a note when missing) against packed
  DPHE rows -- block top-k or element-wise, DJN or full obfuscators, online or
  precomputed on 2 processes, keyholder on 1 or 2 threads, wider slots -- each a
  real round with every keyholder check, the decrypted average compared with the
  plaintext one. Then ``--reps`` back-to-back CKKS / fast-path pairs (the machine
  is shared) and per-value Paillier run on ``--naive-sample`` values and
  extrapolated to the whole update (marked ``extrapolated_from_sample``).
* ``round``: end-to-end Flower simulations, plaintext FedAvg against DPHE (``mlp``,
  digits, ``--round-clients`` 5), alternating ``--round-reps`` times: DPHE with
  each node's obfuscator pool filled before the run (the nodes' precompute, reported
  apart: a deployment runs it on each node's own CPU between messages) and DPHE
  with the 5 nodes' fillers running during the run on the simulation's cores.
* ``avenues`` / ``key3072``: unit costs behind the choices.
* ``security``: the cost of tags, MACs and their checks (with vs without).
* ``grid``: the earlier 3 models x 3 sparsities x naive / DPHE / packed grid.

Summary fields: ``summary.default.online_vs_ckks`` (the default configuration's
online client time over CKKS's), ``summary.default.precompute_s`` (its obfuscator
pool, filled by one background process), ``summary.cnn.packed_vs_naive``,
``summary.cnn.keyholder_s``, ``summary.round_ratio_dphe_vs_plain`` (pools filled
before the run), ``summary.round_ratio_refill_in_sim`` (fillers during the run).
``--tiny`` is the smoke run (seconds, 512-bit test keys; ``make test``).

``python benchmarks/dphe.py --part cnn`` (about 9 minutes here),
``--part round`` (about 12), ``--part avenues,key3072``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import resource
import secrets
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gmpy2  # noqa: E402
import numpy as np  # noqa: E402
from phe import paillier  # noqa: E402

from crypto import (  # noqa: E402
    AggregationContext,
    DJNObfuscators,
    DPHEAggregator,
    DPHEParams,
    EncryptedUpdate,
    FullObfuscators,
    Keyholder,
    ObfuscatorPool,
    auto_capacity,
    coordinate_blocks,
    decode_average,
    encrypt_update,
    generate_keys,
    kept_blocks,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
    make_obfuscators,
    max_packing,
    naive_aggregate,
    naive_decrypt,
    naive_encrypt,
    quantize,
)
from crypto.obfuscator_store import ObfuscatorStore, filler_command  # noqa: E402
from experiments.lib.grids import BadItem, parse_csv  # noqa: E402
from hashing.update_sparsity import (  # noqa: E402
    block_top_k_sparsify,
    keep_blocks,
    shared_blocks,
    top_k_sparsify,
)
from settings.run_model import build_run_model  # noqa: E402
from settings.run_settings import RunSettings  # noqa: E402
from strategies.dphe.setup import fixed_point  # noqa: E402

SPARSITIES = (0.0, 0.9, 0.99)
DEFAULT_ROW = "default-shared-full-pool"
"""The app's default: block layout, full obfuscators from the node's disk pool."""
METHODS = ("naive", "dphe", "dphe-packed")


def unit_costs(public_key, private_key, samples: int = 32) -> dict[str, float]:
    """Seconds per encryption, decryption and ciphertext multiplication."""
    rng = secrets.SystemRandom()
    plains = [rng.randrange(public_key.n // 4) for _ in range(samples)]
    t = time.perf_counter()
    cts = [public_key.raw_encrypt(p) for p in plains]
    enc = (time.perf_counter() - t) / samples
    t = time.perf_counter()
    for c in cts[: samples // 2]:
        private_key.raw_decrypt(c)
    dec = (time.perf_counter() - t) / (samples // 2)
    nsq = gmpy2.mpz(public_key.nsquare)
    a, b = gmpy2.mpz(cts[0]), gmpy2.mpz(cts[1])
    reps = 20_000
    t = time.perf_counter()
    for _ in range(reps):
        a = a * b % nsq
    mul = (time.perf_counter() - t) / reps
    return {"encrypt_s": enc, "decrypt_s": dec, "multiply_s": mul}


def updates(dim: int, sparsity: float, clients: int, seed: int) -> list[np.ndarray]:
    """Random updates of the typical size of one round's change, top-k sparsified."""
    rng = np.random.default_rng(seed)
    return [
        top_k_sparsify(rng.normal(scale=0.01, size=dim), sparsity=sparsity)
        for _ in range(clients)
    ]


def plan_blocks(update: np.ndarray, bundle, params: DPHEParams) -> np.ndarray:
    """Return the phi-space blocks a user's update touches (what it encrypts)."""
    q = quantize(update, weight=1, params=params.fixed_point)
    support = np.flatnonzero(q)
    positions = bundle.phi(params.padded_dimension, "bench")[support]
    return np.unique(positions // params.packing)


def measure(
    name: str,
    dim: int,
    sparsity: float,
    method: str,
    *,
    keys: dict,
    units: dict[str, float],
    settings: RunSettings,
    clients: int,
    budget_s: float,
) -> dict:
    """One row: per-client-per-round seconds and bytes for one configuration."""
    key_bits = keys["aggregator"].key_bits
    ct_bytes = 2 * key_bits // 8
    fp = fixed_point(settings.dphe)
    ups = updates(
        dim, sparsity, clients, seed=zlib.crc32(f"{name}-{sparsity}".encode())
    )
    row: dict = {
        "model": name,
        "dimension": dim,
        "sparsity": sparsity,
        "method": method,
        "clients": clients,
        "key_bits": key_bits,
        "nonzeros_per_client": float(np.mean([np.count_nonzero(u) for u in ups])),
    }
    if method == "naive":
        params = DPHEParams(dimension=dim, packing=1, fixed_point=fp)
        per_client = [dim + 1] * clients
        union = dim + 1
        ids_bytes = 0
    else:
        packing = 1 if method == "dphe" else max_packing(key_bits, fp)
        params = DPHEParams(dimension=dim, packing=packing, fixed_point=fp)
        blocks = [plan_blocks(u, keys["clients"][i], params) for i, u in enumerate(ups)]
        per_client = [len(b) for b in blocks]
        union = len(np.unique(np.concatenate(blocks)))
        ids_bytes = 8
    row["packing"] = params.packing
    row["slot_bits"] = params.slot_bits
    row["ciphertexts_per_client"] = float(np.mean(per_client))
    row["decrypted_per_round"] = union
    row["upload_bytes_per_client"] = float(np.mean(per_client)) * (ct_bytes + ids_bytes)
    estimate = {
        "encrypt_s": float(np.mean(per_client)) * units["encrypt_s"],
        # every contribution is one multiplication; fills are one powmod per block
        "aggregate_s": (sum(per_client) + union) * units["multiply_s"] / clients,
        "decrypt_s": union * units["decrypt_s"] / clients,
    }
    total_estimate = clients * estimate["encrypt_s"] + union * units["decrypt_s"]
    if total_estimate > budget_s:
        row.update(estimate, measured=False)
    else:
        row.update(_run(method, ups, params, keys), measured=True)
    row["total_s"] = row["encrypt_s"] + row["aggregate_s"] + row["decrypt_s"]
    return row


def _run(method: str, ups: list[np.ndarray], params: DPHEParams, keys: dict) -> dict:
    """Encrypt, aggregate, decrypt for real; check the average; time each part."""
    clients = len(ups)
    public = keys["aggregator"].public_key
    expected = np.mean(ups, axis=0)
    if method == "naive":
        t = time.perf_counter()
        cts = [
            naive_encrypt(u, weight=1, public_key=public, params=params) for u in ups
        ]
        enc = time.perf_counter() - t
        t = time.perf_counter()
        summed = naive_aggregate(cts, public)
        agg = time.perf_counter() - t
        t = time.perf_counter()
        sums = naive_decrypt(summed, keys["keyholder"].private_key, clients, params)
        dec = time.perf_counter() - t
    else:
        rng = np.random.default_rng(0)
        keyholder = Keyholder(keys["keyholder"], {"model": params})
        context = AggregationContext(keyholder.session_id(), "model", 1)
        t = time.perf_counter()
        enc_updates = encrypt_all(ups, keys, params, context, rng)
        enc = time.perf_counter() - t
        t = time.perf_counter()
        aggregator = DPHEAggregator(keys["aggregator"], params, context)
        for i, e in enumerate(enc_updates):
            aggregator.add(i, e)
        encrypted_sum = aggregator.result()
        agg = time.perf_counter() - t
        t = time.perf_counter()
        sums = keyholder.decrypt_aggregate(encrypted_sum)
        dec = time.perf_counter() - t
    average, _ = decode_average(np.asarray(sums), params)
    bound = 0.5 * 2.0**-params.fixed_point.scale_bits + 1e-12
    error = float(np.max(np.abs(average - expected)))
    if error > bound:
        raise AssertionError(f"decrypted average off by {error} > bound {bound}")
    return {
        "encrypt_s": enc / clients,
        "aggregate_s": agg / clients,
        "decrypt_s": dec / clients,
        "max_abs_error": error,
        "error_bound": bound,
    }


def encrypt_all(
    ups: list[np.ndarray],
    keys: dict,
    params: DPHEParams,
    context: AggregationContext,
    rng: np.random.Generator,
) -> list:
    """Client ``i`` encrypts ``ups[i]`` with weight 1 (uniform weighting)."""
    return [
        encrypt_update(
            u,
            weight=1,
            bundle=keys["clients"][i],
            params=params,
            context=context,
            rng=rng,
        )
        for i, u in enumerate(ups)
    ]


def security_overhead(keys: dict, settings: RunSettings, dim: int) -> dict:
    """Measure the added cost of tags, touch-set MACs and their checks.

    A dense update of ``dim`` values, packed, for every client. Client side:
    ``block_tags`` + ``touch_mac`` against the whole ``encrypt_update``; keyholder
    side: MAC verification + expected tags against the whole
    ``decrypt_aggregate``. Ratio = with / without (= with - added).
    """
    from crypto.dphe import block_tags, touch_mac

    fp = fixed_point(settings.dphe)
    key_bits = keys["aggregator"].key_bits
    params = DPHEParams(
        dimension=dim, packing=max_packing(key_bits, fp), fixed_point=fp
    )
    ups = updates(dim, 0.0, len(keys["clients"]), seed=7)
    keyholder = Keyholder(keys["keyholder"], {"model": params})
    context = AggregationContext(keyholder.session_id(), "model", 1)
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    enc = encrypt_all(ups, keys, params, context, rng)
    encrypt_s = time.perf_counter() - t
    blocks = np.arange(params.num_blocks)
    t = time.perf_counter()
    for bundle, e in zip(keys["clients"], enc, strict=True):
        block_tags(bundle.mac_key, context, params, e.attestation)
        touch_mac(
            bundle.mac_key, context, params, bundle.client_id, blocks, e.attestation
        )
    client_added = time.perf_counter() - t
    aggregator = DPHEAggregator(keys["aggregator"], params, context)
    for i, e in enumerate(enc):
        aggregator.add(i, e)
    encrypted_sum = aggregator.result()
    t = time.perf_counter()
    keyholder.decrypt_aggregate(encrypted_sum)
    decrypt_s = time.perf_counter() - t
    t = time.perf_counter()
    for item in encrypted_sum.contributions:
        key = keys["keyholder"].mac_keys[item.client_id]
        touch_mac(
            key, context, params, item.client_id, item.block_ids, item.attestation
        )
        block_tags(key, context, params, item.attestation)
    keyholder_added = time.perf_counter() - t
    no_tag = (key_bits - 2) // fp.slot_bits
    return {
        "dimension": dim,
        "clients": len(ups),
        "packing_with_tags": params.packing,
        "packing_without_tags": no_tag,
        "blocks_ratio": params.num_blocks / math.ceil((dim + 1) / no_tag),
        "client_encrypt_s": encrypt_s / len(ups),
        "client_added_s": client_added / len(ups),
        "client_ratio": encrypt_s / (encrypt_s - client_added),
        "keyholder_decrypt_s": decrypt_s,
        "keyholder_added_s": keyholder_added,
        "keyholder_ratio": decrypt_s / (decrypt_s - keyholder_added),
    }


# --- issue 16: packed DPHE against TenSEAL CKKS, measured ----------------------------


def model_dimension(settings: RunSettings, name: str) -> int:
    """Values of the app's model stream: the model's values plus the loss (+1)."""
    over = {"mlp": {"model": "mlp"}, "cnn": {}}[name]
    shape = (64,) if name == "mlp" else (1, 8, 8)
    model = build_run_model(dataclasses.replace(settings, **over), shape)
    return sum(int(v.numel()) for v in model.state_dict().values()) + 1


def ckks_client(ups: list[np.ndarray]) -> dict:
    """TenSEAL CKKS (N = 8192, scale 2**40, 4,096 slots): dense encryption per client.

    Clients hold a public context only (no secret key); the sum is computed on
    deserialised ciphertexts and decrypted with the secret context, as a keyholder
    would. Returns ``{"available": False}`` when tenseal is not installed.
    """
    try:
        import tenseal as ts
    except ImportError:
        return {
            "available": False,
            "note": "tenseal is not installed: `pip install -e .[ckks-bench]` "
            "(benchmark-only extra); the CKKS baseline and the ratio are skipped",
        }
    secret = ts.context(
        ts.SCHEME_TYPE.CKKS,
        poly_modulus_degree=8192,
        coeff_mod_bit_sizes=[60, 40, 40, 60],
    )
    secret.global_scale = 2.0**40
    public = ts.context_from(secret.serialize(save_secret_key=False))
    slots = 4096
    dim = ups[0].size
    t = time.perf_counter()
    blobs = []
    for u in ups:
        blobs.append(
            [
                ts.ckks_vector(public, u[i : i + slots].tolist()).serialize()
                for i in range(0, dim, slots)
            ]
        )
    enc = (time.perf_counter() - t) / len(ups)
    t = time.perf_counter()
    total = None
    for client in blobs:
        vecs = [ts.ckks_vector_from(public, b) for b in client]
        total = (
            vecs if total is None else [a + b for a, b in zip(total, vecs, strict=True)]
        )
    agg = time.perf_counter() - t
    t = time.perf_counter()
    values = []
    for v in total:
        v.link_context(secret)
        values.extend(v.decrypt())
    dec = time.perf_counter() - t
    average = np.asarray(values[:dim]) / len(ups)
    error = float(np.max(np.abs(average - np.mean(ups, axis=0))))
    return {
        "available": True,
        "tenseal": ts.__version__,
        "poly_modulus_degree": 8192,
        "scale_bits": 40,
        "slots": slots,
        "ciphertexts_per_client": len(blobs[0]),
        "upload_bytes_per_client": float(sum(len(b) for b in blobs[0])),
        "client_s": enc,
        "aggregate_s": agg,
        "decrypt_s": dec,
        "max_abs_error": error,
    }


def dphe_round(
    ups: list[np.ndarray],
    keys: dict,
    fp,
    *,
    sparsity: float,
    structure: str,
    obfuscators: str,
    pool_workers: int = 0,
    keyholder_workers: int = 2,
    disk_pool: bool = False,
) -> dict:
    """One measured DPHE round of ``len(ups)`` clients with every keyholder check.

    Client time (per client) = sparsify (element-wise top-k, block top-k in this
    round's phi-space, or the round's shared blocks) + ``encrypt_update``
    (quantize, pack, block tags, touch-set MAC, one obfuscator per block, padding)
    + wire serialisation. With
    ``pool_workers`` > 0 the obfuscators of the round (exactly ``capacity``: one
    padded shard) are precomputed first, on that many processes, and reported as
    ``precompute_s``; a DJN source's one-off table is ``setup_s``. With
    ``disk_pool`` the app's own pool is used: each client's node fills a
    :class:`crypto.obfuscator_store.ObfuscatorStore` (one process, 0600 files;
    ``precompute_s``), and the client time includes taking the values from disk
    (deleted as taken) -- the ClientApp's path.
    """
    key_bits = keys["aggregator"].key_bits
    dim = ups[0].size
    packing = max_packing(key_bits, fp)
    num_blocks = math.ceil((dim + 1) / packing)
    block = structure in ("block", "shared")
    if block:
        capacity = kept_blocks(num_blocks, sparsity)
    else:
        capacity = auto_capacity(num_blocks)
    params = DPHEParams(
        dimension=dim,
        packing=packing,
        fixed_point=fp,
        capacity=capacity,
        pad=True,
        single_shard=block,
    )
    keyholder = Keyholder(
        keys["keyholder"], {"model": params}, workers=keyholder_workers
    )
    context = AggregationContext(keyholder.session_id(), "model", 1)
    rng = np.random.default_rng(0)
    n = keys["aggregator"].n
    t = time.perf_counter()
    sources = [make_obfuscators(obfuscators, n) for _ in ups]
    setup = (time.perf_counter() - t) / len(ups)
    precompute = 0.0
    pool_bytes = 0
    stores: list = []
    tmp = tempfile.TemporaryDirectory() if disk_pool else None
    if tmp is not None:
        stores = [
            ObfuscatorStore(Path(tmp.name) / f"node-{i}", n) for i in range(len(ups))
        ]
        t = time.perf_counter()
        for store, source in zip(stores, sources, strict=True):
            store.fill(capacity, source)
        precompute = (time.perf_counter() - t) / len(ups)
        pool_bytes = stores[0].bytes_on_disk()
        files = [p for p in stores[0].folder.iterdir() if p.suffix == ".obf"]
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in files)
    elif pool_workers:
        pools = [ObfuscatorPool(s) for s in sources]
        t = time.perf_counter()
        for pool in pools:
            pool.precompute(capacity, workers=pool_workers)
        precompute = (time.perf_counter() - t) / len(ups)
        sources = pools
    sent = []
    sparse_ups = []
    t = time.perf_counter()
    for i, u in enumerate(ups):
        bundle = keys["clients"][i]
        if stores:  # the app's path: take this round's values off the node's disk
            pool = ObfuscatorPool(sources[i])
            pool.extend(stores[i].take(capacity))
            sources[i] = pool
        if structure == "shared":
            blocks = coordinate_blocks(bundle, params, context)
            kept = shared_blocks(num_blocks, sparsity, always=blocks[-2:])
            s = keep_blocks(u, blocks=blocks, kept=kept)
        elif structure == "block":
            blocks = coordinate_blocks(bundle, params, context)
            s = block_top_k_sparsify(
                u,
                sparsity=sparsity,
                blocks=blocks,
                num_blocks=num_blocks,
                always=blocks[-2:],
            )
        else:
            s = top_k_sparsify(u, sparsity=sparsity)
        sparse_ups.append(s)
        encrypted = encrypt_update(
            s,
            weight=1,
            bundle=bundle,
            params=params,
            context=context,
            rng=rng,
            obfuscators=sources[i],
        )
        sent.append(encrypted.to_arrays(key_bits))
    client = (time.perf_counter() - t) / len(ups)
    online_draws = sum(getattr(s, "drawn_online", 0) for s in sources)
    left_on_disk = sum(len(store) for store in stores)
    if tmp is not None:
        tmp.cleanup()
    t = time.perf_counter()
    aggregator = DPHEAggregator(keys["aggregator"], params, context)
    for i, arrays in enumerate(sent):
        aggregator.add(i, EncryptedUpdate.from_arrays(arrays, key_bits=key_bits))
    encrypted_sum = aggregator.result()
    agg = time.perf_counter() - t
    t = time.perf_counter()
    sums = keyholder.decrypt_aggregate(encrypted_sum)
    dec = time.perf_counter() - t
    average, _ = decode_average(np.asarray(sums), params)
    error = float(np.max(np.abs(average - np.mean(sparse_ups, axis=0))))
    bound = 0.5 * 2.0**-fp.scale_bits + 1e-12
    if error > bound:
        raise AssertionError(f"decrypted average off by {error} > bound {bound}")
    width = 2 * key_bits // 8
    cts = float(np.mean([a["ciphertexts"].shape[0] for a in sent]))
    return {
        "structure": structure,
        "obfuscators": obfuscators,
        "pool_workers": pool_workers,
        "disk_pool": disk_pool,
        "keyholder_workers": keyholder_workers,
        "sparsity": sparsity,
        "packing": packing,
        "slot_bits": fp.slot_bits,
        "max_summands": fp.max_summands,
        "num_blocks": num_blocks,
        "capacity": capacity,
        "ciphertexts_per_client": cts,
        "decrypted_blocks": len(encrypted_sum.block_ids),
        "upload_bytes_per_client": cts * (width + 8),
        "setup_s": setup,
        "precompute_s": precompute,
        "online_obfuscator_draws": online_draws,
        "pool_bytes_per_node_per_round": pool_bytes,
        "pool_values_left_on_disk": left_on_disk,
        "client_s": client,
        "aggregate_s": agg,
        "keyholder_s": dec,
        "total_per_client_s": setup + precompute + client + (agg + dec) / len(ups),
        "max_abs_error": error,
        "error_bound": bound,
        "measured": True,
    }


def naive_sample(ups: list[np.ndarray], keys: dict, fp, sample: int) -> dict:
    """Per-value Paillier on the first ``sample`` values, run and checked for real.

    The full-model row is that measured time scaled by ``(D + 1) / (sample + 1)``
    (every value costs the same: one encryption, one multiplication per client, one
    decryption): marked ``"extrapolated_from_sample"``.
    """
    part = [u[:sample] for u in ups]
    params = DPHEParams(dimension=sample, packing=1, fixed_point=fp)
    run = _run("naive", part, params, keys)
    scale = (ups[0].size + 1) / (sample + 1)
    return {
        "sample_values": sample,
        "sample": run,
        "scale": scale,
        "client_s": run["encrypt_s"] * scale,
        "aggregate_s": run["aggregate_s"] * len(ups) * scale,
        "keyholder_s": run["decrypt_s"] * len(ups) * scale,
        "total_per_client_s": (run["encrypt_s"] + run["aggregate_s"] + run["decrypt_s"])
        * scale,
        "measured": False,
        "extrapolated_from_sample": True,
    }


CNN_VARIANTS = (
    # (label, structure, obfuscators, pool workers, keyholder threads); the first
    # is the app's default (shared block layout, full obfuscators from the node's disk
    # pool filled by one background process; keyholder: 2 decryption threads)
    (DEFAULT_ROW, "shared", "full", "disk", 2),
    ("block-full-pool", "block", "full", "disk", 2),
    ("block-djn", "block", "djn", 0, 2),
    ("block-djn-keyholder1", "block", "djn", 0, 1),
    ("block-djn-pool2", "block", "djn", 2, 2),
    ("block-full", "block", "full", 0, 2),
    ("block-full-pool2", "block", "full", 2, 2),
    ("element-full", "element", "full", 0, 2),
    # wider slots: dphe.max-contributors = 16 instead of 128 (3 bits less per slot)
    ("block-djn-max16", "block", "djn", 0, 2),
)
WIDER_SLOTS_SUMMANDS = 16


def cnn_goals(keys: dict, settings: RunSettings, args: argparse.Namespace) -> dict:
    """Measure the goal rows: default cnn, 90% sparsity, every row real."""
    fp = fixed_point(settings.dphe)
    dim = args.dimension or model_dimension(settings, "cnn")
    ups = updates(dim, 0.0, args.clients, seed=16)  # dense; each row sparsifies
    out = {"dimension": dim, "clients": args.clients, "sparsity": args.sparsity}
    out["ckks"] = ckks_client(ups)
    print(f"ckks: {json.dumps(out['ckks'])}", flush=True)
    rows = {}
    for label, structure, obf, workers, kh_workers in CNN_VARIANTS:
        if label == "element-full" and args.quick:
            continue
        row_fp = fp
        if label.endswith("-max16"):
            row_fp = dataclasses.replace(fp, max_summands=WIDER_SLOTS_SUMMANDS)
        rows[label] = dphe_round(
            ups,
            keys,
            row_fp,
            sparsity=args.sparsity,
            structure=structure,
            obfuscators=obf,
            pool_workers=0 if workers == "disk" else workers,
            keyholder_workers=kh_workers,
            disk_pool=workers == "disk",
        )
        print(f"dphe {label}: {json.dumps(rows[label])}", flush=True)
    out["dphe"] = rows
    # the machine is shared: CKKS and the app's default, back to back, --reps
    # times; the goal ratio is the median of these paired ratios
    paired = []
    for _ in range(args.reps if out["ckks"].get("available") else 0):
        ckks = ckks_client(ups)
        head = dphe_round(
            ups,
            keys,
            fp,
            sparsity=args.sparsity,
            structure=CNN_VARIANTS[0][1],  # the app's default row
            obfuscators="full",
            disk_pool=True,
        )
        paired.append(
            {
                "ckks_client_s": ckks["client_s"],
                "dphe_client_s": head["client_s"],
                "dphe_precompute_s": head["precompute_s"],
                "dphe_keyholder_s": head["keyholder_s"],
                "ratio": head["client_s"] / ckks["client_s"],
            }
        )
        print(f"paired: {json.dumps(paired[-1])}", flush=True)
    out["paired"] = paired
    out["naive"] = naive_sample(ups, keys, fp, args.naive_sample)
    print(f"naive: {json.dumps(out['naive'])}", flush=True)
    return out


def cnn_summary(cnn: dict) -> dict:
    """Return the cnn goal fields, from the app's default row (:data:`DEFAULT_ROW`)."""
    head = cnn["dphe"][DEFAULT_ROW]
    ckks = cnn["ckks"]
    summary = {
        "row": DEFAULT_ROW,
        "client_s": head["client_s"],
        "precompute_s": head["setup_s"] + head["precompute_s"],
        "keyholder_s": head["keyholder_s"],
        "packed_vs_naive": cnn["naive"]["total_per_client_s"]
        / head["total_per_client_s"],
        "packed_vs_naive_note": "naive extrapolated from a measured sample; packed "
        "total counts setup + precompute + client + aggregate and keyholder shares",
        "ckks_client_s": ckks.get("client_s"),
    }
    for label, row in cnn["dphe"].items():
        if ckks.get("available"):
            summary[f"{label}_vs_ckks_client_s_ratio"] = (
                row["client_s"] / ckks["client_s"]
            )
    # every row against the same naive sample: the obfuscator source and the
    # precompute are in each row's total
    summary["packed_vs_naive_by_row"] = {
        label: cnn["naive"]["total_per_client_s"] / row["total_per_client_s"]
        for label, row in cnn["dphe"].items()
    }
    return summary


def default_summary(cnn: dict, round_part: dict | None) -> dict:
    """``summary.default``: the default configuration's online and precompute time.

    Online = the client's time once the round's obfuscators are in its node's pool
    (sparsify, take from disk, encrypt, serialise); precompute = one process
    filling the pool with the round's full obfuscators, per client per round. The
    ratio is the median of the back-to-back CKKS / default pairs (the machine is
    shared), else the single rows. Whether the precompute fits: the default run's
    (``round`` part: mlp) per-round precompute (one filler process, its start
    included) against its DPHE round time, the time between two train messages of
    a client that is sampled every round.
    """
    head = cnn["dphe"][DEFAULT_ROW]
    ckks = cnn["ckks"]
    paired = cnn.get("paired") or []
    out: dict = {
        "row": DEFAULT_ROW,
        "layout": "shared blocks (one random phi-space set a round) + error feedback",
        "obfuscators": "full (r uniform; DCR only)",
        "sparsity": cnn["sparsity"],
        "dimension": cnn["dimension"],
        "ciphertexts_per_client": head["ciphertexts_per_client"],
        "online_s": head["client_s"],
        "precompute_s": head["precompute_s"],
        "precompute_processes": 1,
        "pool_bytes_per_node_per_round": head["pool_bytes_per_node_per_round"],
        "online_draws_with_pool": head["online_obfuscator_draws"],
        "ckks_client_s": ckks.get("client_s"),
        "online_vs_ckks": (
            head["client_s"] / ckks["client_s"] if ckks.get("available") else None
        ),
        "ratio_source": "single rows",
    }
    if paired:
        out["online_s"] = float(np.median([p["dphe_client_s"] for p in paired]))
        out["precompute_s"] = float(np.median([p["dphe_precompute_s"] for p in paired]))
        out["ckks_client_s"] = float(np.median([p["ckks_client_s"] for p in paired]))
        out["online_vs_ckks"] = float(np.median([p["ratio"] for p in paired]))
        out["paired_ratios"] = [p["ratio"] for p in paired]
        out["ratio_source"] = (
            f"median of {len(paired)} back-to-back pairs (CKKS then the default)"
        )
    if round_part and round_part.get("dphe_precompute_s") is not None:
        out["round_precompute_s"] = round_part["dphe_precompute_s"]
        out["round_precompute_cpu_s"] = round_part.get("dphe_precompute_cpu_s")
        out["round_s_dphe"] = round_part["dphe_round_s_median"]
        out["precompute_fits_between_rounds"] = bool(
            round_part["dphe_precompute_s"] <= round_part["dphe_round_s_median"]
        )
    return out


ROUND_ARMS = ("plain", "dphe", "dphe-refill-in-sim")
"""The round part's simulations, alternated in this order every repetition."""


def round_ratio(args: argparse.Namespace) -> dict:
    """End-to-end FedAvg rounds (mlp, digits, ``--round-clients``): plain vs DPHE.

    Real simulations (Flower + Ray, in-process) in this run: plaintext FedAvg
    (dense updates, the default) and DPHE with ``updates.sparsity = 0.9`` and every
    other DPHE key at its default (block layout with error feedback, full
    obfuscators from each node's pool), a fresh 2048-bit key and the in-process
    keyholder (every check on). Seconds per round are the differences of
    ``elapsed_s`` between rounds 2 .. R-1 (no evaluation; round 1 holds the actors'
    start). Each repetition runs, in this order (the machine is shared):

    * ``plain``;
    * ``dphe``: each node's pool filled before the run, by the app's own filler
      process (one per node, started as the node starts one), with the run's
      obfuscators: the nodes' precompute, which a deployment runs on each node's
      own CPU between its messages, is kept off the 2 cores the 5 simulated nodes,
      the server and the keyholder share. It is reported apart
      (``dphe_prefill``), and ``pool_levels_after`` shows that no node's pool fell
      below the level it keeps (so no filler started and nothing was drawn online
      during the timed rounds);
    * ``dphe-refill-in-sim``: empty pools, the nodes' fillers running during the
      run on the same 2 cores (round 1 draws online): what one machine simulating
      5 nodes costs, not a deployment's round.

    The ratio is the median of the per-repetition ``dphe`` / ``plain`` ratios of
    mean round times (``ratio_refill_in_sim`` the same for the third arm). Beside
    them, one filler process pools one round's obfuscators of a client, start
    included (``dphe_precompute_s``, ``dphe_precompute_cpu_s``): the precompute a
    node runs between rounds.
    """
    from clients.dphe_updates import pool_folder
    from experiments.simulate import simulate
    from server.run_files import read_rounds

    base = {
        "model": "mlp",
        "code-length": 32,
        "min-train-nodes": 3,
        "rounds": args.round_rounds,
        "eval-every": args.round_rounds,
        "seed": 0,
    }
    secure = {"secure-aggregation": "dphe", "updates.sparsity": 0.9}
    out: dict = {
        "clients": args.round_clients,
        "rounds": args.round_rounds,
        "reps": args.round_reps,
        **{arm: [] for arm in ROUND_ARMS},
    }
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys"
        paths = generate_keys(keys, num_clients=args.round_clients, key_bits=2048)
        config = {**base, **secure, "dphe.key-dir": str(keys)}
        settings = RunSettings.from_config(config)
        bundle = load_client_bundle(paths.clients[0], client_id=0)
        per_round = round_count(settings, bundle.key_bits)
        level = settings.dphe.obfuscator_pool_rounds * per_round
        pre = round_precompute(bundle.n, per_round)
        out["dphe_precompute_s"], out["dphe_precompute_cpu_s"] = pre
        out["dphe_round_ciphertexts"] = per_round
        out["dphe_pool_level"] = level
        for rep in range(args.round_reps):
            for arm in ROUND_ARMS:
                over = {} if arm == "plain" else config
                state = Path(tmp) / f"state-{arm}-{rep}"  # fresh pools every run
                os.environ["FEDHASH_NODE_STATE_DIR"] = str(state)  # the actors' too
                folders = [pool_folder({}, i) for i in range(args.round_clients)]
                prefill = None
                if arm == "dphe":  # every round's values + the level kept after
                    count = args.round_rounds * per_round + level
                    prefill = fill_pools(folders, bundle.n, count)
                run_dir = simulate(
                    {**base, **over, "results-dir": str(Path(tmp) / f"{arm}{rep}")},
                    num_clients=args.round_clients,
                )
                rows = read_rounds(run_dir)
                elapsed = {r["round"]: r["elapsed_s"] for r in rows}
                per = [elapsed[r] - elapsed[r - 1] for r in range(2, args.round_rounds)]
                item = {
                    "config": {
                        **base,
                        **{k: v for k, v in over.items() if "dir" not in k},
                    },
                    "round_s": per,
                    "round_s_mean": float(np.mean(per)),
                    "dphe": [r.get("dphe") for r in rows if r.get("dphe")][:1],
                }
                if arm != "plain":
                    levels = [len(ObfuscatorStore(f, bundle.n)) for f in folders]
                    item["pool_levels_after"] = levels
                if prefill is not None:
                    # exactly the kept level left: every round took its values
                    # from the prefilled pool, no filler ran, none drawn online
                    item["dphe_prefill"] = prefill
                    item["pools_at_level_after"] = all(v == level for v in levels)
                out[arm].append(item)
                print(f"round {arm} rep {rep}: {json.dumps(item)}", flush=True)
    plain = [p["round_s_mean"] for p in out["plain"]]
    for key, arm in (("", "dphe"), ("_refill_in_sim", "dphe-refill-in-sim")):
        means = [d["round_s_mean"] for d in out[arm]]
        out[f"pair_ratios{key}"] = [d / p for p, d in zip(plain, means, strict=True)]
        out[f"ratio{key}"] = float(np.median(out[f"pair_ratios{key}"]))
        out[f"dphe_round_s_median{key}"] = float(np.median(means))
    out["plain_round_s_median"] = float(np.median(plain))
    return out


def round_count(settings: RunSettings, key_bits: int) -> int:
    """Ciphertexts a client of the round part encrypts per round (mlp + loss)."""
    from clients.dphe_updates import round_ciphertexts

    dim = model_dimension(settings, "mlp") - 1  # the model's values, loss aside
    return round_ciphertexts(settings, dimension=dim, key_bits=key_bits)


def fill_pools(folders: list[Path], n: int, count: int) -> dict:
    """Fill each node's pool to ``count`` full obfuscators with the app's filler.

    One filler process per node (:func:`crypto.obfuscator_store.filler_command`,
    as the node starts it), all at once; returns their wall seconds, CPU seconds
    and the values per node.
    """
    cpu = _children_cpu()
    t = time.perf_counter()
    procs = [subprocess.Popen(_filler(f, n, count)) for f in folders]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t
    if any(codes):
        raise RuntimeError(f"obfuscator fillers failed: exit codes {codes}")
    levels = [len(ObfuscatorStore(f, n)) for f in folders]
    if min(levels) < count:
        raise RuntimeError(f"obfuscator pools short of {count}: {levels}")
    return {
        "values_per_node": count,
        "wall_s": wall,
        "cpu_s": _children_cpu() - cpu,
        "processes": len(folders),
    }


def round_precompute(n: int, count: int) -> tuple[float, float]:
    """Wall and CPU seconds of one filler process pooling ``count`` obfuscators.

    The node's per-round precompute: the app's filler process (start included)
    filling an empty pool with one round's values of one client.
    """
    with tempfile.TemporaryDirectory() as tmp:
        cpu = _children_cpu()
        t = time.perf_counter()
        subprocess.run(_filler(tmp, n, count), check=True)
        wall = time.perf_counter() - t
        if len(ObfuscatorStore(tmp, n)) != count:
            raise RuntimeError("the filler did not pool the round's obfuscators")
        return wall, _children_cpu() - cpu


def _filler(root: str | Path, n: int, count: int) -> list[str]:
    # the node's filler at normal priority: nothing else of the benchmark runs
    # meanwhile, and a low priority only stretches the wall time on a busy machine
    return [*filler_command(root, n, count, "full"), "--nice", "0"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def avenues(keys: dict, settings: RunSettings) -> dict:
    """Measure the unit costs behind the choices: obfuscators, cores, slot width."""
    fp = fixed_point(settings.dphe)
    n = keys["aggregator"].n
    reps = 40
    res: dict = {}
    full = FullObfuscators(n)
    t = time.perf_counter()
    for _ in range(reps):
        full.draw()
    res["full_obfuscator_ms"] = (time.perf_counter() - t) / reps * 1e3
    public = keys["aggregator"].public_key
    t = time.perf_counter()
    for _ in range(reps):
        public.raw_encrypt(12345)
    res["phe_raw_encrypt_ms"] = (time.perf_counter() - t) / reps * 1e3
    t = time.perf_counter()
    djn = DJNObfuscators(n)
    res["djn_table_s"] = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(reps * 5):
        djn.draw()
    res["djn_obfuscator_ms"] = (time.perf_counter() - t) / (reps * 5) * 1e3
    t = time.perf_counter()
    for _ in range(reps):
        gmpy2.powmod(djn.n + 7, gmpy2.mpz(secrets.randbits(1024)), djn.nsquare)
    res["djn_without_table_ms"] = (time.perf_counter() - t) / reps * 1e3
    for workers in (1, 2):
        pool = ObfuscatorPool(full)
        t = time.perf_counter()
        pool.precompute(64, workers=workers)
        res[f"full_precompute_64_workers{workers}_s"] = time.perf_counter() - t
    res["cores_speedup"] = (
        res["full_precompute_64_workers1_s"] / res["full_precompute_64_workers2_s"]
    )
    key_bits = keys["aggregator"].key_bits
    slots = {}
    for summands in (128, 16, 8):
        f = dataclasses.replace(fp, max_summands=summands)
        slots[summands] = {
            "slot_bits": f.slot_bits,
            "packing": max_packing(key_bits, f),
        }
    res["slots_by_max_summands"] = slots
    res["wider_slots_gain_8_vs_128"] = slots[8]["packing"] / slots[128]["packing"]
    return res


def key3072(settings: RunSettings) -> dict:
    """Per-value cost at 3072 bits (full and DJN obfuscators) against 2048 bits."""
    fp = fixed_point(settings.dphe)
    out = {}
    for bits in (2048, 3072):
        pub, priv = paillier.generate_paillier_keypair(n_length=bits)
        full = FullObfuscators(pub.n)
        djn = DJNObfuscators(pub.n)
        reps = 20
        t = time.perf_counter()
        for _ in range(reps):
            full.draw()
        f_ms = (time.perf_counter() - t) / reps * 1e3
        t = time.perf_counter()
        for _ in range(reps * 5):
            djn.draw()
        d_ms = (time.perf_counter() - t) / (reps * 5) * 1e3
        c = pub.raw_encrypt(5)
        t = time.perf_counter()
        for _ in range(reps):
            priv.raw_decrypt(c)
        dec_ms = (time.perf_counter() - t) / reps * 1e3
        packing = max_packing(bits, fp)
        out[bits] = {
            "packing": packing,
            "full_ms_per_value": f_ms / packing,
            "djn_ms_per_value": d_ms / packing,
            "decrypt_ms_per_value": dec_ms / packing,
        }
    return out


def grid(keys: dict, settings: RunSettings, args: argparse.Namespace) -> dict:
    """Run the earlier grid: 3 models x 3 sparsities x naive / DPHE / packed.

    Element-wise top-k and full obfuscators; rows measured within ``--budget-s``,
    else estimated from unit costs (``"measured": false``).
    """

    def size(input_shape: tuple[int, ...], **over: str) -> int:
        model = build_run_model(dataclasses.replace(settings, **over), input_shape)
        return sum(int(v.numel()) for v in model.state_dict().values())

    models = {
        "linear-2048x101": 2048 * 101 + 101,
        "default-cnn-32b": size((1, 8, 8)),
        "mlp-32b": size((64,), model="mlp"),
    }
    units = unit_costs(keys["aggregator"].public_key, keys["keyholder"].private_key)
    print(
        f"{args.key_bits}-bit Paillier: encrypt {units['encrypt_s'] * 1e3:.2f} ms, "
        f"decrypt {units['decrypt_s'] * 1e3:.2f} ms, multiply "
        f"{units['multiply_s'] * 1e6:.2f} us",
        flush=True,
    )
    rows = []
    for name, dim in models.items():
        for sparsity in SPARSITIES:
            for method in METHODS:
                row = measure(
                    name,
                    dim,
                    sparsity,
                    method,
                    keys=keys,
                    units=units,
                    settings=settings,
                    clients=args.clients,
                    budget_s=args.budget_s,
                )
                rows.append(row)
                print(
                    f"{name:>15} {sparsity:>4.0%} {method:>11}: "
                    f"{row['ciphertexts_per_client']:>9.0f} ct/client, enc "
                    f"{row['encrypt_s']:>9.2f} s, agg {row['aggregate_s']:>7.3f} s, "
                    f"dec {row['decrypt_s']:>8.2f} s, total {row['total_s']:>9.2f} s, "
                    f"up {row['upload_bytes_per_client'] / 1e6:>8.2f} MB "
                    f"[{'measured' if row['measured'] else 'extrapolated'}]",
                    flush=True,
                )
    ratios = []
    for name in models:
        for sparsity in SPARSITIES:
            by = {
                r["method"]: r
                for r in rows
                if r["model"] == name and r["sparsity"] == sparsity
            }
            packed = by["dphe-packed"]["total_s"]
            ratios.append(
                {
                    "model": name,
                    "sparsity": sparsity,
                    "naive_over_packed": by["naive"]["total_s"] / packed,
                    "dphe_over_packed": by["dphe"]["total_s"] / packed,
                    "naive_over_dphe": by["naive"]["total_s"] / by["dphe"]["total_s"],
                }
            )
    targets = [
        {
            "model": r["model"],
            "packed_vs_naive_at_90": r["naive_over_packed"],
            "packed_vs_naive_ok": r["naive_over_packed"] >= 50,
            "packed_vs_dphe_at_90": r["dphe_over_packed"],
            "packed_vs_dphe_ok": r["dphe_over_packed"] >= 5,
        }
        for r in ratios
        if r["sparsity"] == 0.9
    ]
    for r in ratios:
        print(
            f"{r['model']:>16} {r['sparsity']:>5.0%}: packed is "
            f"{r['naive_over_packed']:.1f}x faster than naive, "
            f"{r['dphe_over_packed']:.1f}x faster than DPHE (packing 1)"
        )
    return {
        "units": units,
        "rows": rows,
        "ratios": ratios,
        "targets_at_90_percent_sparsity": targets,
    }


def table2(
    keys: dict,
    settings: RunSettings,
    args: argparse.Namespace,
    previous: dict | None = None,
) -> dict:
    """Measure the paper's Table 2 shape: encryption time against sparsity.

    The paper's scheme (``dphe.packing = 1``, one value a ciphertext, element-wise
    top-k, full obfuscators drawn online) on the app's ``mlp`` update (its values
    plus the loss), for every seed in ``--table2-seeds`` (the seed draws the
    updates) and sparsity in ``--table2-sparsities``, with ``--clients`` clients
    (the keyholder decrypts no sum of fewer than 3). A row is a real round
    (encrypt, aggregate, decrypt with every keyholder check, the decrypted average
    compared with the plaintext one) when its estimate fits ``--table2-budget-s``;
    otherwise (the dense update: about 25,000 full obfuscators a client) its times
    are the seed's measured rows' per-ciphertext times times its ciphertext count,
    marked ``"measured": false``. ``encrypt_s`` is one client's time, the paper's
    "encryption time". Accuracy at each sparsity is the plaintext FedAvg's
    (``experiments.dphe map``): DPHE's sums equal plaintext's.

    ``previous`` (``--table2-resume``): an earlier ``table2`` of the same key size and
    clients (``main`` checks); its rows of the (seed, sparsity) pairs not run now
    are kept, and the summary is over every row.
    """
    fp = fixed_point(settings.dphe)
    dim = model_dimension(settings, "mlp")
    params = DPHEParams(dimension=dim, packing=1, fixed_point=fp)
    clients = len(keys["clients"])
    # sparsest first: their measured per-ciphertext times price the rest
    sparsities = sorted(args.table2_sparsities, reverse=True)
    rows = []
    for seed in args.table2_seeds:
        unit: dict[str, float] = {}
        for sparsity in sparsities:
            tag = f"t2-{seed}-{sparsity}".encode()
            ups = updates(dim, sparsity, clients, seed=zlib.crc32(tag))
            blocks = [
                plan_blocks(u, keys["clients"][i], params) for i, u in enumerate(ups)
            ]
            per_client = float(np.mean([len(b) for b in blocks]))
            union = len(np.unique(np.concatenate(blocks)))
            row: dict = {
                "model": "mlp-32b",
                "dimension": dim,
                "sparsity": sparsity,
                "seed": seed,
                "packing": 1,
                "clients": clients,
                "nonzeros": float(np.mean([np.count_nonzero(u) for u in ups])),
                "ciphertexts": per_client,
                "decrypted": union,
            }
            estimate = (
                None
                if not unit
                else clients * per_client * unit["encrypt"] + union * unit["decrypt"]
            )
            if estimate is None or estimate <= args.table2_budget_s:
                row.update(_run("dphe", ups, params, keys), measured=True)
                unit = {
                    "encrypt": row["encrypt_s"] / per_client,
                    "decrypt": row["decrypt_s"] * clients / union,
                    "aggregate": row["aggregate_s"] / per_client,
                }
            else:
                row.update(
                    encrypt_s=per_client * unit["encrypt"],
                    aggregate_s=per_client * unit["aggregate"],
                    decrypt_s=union * unit["decrypt"] / clients,
                    measured=False,
                    estimated_s=estimate,
                )
            rows.append(row)
            print(
                f"table2 seed {seed} sparsity {sparsity:.0%}: {per_client:.0f} "
                f"ciphertexts a client, encrypt {row['encrypt_s']:.1f} s, decrypt "
                f"{row['decrypt_s']:.1f} s a client "
                f"[{'measured' if row['measured'] else 'extrapolated'}]",
                flush=True,
            )
    run = {(r["seed"], r["sparsity"]) for r in rows}
    kept = [
        r
        for r in (previous or {}).get("rows", [])
        if (r["seed"], r["sparsity"]) not in run
    ]
    rows = sorted(kept + rows, key=lambda r: (r["seed"], -r["sparsity"]))
    return {
        "settings": {
            "key_bits": args.key_bits,
            "clients": clients,
            "budget_s": args.table2_budget_s,
            "rows_kept_from_before": len(kept),
        },
        "rows": rows,
        "summary": table2_summary(rows),
    }


def table2_summary(rows: list[dict]) -> dict:
    """Return encryption time per sparsity over seeds, and dense over each."""
    by: dict[float, list[dict]] = {}
    for r in rows:
        by.setdefault(r["sparsity"], []).append(r)
    dense = by.get(0.0)
    summary = {}
    for sp, rs in sorted(by.items()):
        enc = [r["encrypt_s"] for r in rs]
        summary[str(sp)] = {
            "encrypt_s_mean": float(np.mean(enc)),
            "encrypt_s_std": float(np.std(enc, ddof=1)) if len(enc) > 1 else 0.0,
            "ciphertexts_mean": float(np.mean([r["ciphertexts"] for r in rs])),
            "seeds": len(rs),
            "measured": all(r["measured"] for r in rs),
            "dense_over_this": (
                float(np.mean([r["encrypt_s"] for r in dense]) / np.mean(enc))
                if dense
                else None
            ),
        }
    return summary


PARTS = ("cnn", "round", "avenues", "key3072", "security", "grid", "table2")


def _seed_list(text: str) -> list[int]:
    """``--table2-seeds``: comma-separated non-negative integers."""
    try:
        return parse_csv(text, int, lambda seed: seed >= 0)
    except BadItem:
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted are comma-separated integers >= 0, e.g. 0,1,2"
        ) from None


def _sparsity_list(text: str) -> list[float]:
    """``--table2-sparsities``: comma-separated fractions in [0, 1)."""
    try:
        return parse_csv(text, float, lambda v: 0.0 <= v < 1.0)
    except BadItem:
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted are comma-separated sparsities in [0, 1), e.g. 0,0.9"
        ) from None


def main() -> None:
    """Run the chosen parts; merge them into the JSON; print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--sparsity", type=float, default=0.9)
    parser.add_argument("--budget-s", type=float, default=20.0)
    parser.add_argument("--naive-sample", type=int, default=1000)
    parser.add_argument("--round-clients", type=int, default=5)
    parser.add_argument("--round-rounds", type=int, default=8)
    parser.add_argument("--round-reps", type=int, default=3)
    parser.add_argument(
        "--part",
        default="cnn,round,avenues",
        help=f"comma-separated parts of {PARTS} (each merged into --out)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="cnn: skip the element-wise baseline row"
    )
    parser.add_argument(
        "--table2-seeds", type=_seed_list, default="0,1,2", help="table2: seeds"
    )
    parser.add_argument(
        "--table2-sparsities",
        type=_sparsity_list,
        default="0,0.9,0.99",
        help="table2: sparsities, each in [0, 1)",
    )
    parser.add_argument(
        "--table2-budget-s",
        type=float,
        default=600.0,
        help="table2: a row whose estimate exceeds this is extrapolated",
    )
    parser.add_argument(
        "--table2-resume",
        action="store_true",
        help="table2: keep --out's rows of the (seed, sparsity) pairs not run now",
    )
    parser.add_argument(
        "--reps", type=int, default=3, help="cnn: back-to-back CKKS / DPHE pairs"
    )
    parser.add_argument(
        "--out", default=str(ROOT / "docs/results/benchmarks/dphe.json")
    )
    parser.add_argument(
        "--dimension",
        type=int,
        default=0,
        help="cnn part: values per update (0 = the default cnn's)",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="smoke run in seconds: 512-bit test keys, 2,000 values, 1 pair, "
        "parts cnn,avenues unless --part is given; never the published numbers",
    )
    args = parser.parse_args()
    if args.tiny:
        args.key_bits, args.dimension, args.reps, args.naive_sample = 512, 2000, 1, 50
        if "--part" not in sys.argv[1:]:
            args.part = "cnn,avenues"
    parts = [p for p in args.part.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; accepted: {PARTS}")
    out_path = Path(args.out)
    out = json.loads(out_path.read_text()) if out_path.is_file() else {}
    previous = out.get("table2") if args.table2_resume else None
    if previous:
        had = {k: previous["settings"].get(k) for k in ("key_bits", "clients")}
        if had != {"key_bits": args.key_bits, "clients": args.clients}:
            parser.error(
                f"--table2-resume: {out_path}'s table2 has {had}; this run has "
                f"key_bits={args.key_bits}, clients={args.clients}; accepted: the same"
            )
    settings = RunSettings.from_config({"dphe.weighting": "uniform"})
    keys = None
    if set(parts) & {"cnn", "avenues", "security", "grid", "table2"}:
        keys = _keys(args.clients, args.key_bits)
    out["benchmark"] = "dphe"
    out["machine"] = {
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        # the cores are shared: the 1/5/15-minute load averages at the start
        "load_average_at_start": list(os.getloadavg()),
    }
    if "cnn" in parts:
        cnn = cnn_goals(keys, settings, args)
        cnn["settings"] = {
            "key_bits": args.key_bits,
            "clients": args.clients,
            "weighting": "uniform",
            "scale_bits": settings.dphe.scale_bits,
            "clip": settings.dphe.clip,
            "max_contributors": settings.dphe.max_contributors,
            "pad": True,
        }
        out["cnn"] = cnn
    if "round" in parts:
        out["round"] = round_ratio(args)
    if "avenues" in parts:
        out["avenues"] = avenues(keys, settings)
        print(f"avenues: {json.dumps(out['avenues'])}", flush=True)
    if "key3072" in parts:
        out["key3072"] = key3072(settings)
        print(f"key3072: {json.dumps(out['key3072'])}", flush=True)
    if "security" in parts:
        out["security_overhead"] = {
            "mlp-32b": security_overhead(
                keys, settings, model_dimension(settings, "mlp")
            )
        }
    if "grid" in parts:
        out.update(grid(keys, settings, args))
    if "table2" in parts:
        out["table2"] = table2(keys, settings, args, previous)
    summary = dict(out.get("summary", {}))
    if "cnn" in out:
        summary["cnn"] = cnn_summary(out["cnn"])
        summary["default"] = default_summary(out["cnn"], out.get("round"))
    if "round" in out:
        summary["round_ratio_dphe_vs_plain"] = out["round"]["ratio"]
        summary["round_pair_ratios"] = out["round"]["pair_ratios"]
        summary["round_s_plain"] = out["round"]["plain_round_s_median"]
        summary["round_s_dphe"] = out["round"]["dphe_round_s_median"]
        summary["round_ratio_refill_in_sim"] = out["round"].get("ratio_refill_in_sim")
    summary["goals"] = _goals(summary)
    out["summary"] = summary
    out["machine"]["load_average_at_end"] = list(os.getloadavg())
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=2) + "\n")
    print_summary(out)
    print(f"wrote {args.out}")


def _goals(summary: dict) -> dict:
    cnn = summary.get("cnn", {})
    ratio = summary.get("default", {}).get("online_vs_ckks")
    return {
        "default.online_vs_ckks<=1": None if ratio is None else ratio <= 1.0,
        "cnn.packed_vs_naive>=500": (
            None if "packed_vs_naive" not in cnn else cnn["packed_vs_naive"] >= 500
        ),
        "round_ratio_dphe_vs_plain<=2": (
            None
            if "round_ratio_dphe_vs_plain" not in summary
            else summary["round_ratio_dphe_vs_plain"] <= 2.0
        ),
    }


def print_summary(out: dict) -> None:
    """Print the short table of the cnn rows and the goal figures."""
    cnn = out.get("cnn")
    if cnn:
        print(
            f"default cnn ({cnn['dimension']} values + weight), {cnn['clients']} "
            f"clients, {cnn['sparsity']:.0%} sparsity, per client per round:"
        )
        print(
            f"{'row':>18} {'ct/client':>9} {'setup s':>8} {'precomp s':>9} "
            f"{'client s':>9} {'keyholder s':>11} {'upload MB':>9}"
        )
        ckks = cnn["ckks"]
        if ckks.get("available"):
            print(
                f"{'ckks (tenseal)':>18} {ckks['ciphertexts_per_client']:>9} "
                f"{0:>8.2f} {0:>9.2f} {ckks['client_s']:>9.3f} "
                f"{ckks['decrypt_s']:>11.3f} "
                f"{ckks['upload_bytes_per_client'] / 1e6:>9.2f}"
            )
        else:
            print(f"{'ckks (tenseal)':>18} skipped: {ckks['note']}")
        for label, r in cnn["dphe"].items():
            print(
                f"{label:>18} {r['ciphertexts_per_client']:>9.0f} "
                f"{r['setup_s']:>8.2f} {r['precompute_s']:>9.2f} "
                f"{r['client_s']:>9.3f} {r['keyholder_s']:>11.3f} "
                f"{r['upload_bytes_per_client'] / 1e6:>9.2f}"
            )
        nv = cnn["naive"]
        print(
            f"{'naive (extrap.)':>18} {cnn['dimension'] + 1:>9} {0:>8.2f} "
            f"{0:>9.2f} {nv['client_s']:>9.1f} {nv['keyholder_s']:>11.1f} "
            f"{(cnn['dimension'] + 1) * 2 * 2048 / 8 / 1e6:>9.2f}"
        )
    print(json.dumps(out.get("summary", {}), indent=1))


def _keys(clients: int, key_bits: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        paths = generate_keys(
            Path(tmp) / "keys",
            num_clients=clients,
            key_bits=key_bits,
            allow_test_keys=key_bits not in (2048, 3072),
        )
        return {
            "aggregator": load_aggregator_bundle(paths.aggregator),
            "keyholder": load_keyholder_bundle(paths.keyholder),
            "clients": [
                load_client_bundle(p, client_id=i) for i, p in enumerate(paths.clients)
            ],
        }


if __name__ == "__main__":
    main()
