"""Seconds a fresh ClientApp process spends before it can train.

A deployed SuperNode (Flower 1.42, the containers, the GPU machine's loopback runs)
starts a new ``flwr-clientapp`` process for every message, so what the app costs to
import and to load its data is paid every round by every client. On the lent H200
the GPU idled while rounds took over a minute for this reason (docs/benchmarks.md,
"GPU runs").

Each repeat starts fresh interpreters that time, from inside (interpreter start
excluded):

* ``torch``: ``import torch``, the floor any torch ClientApp pays;
* ``app``: ``import clients.client_app`` (torch, Flower and this repository);
* ``data``: then ``load_local_data`` of partition 0 of ``--clients`` for the run
  config given with ``--set`` (default: digits), as a ClientApp's first message does.

A node keeps its partition on its disk (``clients/partition_cache.py``), so only a
node's first message loads the dataset: one untimed-for-the-median ``cold`` probe
per tree first fills a cache folder of its own (its ``data`` time is reported as
``cold_data_s``), and every timed repeat is a later message. ``beyond_torch_s`` is
``app + data - torch``, what the app adds to the floor (goal: at most
:data:`GOAL_BEYOND_TORCH_S`).

``--baseline-root DIR`` times another checkout (e.g. the commit before a change) in
the same run, alternating with this one repeat by repeat, so that a shared or busy
machine slows both alike; the JSON gives medians and the ratio to the baseline.
Each run also records which heavy optional modules the app import pulled in.

``python benchmarks/clientapp_start.py [--repeats 7] [--clients 10] [--set K=V ...]
[--baseline-root DIR] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("sklearn", "scipy.linalg", "scipy.stats", "opacus", "datasets")
GOAL_BEYOND_TORCH_S = 1.5  # app + data - torch, seconds

PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
out = {"torch": t1 - t0}
if sys.argv[2] != "torch":
    import clients.client_app
    t2 = time.perf_counter()
    out["app"] = t2 - t0
    out["heavy"] = [m for m in json.loads(sys.argv[3]) if m in sys.modules]
    if sys.argv[2] == "data":
        from clients.data import load_local_data
        from experiments.lib.overrides import parse_overrides, resolved_settings
        settings = resolved_settings(parse_overrides(json.loads(sys.argv[4])))
        load_local_data(settings, partition_id=0, num_partitions=int(sys.argv[5]))
        out["data"] = time.perf_counter() - t2
print(json.dumps(out))
"""


def probe(
    root: Path, phase: str, sets: list[str], clients: int, cache: Path | None = None
) -> dict:
    """Run one fresh interpreter over ``root``; return its own timings."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if cache is not None:
        env["FEDHASH_DATA_CACHE"] = str(cache)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), phase, json.dumps(HEAVY)]
        + [json.dumps(sets), str(clients)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"probe of {root} ({phase}) failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(roots: dict[str, Path], args: argparse.Namespace) -> dict[str, dict]:
    """Median seconds per tree and phase over ``args.repeats`` alternating repeats."""
    samples: dict[str, dict[str, list[float]]] = {
        name: {"torch": [], "app": [], "data": []} for name in roots
    }
    heavy: dict[str, list[str]] = {}
    caches = {name: Path(tempfile.mkdtemp(prefix=f"start-{name}-")) for name in roots}
    cold = {
        name: probe(root, "data", args.set, args.clients, caches[name])["data"]
        for name, root in roots.items()
    }
    for rep in range(args.repeats):
        for name, root in roots.items():
            t = probe(root, "torch", args.set, args.clients, caches[name])
            samples[name]["torch"].append(t["torch"])
            d = probe(root, "data", args.set, args.clients, caches[name])
            samples[name]["app"].append(d["app"])
            samples[name]["data"].append(d["data"])
            heavy[name] = d["heavy"]
        print(f"repeat {rep + 1}/{args.repeats} done", flush=True)
    for cache in caches.values():
        shutil.rmtree(cache, ignore_errors=True)
    out = {}
    for name in roots:
        medians = {
            f"{phase}_s": statistics.median(vals)
            for phase, vals in samples[name].items()
        }
        beyond = medians["app_s"] + medians["data_s"] - medians["torch_s"]
        out[name] = {
            **medians,
            "beyond_torch_s": beyond,
            "meets_goal": beyond <= GOAL_BEYOND_TORCH_S,
            "cold_data_s": cold[name],
            "samples": samples[name],
            "heavy_modules_imported": heavy[name],
            "root": str(roots[name]),
        }
    return out


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "results" / "benchmarks" / "clientapp_start.json",
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: must be >= 1")
    roots = {"this": ROOT}
    if args.baseline_root is not None:
        if not (args.baseline_root / "clients" / "client_app.py").is_file():
            parser.error(f"--baseline-root {args.baseline_root}: no clients/ there")
        roots["baseline"] = args.baseline_root.resolve()
    result = measure(roots, args)
    report = {
        "benchmark": "clientapp_start",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "repeats": args.repeats,
        "clients": args.clients,
        "run_config": args.set,
        "goal_beyond_torch_s": GOAL_BEYOND_TORCH_S,
        "load_average": list(os.getloadavg()),
        "results": result,
    }
    if "baseline" in result:
        report["ratio_to_baseline"] = {
            phase: result["this"][f"{phase}_s"] / result["baseline"][f"{phase}_s"]
            for phase in ("torch", "app", "data")
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, r in result.items():
        print(
            f"{name}: import torch {r['torch_s']:.2f} s, import app {r['app_s']:.2f} s,"
            f" load partition {r['data_s']:.2f} s (first message {r['cold_data_s']:.2f}"
            f" s); beyond torch {r['beyond_torch_s']:.2f} s (goal <= "
            f"{GOAL_BEYOND_TORCH_S}); heavy modules imported: "
            f"{', '.join(r['heavy_modules_imported']) or 'none'}"
        )
    if "ratio_to_baseline" in report:
        ratios = report["ratio_to_baseline"]
        print(
            "ratio to baseline: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
        )
    print(args.out)


if __name__ == "__main__":
    main()
