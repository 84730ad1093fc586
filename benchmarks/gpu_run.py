"""The GPU runbook: what one lent GPU window runs, inside a time budget.

``bash benchmarks/gpu_run.sh --out DIR [--budget SECONDS] [--device cuda|cpu]
[--tiny] [--data IMAGES.npz[.xz]]`` installs the bundle (``gpu_bundle.sh``) where
Flower is missing, then runs this file, which, step by step, each under what is
left of the budget:

1. ``machine``: the device, drivers, Python, torch, Flower and Ray versions;
2. ``features``: ``python -m hashdata.features`` (EfficientNet-Lite0, pretrained,
   frozen) over the image file, on the device: the features protocol's input;
3. ``features-fedavg`` / ``features-fedhap``: Flower's Ray simulation
   (``experiments.simulate``, one Ray instance, ``--client-gpus`` a fraction of the
   GPU per client) of DPSH (FedAvg) and FedHAP on those features (``model = mlp``);
   ``features-fedavg-deterministic`` and ``...-deterministic-repeat`` run the
   first twice with ``cuda-deterministic = true``: the setting's cost is
   their round time against it, and the repeat's ``same_as_first_run`` says whether
   the same seed gave the same per-round records, bit for bit, every field but the
   wall times (on a CPU the setting does nothing, and the pair checks the CPU's
   determinism);
4. ``finetune-fedavg`` / ``finetune-fedhap``: the same on the images with the
   backbone trainable (``model = efficientnet-lite0``, ``model-image-size``);
5. ``loopback``: one round of a loopback Flower deployment (SuperLink and
   SuperNodes on 127.0.0.1, a fresh ClientApp process per message), for
   comparison with the Ray simulation's warm actors.

While each step runs, GPU utilisation and memory are sampled (``nvidia-smi``,
every 0.5 s); on a machine without one, nothing is sampled and the report says so.
Every step's wall time, each run's rounds (training and evaluation seconds), its
mAP@ALL and the device its clients reported go into ``DIR/summary.json`` and
``DIR/REPORT.md``; the logs and run folders into ``DIR/logs.tar.gz``. A step the
budget cannot fit is skipped and reported as skipped, never silently dropped.

``--tiny`` (with ``--device cpu``) is the rehearsal: a small image file made from
scikit-learn's digits, 2 clients, 1 round, 32 px: the same code path, in about a
minute, run by ``tests/e2e/test_gpu_runbook.py`` so that it cannot rot.
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
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from server.run_files import read_rounds, without_timing

ROOT = Path(__file__).resolve().parents[1]
#: Seconds kept back from the budget for the report and the archive.
RESERVE_S = 15.0


@dataclass
class Plan:
    """Sizes of one runbook: the full GPU run, or the CPU rehearsal (``tiny``)."""

    clients: int = 10
    features_rounds: int = 10
    finetune_rounds: int = 3
    image_size: int = 224
    loopback_clients: int = 3
    code_length: int = 32
    batch_size: int = 64
    finetune_lr: float = 1e-4
    finetune_epochs: int = 1

    @classmethod
    def tiny(cls) -> Plan:
        """Return the CPU rehearsal's sizes."""
        return cls(
            clients=2,
            features_rounds=1,
            finetune_rounds=1,
            image_size=32,
            loopback_clients=2,
            code_length=16,
            batch_size=32,
        )


