"""Cost of DPHE model binding and of the per-client tag check, against no check.

``python -m benchmarks.dphe_binding [--key-bits 2048] [--dim 24864] [--clients 5]
[--reps 3] [--out docs/results/benchmarks/dphe-binding.json]``

One run measures, on the same keys, update and machine, median over ``--reps``:

* **client** -- ``model_digest`` of the received arrays (``--dim`` float32 values in
  two arrays, :func:`crypto.binding.model_digest`) and ``encrypt_update`` bound to it,
  against ``encrypt_update`` with no model bound (the unchecked path: the same code
  without the digest). ``client.binding_ratio`` = (digest + bound encryption) /
  unbound encryption.
* **keyholder** -- an honest round of ``--clients`` (every check, one decryption),
  against a round where one client's tags are wrong: the refused decryption, the
  aggregator's masking of every contributor's blocks
  (:meth:`crypto.DPHEAggregator.masked_blocks`), the keyholder's per-client tag
  check (:meth:`crypto.Keyholder.identify`) and the decryption of the rest.
  ``keyholder.check_ratio`` = (refused + identify + rest) / honest decryption;
  ``aggregator.mask_s`` is the aggregator's added time.

Dense updates, packing as the key allows, uniform weights, padding off. Writes JSON
to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import crypto.dphe as dphe
from crypto import (
    AggregateRefused,
    AggregationContext,
    DPHEAggregator,
    DPHEParams,
    FixedPointParams,
    Keyholder,
    encrypt_update,
    generate_keys,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
    max_packing,
)
from crypto.binding import model_digest

ROOT = Path(__file__).resolve().parent.parent


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _time(fn, *args, **kwargs):
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return time.perf_counter() - start, value


def _wrong_tags(real):
    """Tags of the other blocks (reversed): wrong in almost every block."""

    def tags(*args, **kwargs):
        return real(*args, **kwargs)[::-1]

    return tags


def measure(key_bits: int, dim: int, clients: int, reps: int) -> dict:
    """Run the measurement; return the JSON-ready result."""
    folder = Path(tempfile.mkdtemp(prefix="dphe-binding-"))
    paths = generate_keys(
        folder / "keys",
        num_clients=clients,
        key_bits=key_bits,
        allow_test_keys=key_bits < 2048,
    )
    kh_bundle = load_keyholder_bundle(paths.keyholder)
    agg_bundle = load_aggregator_bundle(paths.aggregator)
    bundles = [load_client_bundle(p) for p in paths.clients]
    fp = FixedPointParams(scale_bits=20, clip=1.0, max_weight=1, max_summands=128)
    params = DPHEParams(
        dimension=dim, packing=max_packing(key_bits, fp), fixed_point=fp
    )
    rng = np.random.default_rng(0)
    half = dim // 2
    arrays = {
        "w": rng.normal(size=half).astype(np.float32),
        "b": rng.normal(size=dim - half).astype(np.float32),
    }
    update = rng.normal(scale=0.01, size=dim)
    client = {"digest_s": [], "encrypt_bound_s": [], "encrypt_unbound_s": []}
    keyholder = {
        "honest_decrypt_s": [],
        "refused_decrypt_s": [],
        "identify_s": [],
        "rest_decrypt_s": [],
    }
    aggregator = {"mask_s": []}
    for rep in range(reps):
        kh = Keyholder(kh_bundle, {"model": params})
        kh.bind_run(rep)
        # client: digest + bound encryption against the unbound (unchecked) path
        context = AggregationContext(kh.session_id(), "model", 1)
        t, digest = _time(model_digest, arrays)
        client["digest_s"].append(t)
        common = {"weight": 1, "params": params, "context": context, "rng": rng}
        t, _ = _time(
            encrypt_update, update, bundle=bundles[0], model_digest=None, **common
        )
        client["encrypt_unbound_s"].append(t)
        encrypted = []
        for bundle in bundles:
            t, e = _time(
                encrypt_update, update, bundle=bundle, model_digest=digest, **common
            )
            client["encrypt_bound_s"].append(t)
            encrypted.append(e)
        agg = DPHEAggregator(agg_bundle, params, context)
        for i, e in enumerate(encrypted):
            agg.add(i, e)
        t, _ = _time(kh.decrypt_aggregate, agg.result())
        keyholder["honest_decrypt_s"].append(t)
        # round 2: client 0's tags are wrong; find it, drop it, decrypt the rest
        context2 = AggregationContext(kh.session_id(), "model", 2)
        agg2 = DPHEAggregator(agg_bundle, params, context2)
        real_tags = dphe.block_tags
        for i, bundle in enumerate(bundles):
            if i == 0:
                dphe.block_tags = _wrong_tags(real_tags)
            try:
                agg2.add(
                    i,
                    encrypt_update(
                        update,
                        weight=1,
                        bundle=bundle,
                        params=params,
                        context=context2,
                        rng=rng,
                        model_digest=digest,
                    ),
                )
            finally:
                dphe.block_tags = real_tags
        start = time.perf_counter()
        try:
            kh.decrypt_aggregate(agg2.result())
            raise RuntimeError("the wrong tags were not detected")
        except AggregateRefused as refusal:
            assert refusal.identify
        keyholder["refused_decrypt_s"].append(time.perf_counter() - start)
        t, masked = _time(agg2.masked_blocks)
        aggregator["mask_s"].append(t)
        t, culprits = _time(kh.identify, "model", 2, masked)
        keyholder["identify_s"].append(t)
        if culprits != (0,):
            raise RuntimeError(f"identify named {culprits}, expected (0,)")
        agg2.drop(culprits)
        t, _ = _time(kh.decrypt_aggregate, agg2.result())
        keyholder["rest_decrypt_s"].append(t)
    c = {k: _median(v) for k, v in client.items()}
    k = {name: _median(v) for name, v in keyholder.items()}
    a = {name: _median(v) for name, v in aggregator.items()}
    c["binding_ratio"] = (c["digest_s"] + c["encrypt_bound_s"]) / c["encrypt_unbound_s"]
    k["check_ratio"] = (
        k["refused_decrypt_s"] + k["identify_s"] + k["rest_decrypt_s"]
    ) / k["honest_decrypt_s"]
    return {
        "benchmark": "dphe-binding",
        "settings": {
            "key_bits": key_bits,
            "dimension": dim,
            "clients": clients,
            "reps": reps,
            "packing": params.packing,
            "blocks": params.num_blocks,
        },
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "client": c,
        "keyholder": k,
        "aggregator": a,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, measure, write the JSON; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument("--dim", type=int, default=24_864)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--out", default=str(ROOT / "docs/results/benchmarks/dphe-binding.json")
    )
    args = parser.parse_args(argv)
    if args.clients < 4 or args.dim < 2 or args.reps < 1:
        parser.error(
            "need --clients >= 4 (3 left after one is dropped), --dim >= 2, --reps >= 1"
        )
    out = measure(args.key_bits, args.dim, args.clients, args.reps)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(
        json.dumps(
            {
                "client": out["client"],
                "keyholder": out["keyholder"],
                "aggregator": out["aggregator"],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
