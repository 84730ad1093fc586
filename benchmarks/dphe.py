"""Cost of secure aggregation per client per round: naive Paillier vs DPHE vs packed.

For two model updates -- (a) a 2048 x 101 linear classifier with bias (the DPHE
paper's Caltech101 setting, 206,949 values), (b) this app's default hashing model
(digits -> ``cnn``, 32 bits, 289,632 values) and (c) the ``mlp`` (24,864 values) --
at 0%, 90% and 99% sparsity (top-k), it measures
three ways of summing the updates of ``--clients`` users under a ``--key-bits``
Paillier key:

* ``naive``: every value encrypted on its own (``crypto.naive``), no permutation;
* ``dphe``: the paper's DPHE, ``packing = 1`` (one encrypted value per non-zero);
* ``dphe-packed``: DPHE with as many slots per plaintext as the key holds.

Reported per client per round: encryption time (client), aggregation time (the
server's homomorphic sum, divided by the clients), decryption time (keyholder,
divided by the clients), their total, and upload bytes (ciphertexts at
``2 * key_bits / 8`` bytes each plus 8-byte block ids).

What is measured and what is extrapolated. Paillier encryption costs ~13 ms per
value at 2048 bits here, so encrypting 207k values takes ~45 minutes per client.
Each configuration is therefore run for real -- encrypt, aggregate, decrypt,
decode, and the result checked against the plaintext average -- when its estimated
time is within ``--budget-s``; otherwise its time is the exact number of operations
(counted from the real supports and permutations) times the unit times measured at
the start of the same run (``"measured": false``). Bytes are always exact.
The weighting is uniform (the paper's average); fixed point is the run defaults.

``python benchmarks/dphe.py [--key-bits 2048] [--clients 3] [--budget-s 20]``
writes ``benchmarks/results/dphe.json`` and prints a table and the speed-up
ratios against the targets (packed >= 50x naive, >= 5x DPHE at 90% sparsity).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import secrets
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gmpy2  # noqa: E402
import numpy as np  # noqa: E402

from crypto import (  # noqa: E402
    AggregationContext,
    DPHEAggregator,
    DPHEParams,
    Keyholder,
    decode_average,
    encrypt_update,
    generate_keys,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
    max_packing,
    naive_aggregate,
    naive_decrypt,
    naive_encrypt,
    quantize,
)
from hashing.update_sparsity import top_k_sparsify  # noqa: E402
from settings.dphe_setup import fixed_point  # noqa: E402
from settings.run_model import build_run_model  # noqa: E402
from settings.run_settings import RunSettings  # noqa: E402

SPARSITIES = (0.0, 0.9, 0.99)
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
    fp = fixed_point(settings)
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
            naive_encrypt(u, weight=1, public_key=public, params=params.fixed_point)
            for u in ups
        ]
        enc = time.perf_counter() - t
        t = time.perf_counter()
        summed = naive_aggregate(cts, public)
        agg = time.perf_counter() - t
        t = time.perf_counter()
        sums = naive_decrypt(
            summed, keys["keyholder"].private_key, clients, params.fixed_point
        )
        dec = time.perf_counter() - t
    else:
        rng = np.random.default_rng(0)
        keyholder = Keyholder(keys["keyholder"], {"model": params})
        context = AggregationContext(keyholder.session_id(), "model", 1)
        t = time.perf_counter()
        enc_updates = [
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


def security_overhead(keys: dict, settings: RunSettings, dim: int) -> dict:
    """Measure the added cost of tags, touch-set MACs and their checks.

    A dense update of ``dim`` values, packed, for every client. Client side:
    ``block_tags`` + ``touch_mac`` against the whole ``encrypt_update``; keyholder
    side: MAC verification + expected tags against the whole
    ``decrypt_aggregate``. Ratio = with / without (= with - added).
    """
    from crypto.dphe import block_tags, touch_mac

    fp = fixed_point(settings)
    key_bits = keys["aggregator"].key_bits
    params = DPHEParams(
        dimension=dim, packing=max_packing(key_bits, fp), fixed_point=fp
    )
    ups = updates(dim, 0.0, len(keys["clients"]), seed=7)
    keyholder = Keyholder(keys["keyholder"], {"model": params})
    context = AggregationContext(keyholder.session_id(), "model", 1)
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    enc = [
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
    encrypt_s = time.perf_counter() - t
    blocks = np.arange(params.num_blocks)
    t = time.perf_counter()
    for bundle in keys["clients"]:
        block_tags(bundle.mac_key, context, params)
        touch_mac(bundle.mac_key, context, params, bundle.client_id, blocks)
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
        touch_mac(key, context, params, item.client_id, item.block_ids)
        block_tags(key, context, params)
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


def main() -> None:
    """Run every configuration; write JSON; print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=20.0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/dphe.json"))
    parser.add_argument(
        "--security-only",
        action="store_true",
        help="only the tags/MACs overhead rows (merged into an existing --out)",
    )
    args = parser.parse_args()

    settings = RunSettings(dphe_weighting="uniform")

    def size(input_shape: tuple[int, ...], **over: str) -> int:
        model = build_run_model(dataclasses.replace(settings, **over), input_shape)
        return sum(int(v.numel()) for v in model.state_dict().values())

    models = {
        "linear-2048x101": 2048 * 101 + 101,
        # the app's default: digits (1x8x8 images) -> model "auto" = cnn, 32 bits
        "default-cnn-32b": size((1, 8, 8)),
        "mlp-32b": size((64,), model="mlp"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        paths = generate_keys(
            Path(tmp) / "keys",
            num_clients=args.clients,
            key_bits=args.key_bits,
            allow_test_keys=args.key_bits not in (2048, 3072),
        )
        keys = {
            "aggregator": load_aggregator_bundle(paths.aggregator),
            "keyholder": load_keyholder_bundle(paths.keyholder),
            "clients": [
                load_client_bundle(p, client_id=i) for i, p in enumerate(paths.clients)
            ],
        }
    security = {
        name: security_overhead(keys, settings, models[name])
        for name in ("mlp-32b",)  # the cnn (6,152 blocks x 3 clients) takes > 8 min
    }
    for name, row in security.items():
        print(f"security overhead {name}: {json.dumps(row)}", flush=True)
    if args.security_only:
        out_path = Path(args.out)
        old = json.loads(out_path.read_text()) if out_path.is_file() else {}
        old["security_overhead"] = security
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(old, indent=2))
        print(f"wrote {args.out}")
        return
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
    out = {
        "benchmark": "dphe",
        "units": units,
        "settings": {
            "key_bits": args.key_bits,
            "clients": args.clients,
            "budget_s": args.budget_s,
            "weighting": "uniform",
            "scale_bits": settings.dphe_scale_bits,
            "clip": settings.dphe_clip,
            "max_contributors": settings.dphe_max_contributors,
        },
        "rows": rows,
        "ratios": ratios,
        "security_overhead": security,
        "targets_at_90_percent_sparsity": targets,
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    for r in ratios:
        print(
            f"{r['model']:>16} {r['sparsity']:>5.0%}: packed is "
            f"{r['naive_over_packed']:.1f}x faster than naive, "
            f"{r['dphe_over_packed']:.1f}x faster than DPHE (packing 1)"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