@dataclass
class Budget:
    """Wall-clock deadline of the whole runbook."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        """Return the seconds left, less the reserve for the report."""
        return self.seconds - (time.monotonic() - self.start) - RESERVE_S


class GpuSampler:
    """``nvidia-smi`` utilisation and memory every 0.5 s, tagged with the step."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.step = "idle"
        self.samples: list[dict] = []
        self.available = shutil.which("nvidia-smi") is not None
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start sampling (nothing without nvidia-smi)."""
        if not self.available:
            return
        self._proc = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=utilization.gpu,memory.used",
                "--format=csv,noheader,nounits",
                "-lms",
                "500",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        t0 = time.monotonic()
        for line in self._proc.stdout:
            try:
                util, mem = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append(
                {
                    "t": round(time.monotonic() - t0, 2),
                    "step": self.step,
                    "util": util,
                    "mem_mib": mem,
                }
            )

    def stop(self) -> None:
        """Stop sampling and write every sample to the CSV file."""
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        with self.path.open("w") as fh:
            fh.write("t,step,util_percent,memory_mib\n")
            for s in self.samples:
                fh.write(f"{s['t']},{s['step']},{s['util']},{s['mem_mib']}\n")

    def summary(self, step: str) -> dict | None:
        """Return utilisation and memory statistics of one step's samples."""
        rows = [s for s in self.samples if s["step"] == step]
        if not rows:
            return None
        utils = [s["util"] for s in rows]
        return {
            "samples": len(rows),
            "util_median": statistics.median(utils),
            "util_mean": round(statistics.fmean(utils), 1),
            "util_max": max(utils),
            "busy_share": round(sum(u > 0 for u in utils) / len(utils), 3),
            "mem_max_mib": max(s["mem_mib"] for s in rows),
        }


def machine_info(device: str) -> dict:
    """Describe what the runbook ran on: versions, the accelerator, the CPUs."""
    import torch

    info: dict = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cpus": os.cpu_count(),
        "requested_device": device,
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = round(
            torch.cuda.get_device_properties(0).total_memory / 2**30, 1
        )
    for name in ("flwr", "ray", "numpy"):
        try:
            module = __import__(name)
            info[name] = getattr(module, "__version__", "?")
            info[f"{name}_file"] = getattr(module, "__file__", "?")
        except ImportError as exc:
            info[name] = f"missing: {exc}"
    if shutil.which("nvidia-smi"):
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,memory.total,driver_version",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        info["nvidia_smi"] = out.stdout.strip()
    return info


def tiny_images(path: Path, *, seed: int = 0) -> Path:
    """Write a small image ``.npz`` (32x32x3 uint8 HWC rows, ``split``) of digits.

    Each 8x8 digit is scaled to 0-255, repeated 4x4 to 32x32 and copied to three
    channels; 40 queries (4 a class) are ``split == 1``, 200 database rows the rest.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    rows, labels, split = [], [], []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(digits.target == c))[:24]
        for j, i in enumerate(idx):
            img = (digits.images[i] * (255 / 16)).astype(np.uint8)
            img = np.kron(img, np.ones((4, 4), np.uint8))
            rows.append(np.repeat(img[:, :, None], 3, axis=2).reshape(-1))
            labels.append(c)
            split.append(1 if j < 4 else 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        path,
        x_image=np.stack(rows),
        labels=np.asarray(labels, np.int64),
        split=np.asarray(split, np.int8),
        image_shape=np.asarray([32, 32, 3]),
    )
    return path


def features_options(features: Path, rounds: int) -> list[str]:
    """Return the ``--set`` options of a run on the features file (``mlp``)."""
    options = {
        "dataset": "npz",
        "data-path": str(features),
        "model": "mlp",
        "rounds": rounds,
        "eval-every": rounds,
    }
    return [arg for k, v in options.items() for arg in ("--set", f"{k}={v}")]


def run_step(cmd: list[str], log: Path, timeout: float, env: dict) -> tuple[int, float]:
    """Run ``cmd`` with its output in ``log``; (exit code, seconds). 124 = timeout."""
    t0 = time.monotonic()
    with log.open("w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            rc = 124
    return rc, time.monotonic() - t0


def same_metrics(first: dict, repeat: dict) -> bool | None:
    """Whether two runs' per-round records are equal bit for bit, timing aside.

    Every field a seed fixes is compared (losses, mAPs, precision@K, each client's
    metrics, bytes), as the end-to-end resume tests do
    (:func:`server.run_files.without_timing`).

    ``None`` where either run has none to compare (it failed or was skipped).
    """
    a = first.get("metrics_per_round")
    b = repeat.get("metrics_per_round")
    if not a or not b:
        return None
    return a == b


def step_status(rc: int, *, finished: bool) -> str:
    """Return a step's status: ok, stopped by the budget (exit 124) or failed."""
    if finished:
        return "ok"
    if rc == 124:
        return "stopped: the budget ran out (exit 124)"
    return f"failed (exit {rc})"


