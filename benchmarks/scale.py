"""Peak memory and seconds per training round for 100 and 1,000 simulated clients.

For each total client count N: one simulation (Flower + Ray, in-process, 2 CPUs, one
client per CPU) in a fresh child process, with the same number of clients sampled per
round (``fraction-train = sampled / N``, ``min-train-nodes = sampled``), ``iid``
partitioning, ``rounds`` rounds and retrieval evaluated only at round 0 and the last
round (``eval-every = rounds``). Measured:

* seconds per training round: ``train_round_s`` of ``rounds.jsonl`` (configure,
  the sampled clients' training, aggregation; no evaluation), mean over rounds
  2..R (round 1 is reported apart: it includes each actor's first training);
* discovery seconds (``describe`` to every node) and the two evaluations (``encode``
  on every node), which must grow with N;
* peak memory of the whole process tree (driver, Ray's GCS / raylet, the Ray
  workers), sampled with psutil every ``--sample-s`` seconds: the sum of RSS (pages
  shared between processes counted once per process) and the sum of PSS (shared
  pages split between the processes that map them; Linux only, else ``null``), plus
  the driver's own peak.

The per-round training cost should depend on the sampled clients, not on N: the
JSON's ``ratio_round_s_largest_over_smallest`` says whether it does (1.0 = same).

``python benchmarks/scale.py [--clients 100,1000] [--sampled 20] [--rounds 4]``
writes ``docs/results/benchmarks/scale.json`` and the table
``docs/results/benchmarks/scale.md`` (included by docs/benchmarks.md).
``--ray-address HOST:PORT`` joins a running Ray cluster instead of starting one per
point (the smoke test's shared head: ``--clients 2,3 --sampled 2 --rounds 2``); the
tree then holds the driver only, not Ray's processes, and the JSON names the
address.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs/results/benchmarks/scale.json"


# --------------------------------------------------------------------------------
# process-tree memory (psutil)
# --------------------------------------------------------------------------------
_MIB = 1024 * 1024


def process_tree(root: int) -> list[psutil.Process]:
    """``root`` and all its descendants alive now (empty if ``root`` has exited)."""
    try:
        proc = psutil.Process(root)
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _memory(proc: psutil.Process) -> tuple[int, int | None]:
    """RSS and PSS bytes of ``proc`` (PSS ``None`` where the OS has none)."""
    try:
        full = proc.memory_full_info()
        return full.rss, getattr(full, "pss", None)
    except psutil.AccessDenied:
        return proc.memory_info().rss, None


def tree_memory(root: int) -> dict[str, float | None]:
    """MiB of ``root``'s tree now: RSS sum, PSS sum, the root's RSS, process count.

    ``pss_mib`` is ``None`` where no process of the tree reports a PSS (only Linux
    has it); processes that exit while being read are left out.
    """
    rss = pss = own = 0
    count, with_pss = 0, False
    for proc in process_tree(root):
        try:
            proc_rss, proc_pss = _memory(proc)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        count += 1
        rss += proc_rss
        if proc_pss is not None:
            pss += proc_pss
            with_pss = True
        if proc.pid == root:
            own = proc_rss
    return {
        "rss_mib": rss / _MIB,
        "pss_mib": pss / _MIB if with_pss else None,
        "driver_rss_mib": own / _MIB,
        "processes": count,
    }


class PeakSampler(threading.Thread):
    """Samples :func:`tree_memory` of ``root`` until stopped; keeps each peak."""

    def __init__(self, root: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.root, self.every_s = root, every_s
        self.peak: dict[str, float] = {}
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:  # noqa: D102
        while not self._stop_event.is_set():
            now = tree_memory(self.root)
            for k, v in now.items():
                if v is not None:
                    self.peak[k] = max(self.peak.get(k, 0), v)
            self.samples += 1
            self._stop_event.wait(self.every_s)

    def stop(self) -> dict[str, float]:
        """Stop sampling; return the peaks."""
        self._stop_event.set()
        self.join()
        return self.peak


# --------------------------------------------------------------------------------
# one simulation (child process)
# --------------------------------------------------------------------------------
def overrides_for(clients: int, sampled: int, rounds: int, results_dir: str) -> dict:
    """Run-config overrides of one point: ``sampled`` of ``clients`` per round."""
    return {
        "rounds": rounds,
        "eval-every": rounds,
        "partitioning": "iid",
        "fraction-train": sampled / clients,
        "min-train-nodes": sampled,
        "results-dir": results_dir,
    }


def patch_vce_queue() -> None:
    """Deliver pending messages in O(pending) per sweep (``--patch-vce-queue``).

    Flower 1.42's simulation engine (``vce_api.add_messages_to_queue``) asks the
    link state every 0.1 s, for *every* registered node, for one undelivered
    message, and each ask scans every stored message: O(nodes x stored messages)
    per sweep, holding the state lock and the driver's GIL, even when only the 20
    sampled nodes have messages. This replacement asks only the nodes that have an
    undelivered message (the same ``get_message_ins`` call, same order of nodes),
    to measure what that scan costs; it is not used by the app.
    """
    from flwr.server.superlink.fleet.vce import vce_api  # noqa: PLC0415

    def add_messages_to_queue(
        state: Any, queue: Any, nodes_mapping: Any, f_stop: Any
    ) -> None:
        while not f_stop.is_set():
            with state.lock:
                pending = {
                    m.metadata.dst_node_id
                    for m in state.message_ins_store.values()
                    if m.metadata.delivered_at == ""
                }
            for node_id in nodes_mapping.keys():
                if node_id in pending:
                    for msg in state.get_message_ins(node_id=node_id, limit=1):
                        queue.put(msg)
            f_stop.wait(0.1)

    vce_api.add_messages_to_queue = add_messages_to_queue


def child(
    clients: int,
    sampled: int,
    rounds: int,
    out: Path,
    *,
    patch_queue: bool = False,
    ray_address: str | None = None,
) -> None:
    """Run one simulation here; write its timings to ``out`` (JSON)."""
    sys.path.insert(0, str(ROOT))
    if patch_queue:
        patch_vce_queue()
    import server.experiment as experiment  # noqa: PLC0415
    from experiments.simulate import simulate  # noqa: PLC0415
    from server.run_files import read_rounds  # noqa: PLC0415

    timers: dict[str, float] = {}
    describe = experiment.describe_nodes

    def timed_describe(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return describe(*args, **kwargs)
        finally:
            timers["discovery_s"] = time.perf_counter() - t0

    experiment.describe_nodes = timed_describe
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run_dir = simulate(
            overrides_for(clients, sampled, rounds, tmp),
            num_clients=clients,
            ray_address=ray_address,
        )
        total = time.perf_counter() - t0
        rows = read_rounds(run_dir)
    train = {r["round"]: r["train_round_s"] for r in rows if r["round"] >= 1}
    steady = [train[r] for r in range(2, rounds + 1)]
    out.write_text(
        json.dumps(
            {
                "clients": clients,
                "sampled_per_round": sampled,
                "rounds": rounds,
                "seconds_per_round": sum(steady) / len(steady),
                "train_round_s": [train[r] for r in range(1, rounds + 1)],
                "first_round_s": train[1],
                "discovery_s": timers.get("discovery_s"),
                "eval_s": [r["eval_seconds"] for r in rows if "eval_seconds" in r],
                "eval_clients": [
                    r["eval_clients"] for r in rows if "eval_clients" in r
                ],
                "map_all_final": rows[-1].get("map_all"),
                "total_s": total,
                "vce_queue_patched": patch_queue,
            }
        )
    )


def measure(
    clients: int,
    sampled: int,
    rounds: int,
    every_s: float,
    patch_queue: bool = False,
    ray_address: str | None = None,
) -> dict:
    """Run :func:`child` in a fresh process; sample its tree's memory meanwhile."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            __file__,
            "--child",
            str(clients),
            "--sampled",
            str(sampled),
            "--rounds",
            str(rounds),
            "--result",
            str(result),
        ] + (["--patch-vce-queue"] if patch_queue else [])
        cmd += ["--ray-address", ray_address] if ray_address else []
        proc = subprocess.Popen(cmd, cwd=ROOT)
        sampler = PeakSampler(proc.pid, every_s)
        sampler.start()
        code = proc.wait()
        peak = sampler.stop()
        if code != 0:
            raise RuntimeError(f"{clients} clients: the simulation exited with {code}")
        row = json.loads(result.read_text())
    row.update(
        peak_rss_mib=peak["rss_mib"],
        peak_pss_mib=peak.get("pss_mib"),
        peak_driver_rss_mib=peak["driver_rss_mib"],
        peak_processes=int(peak["processes"]),
        memory_samples=sampler.samples,
    )
    return row


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def table(data: dict) -> str:
    """Render ``scale.json`` as the markdown table docs/benchmarks.md includes."""
    lines = [
        "| clients | sampled / round | s / training round | first round s "
        "| discovery s | evaluations s (round 0, last) | peak RSS, tree (MiB) "
        "| peak PSS, tree (MiB) | peak driver RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["results"]:
        evals = ", ".join(f"{s:.1f}" for s in r["eval_s"])
        disc = r["discovery_s"]
        lines.append(
            f"| {r['clients']:,} | {r['sampled_per_round']} "
            f"| {r['seconds_per_round']:.2f} | {r['first_round_s']:.2f} "
            f"| {'-' if disc is None else f'{disc:.1f}'} | {evals} "
            f"| {r['peak_rss_mib']:,.0f} | {_mib(r['peak_pss_mib'])} "
            f"| {r['peak_driver_rss_mib']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="100,1000")
    parser.add_argument("--sampled", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sample-s", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--patch-vce-queue",
        action="store_true",
        help="measure with Flower's per-node message sweep replaced (see "
        "patch_vce_queue); the JSON says so",
    )
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(
            args.child,
            args.sampled,
            args.rounds,
            args.result,
            patch_queue=args.patch_vce_queue,
            ray_address=args.ray_address,
        )
        return
    if args.rounds < 2:
        parser.error("--rounds must be >= 2 (round 1 is reported apart)")
    sys.path.insert(0, str(ROOT))
    from experiments.lib.grids import COUNTS, flag_list  # noqa: PLC0415

    counts = flag_list(parser, "--clients", args.clients, COUNTS)
    if min(counts) < args.sampled:
        parser.error("--sampled must not exceed the smallest --clients")
    results = []
    for n in counts:
        row = measure(
            n,
            args.sampled,
            args.rounds,
            args.sample_s,
            args.patch_vce_queue,
            args.ray_address,
        )
        results.append(row)
        print(json.dumps(row), flush=True)
    import torch  # noqa: PLC0415

    small, large = results[0], results[-1]
    data = {
        "benchmark": "scale",
        "command": "python benchmarks/scale.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "defaults": "pyproject [tool.flwr.app.config] (digits, auto, 32 bits), iid",
        "client_resources": {"num_cpus": 1, "num_gpus": 0},
        "vce_queue_patched": args.patch_vce_queue,
        **({"ray_address": args.ray_address} if args.ray_address else {}),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ratio_round_s_largest_over_smallest": (
            large["seconds_per_round"] / small["seconds_per_round"]
        ),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table(data))


if __name__ == "__main__":
    main()