def run_summary(run_dir: Path) -> dict:
    """Read rounds, timing, mAP and client devices of one finished run folder."""
    rows = read_rounds(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    trained = [r for r in rows if r.get("round", 0) > 0]
    train_s = [r["train_round_s"] for r in trained if r.get("train_round_s")]
    eval_s = [r["eval_seconds"] for r in rows if r.get("eval_seconds")]
    nodes = config.get("nodes", [])
    return {
        "run_dir": run_dir.name,
        "rounds": len(trained),
        "round0_map_all": rows[0].get("map_all") if rows else None,
        "map_all": summary["final"]["map_all"],
        "metrics_per_round": without_timing(rows),
        "train_round_s": [round(x, 2) for x in train_s],
        "train_round_s_median": round(statistics.median(train_s), 2)
        if train_s
        else None,
        "train_round_s_after_first": (
            round(statistics.median(train_s[1:]), 2) if len(train_s) > 1 else None
        ),
        "eval_s_median": round(statistics.median(eval_s), 2) if eval_s else None,
        "client_devices": sorted({str(n.get("device")) for n in nodes}),
        "server_device": config.get("server_device"),
        "protocol": summary.get("protocol"),
    }


def main() -> None:  # noqa: C901 -- one linear script, step after step
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=480.0, help="seconds in all")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--tiny", action="store_true", help="the CPU rehearsal")
    parser.add_argument("--data", type=Path, default=None, help="image .npz")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder")
    parser.add_argument(
        "--steps", default="", help="comma-separated subset of the steps to run"
    )
    parser.add_argument("--finetune-rounds", type=int, default=None)
    parser.add_argument("--finetune-epochs", type=int, default=None)
    parser.add_argument("--finetune-lr", type=float, default=None)
    args = parser.parse_args()

    budget = Budget(args.budget)
    plan = Plan.tiny() if args.tiny else Plan()
    if args.finetune_rounds is not None:
        plan.finetune_rounds = args.finetune_rounds
    if args.finetune_epochs is not None:
        plan.finetune_epochs = args.finetune_epochs
    if args.finetune_lr is not None:
        plan.finetune_lr = args.finetune_lr
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work: Path = args.work or (out.parent / (out.name + "-work"))
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    only = {s for s in args.steps.split(",") if s}
    gpu = args.device != "cpu"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    }
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    py = sys.executable
    report: dict = {"plan": plan.__dict__, "budget_s": args.budget, "steps": {}}
    sampler = GpuSampler(out / "gpu_samples.csv")

    def record(name: str, **fields: object) -> None:
        report["steps"][name] = fields
        print(f"[gpu_run] {name}: {json.dumps(fields, default=str)[:400]}", flush=True)

    # 1. machine
    report["machine"] = machine_info(args.device)
    print(f"[gpu_run] machine: {json.dumps(report['machine'])}", flush=True)
    sampler.start()

    # 2. data
    if args.tiny:
        images = tiny_images(work / "tiny_images.npz")
    else:
        if args.data is None:
            parser.error("--data IMAGES.npz[.xz] is required without --tiny")
        images = args.data
        if images.suffix == ".xz":
            target = work / images.name[: -len(".xz")]
            if not target.exists():
                subprocess.run(
                    [
                        py,
                        str(ROOT / "benchmarks" / "npz_xz.py"),
                        "unpack",
                        str(images),
                        str(target),
                    ],
                    check=True,
                )
            images = target
    report["data"] = {"images": str(images), "bytes": images.stat().st_size}
    device = "cpu" if not gpu else args.device

    def wanted(name: str, needs: float) -> bool:
        if only and name not in only:
            return False
        if budget.left() < needs:
            record(
                name,
                status="skipped",
                reason=f"budget: {budget.left():.0f} s left, needs about {needs:.0f} s",
            )
            return False
        return True

    # 3. features on the device
    features = work / f"features_{plan.image_size}px.npz"
    if wanted("features", 20):
        sampler.step = "features"
        cmd = [
            py,
            "-m",
            "hashdata.features",
            "--backbone",
            "efficientnet-lite0",
            "--data",
            str(images),
            "--out",
            str(features),
            "--image-size",
            str(plan.image_size),
            "--device",
            device,
            "--batch-size",
            "256",
            "--quiet",
        ]
        if features.exists():
            features.unlink()
        rc, secs = run_step(cmd, logs / "features.log", budget.left(), env)
        n = int(np.load(features)["labels"].shape[0]) if rc == 0 else 0
        record(
            "features",
            status=step_status(rc, finished=rc == 0),
            seconds=round(secs, 1),
            images=n,
            images_per_s=round(n / secs, 1) if n else None,
            image_size=plan.image_size,
            gpu=sampler.summary("features"),
        )

    common = [
        "--set",
        f"code-length={plan.code_length}",
        "--set",
        "partitioning=iid",
        "--set",
        f"device={device}",
        "--set",
        "seed=0",
    ]
    deterministic = ["--set", "cuda-deterministic=true"]
    sims = [
        ("features-fedavg", "fedavg", "features", 45, []),
        # deterministic CUDA kernels: their cost is the round time against
        # features-fedavg; run twice, the same seed must give the same losses and mAP
        ("features-fedavg-deterministic", "fedavg", "features", 45, deterministic),
        (
            "features-fedavg-deterministic-repeat",
            "fedavg",
            "features",
            45,
            deterministic,
        ),
        ("features-fedhap", "fedhap", "features", 45, []),
        ("finetune-fedavg", "fedavg", "finetune", 60, []),
        ("finetune-fedhap", "fedhap", "finetune", 60, []),
    ]
    cpus = max(2, os.cpu_count() or 2)
    client_gpus = 0.0 if not gpu else round(1.0 / plan.clients, 3)
    for name, strategy, protocol, needs, extra in sims:
        if protocol == "features" and not features.exists():
            if not only or name in only:
                record(name, status="skipped", reason="no features file")
            continue
        if not wanted(name, needs):
            continue
        sampler.step = name
        results = work / "runs" / name
        shutil.rmtree(results, ignore_errors=True)
        results.mkdir(parents=True)
        if protocol == "features":
            data = features_options(features, plan.features_rounds)
        else:
            data = [
                "--set",
                "dataset=npz",
                "--set",
                f"data-path={images}",
                "--set",
                "image-shape=32,32,3",
                "--set",
                "feature-scaling=minmax",
                "--set",
                "model=efficientnet-lite0",
                "--set",
                f"model-image-size={plan.image_size}",
                "--set",
                f"batch-size={plan.batch_size}",
                "--set",
                f"learning-rate={plan.finetune_lr}",
                "--set",
                f"local-epochs={plan.finetune_epochs}",
                "--set",
                f"rounds={plan.finetune_rounds}",
                "--set",
                f"eval-every={plan.finetune_rounds}",
            ]
        cmd = [
            py,
            "-m",
            "experiments.simulate",
            "--clients",
            str(plan.clients),
            "--cpus",
            str(cpus),
            "--client-cpus",
            "1",
            "--client-gpus",
            str(client_gpus),
            "--set",
            f"strategy={strategy}",
            "--set",
            f"results-dir={results}",
            *common,
            *data,
            *extra,
        ]
        rc, secs = run_step(cmd, logs / f"{name}.log", budget.left(), env)
        runs = [
            p for p in results.iterdir() if p.is_dir() and (p / "summary.json").exists()
        ]
        fields: dict = {
            "status": step_status(rc, finished=rc == 0 and bool(runs)),
            "seconds": round(secs, 1),
            "protocol": protocol,
            "backend": f"Ray simulation, {plan.clients} clients, "
            f"{client_gpus} GPU each",
        }
        if runs:
            fields.update(run_summary(runs[0]))
        if name.endswith("-repeat"):
            first = report["steps"].get(name.removesuffix("-repeat"), {})
            fields["same_as_first_run"] = same_metrics(first, fields)
        fields["gpu"] = sampler.summary(name)
        record(name, **fields)

    # 5. loopback deployment, one round, on the features
    name = "loopback"
    if not features.exists():
        if not only or name in only:
            record(name, status="skipped", reason="no features file")
    elif wanted(name, 60):
        sampler.step = name
        results = work / "runs" / name
        shutil.rmtree(results, ignore_errors=True)
        results.mkdir(parents=True)
        cmd = [
            py,
            "-m",
            "experiments.loopback",
            "--clients",
            str(plan.loopback_clients),
            "--out",
            str(results),
            "--set",
            "strategy=fedavg",
            *features_options(features, 1),
            *common,
        ]
        rc, secs = run_step(cmd, logs / "loopback.log", budget.left(), env)
        runs = [p for p in results.rglob("summary.json")]
        fields = {
            "status": step_status(rc, finished=rc == 0 and bool(runs)),
            "seconds": round(secs, 1),
            "backend": f"loopback deployment, {plan.loopback_clients} SuperNodes",
        }
        if runs:
            fields.update(run_summary(runs[0].parent))
        fields["gpu"] = sampler.summary(name)
        record(name, **fields)

    sampler.stop()
    report["gpu_sampled"] = sampler.available
    report["wall_s"] = round(time.monotonic() - budget.start, 1)
    (out / "summary.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "REPORT.md").write_text(render(report))
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="logs")
        runs_dir = work / "runs"
        if runs_dir.exists():
            for p in runs_dir.rglob("*"):
                if p.is_file() and p.suffix in (".json", ".jsonl", ".log", ".txt"):
                    tar.add(p, arcname=str(p.relative_to(work)))
    print((out / "REPORT.md").read_text())
    failed = [
        k
        for k, v in report["steps"].items()
        if str(v.get("status")).startswith(("failed", "stopped"))
    ]
    sys.exit(1 if failed else 0)


def render(report: dict) -> str:
    """Render the report as Markdown: machine, then one row per step."""
    m = report["machine"]
    lines = [
        "# GPU runbook report",
        "",
        f"Machine: {m.get('gpu', 'no GPU')} ({m.get('gpu_memory_gib', '-')} GiB), "
        f"{m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}, "
        f"flwr {m.get('flwr')}, ray {m.get('ray')}; requested device "
        f"{m['requested_device']}. Wall time {report['wall_s']} s of a "
        f"{report['budget_s']:.0f} s budget.",
        "",
        "| step | status | wall s | rounds | round s (median; after the 1st) | "
        "eval s | mAP@ALL (round 0 -> final) | client devices | GPU util median / "
        "mean / max % | GPU mem max MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["steps"].items():
        g = s.get("gpu") or {}
        gpu_util = (
            f"{g['util_median']:.0f} / {g['util_mean']:.0f} / {g['util_max']:.0f}"
            if g
            else "-"
        )
        maps = (
            f"{s['round0_map_all']:.4f} -> {s['map_all']:.4f}"
            if s.get("map_all") is not None and s.get("round0_map_all") is not None
            else "-"
        )
        rounds_s = (
            f"{s.get('train_round_s_median')}; {s.get('train_round_s_after_first')}"
            if s.get("train_round_s")
            else "-"
        )
        extra = (
            f" ({s['images']} images, {s['images_per_s']} images/s at "
            f"{s['image_size']} px)"
            if name == "features" and s.get("images")
            else ""
        )
        lines.append(
            f"| {name}{extra} | {s.get('status')} | {s.get('seconds', '-')} | "
            f"{s.get('rounds', '-')} | {rounds_s} | {s.get('eval_s_median', '-')} | "
            f"{maps} | {', '.join(s.get('client_devices', [])) or '-'} | {gpu_util} | "
            f"{g.get('mem_max_mib', '-')} |"
        )
    for name, s in report["steps"].items():
        if "same_as_first_run" in s:
            verdict = {True: "equal", False: "NOT equal", None: "not compared"}[
                s["same_as_first_run"]
            ]
            lines += [
                "",
                f"{name}: per-round losses and mAP {verdict} to the first run's, "
                "bit for bit.",
            ]
    if not report.get("gpu_sampled"):
        lines += ["", "No nvidia-smi on this machine: GPU utilisation was not sampled."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
