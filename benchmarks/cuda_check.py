"""The CUDA path of the local training code, against the CPU in the same run.

Runs each client-side training routine of the app on the CPU and, when one is
present, on CUDA, with the same seed and data, and records the loss, the retrieval
mAP where it applies, and the wall time:

* DPSH with the ``mlp`` on digits (``hashing.train.train_dpsh``), then mAP@ALL of
  the held-out queries against the database (``hashing.retrieval``);
* a FedHAP round with its discriminator and prototypes (``train_fedhap``);
* a PFMH round on multi-view digits with completed prototypes (``train_pfmh``);
* DP-SGD with the CSQ loss (``privacy.dp_sgd``, Opacus), whose epsilon must not
  depend on the device;
* throughput of the ``cnn`` on 32x32 RGB inputs (random data, DPSH loss): the GPU
  speed-up, CPU as the baseline.

It needs no Flower (the device machine has none): only ``hashing/``, ``hashdata/``
and ``privacy/``. CPU and CUDA results are not bit-identical (different kernels), so
the check is that both learn (finite, decreasing loss; mAP well above chance) and
agree closely.
``python benchmarks/cuda_check.py [--out FILE] [--tiny] [--cpu-only] [--skip-dp]``.

``--tiny`` runs every check with one epoch on 300 training samples (the cnn on 64
random images): a smoke run of the same code path, not a measurement.
``--cpu-only`` leaves CUDA out.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from hashdata.loaders import load_dataset  # noqa: E402
from hashdata.multiview import load_multiview_digits  # noqa: E402
from hashdata.protocol import split_query_database  # noqa: E402
from hashing.codes import pack_codes, sign_codes  # noqa: E402
from hashing.csq import csq_loss, hash_centers  # noqa: E402
from hashing.fedhap.discriminator import Discriminator  # noqa: E402
from hashing.fedhap.train import FedHAPTrainConfig, train_fedhap  # noqa: E402
from hashing.models import build_model  # noqa: E402
from hashing.pfmh.losses import PFMHLossConfig  # noqa: E402
from hashing.pfmh.model import build_multimodal_model  # noqa: E402
from hashing.pfmh.prototypes import (  # noqa: E402
    aggregate_and_enhance,
)
from hashing.pfmh.train import local_prototypes, train_pfmh  # noqa: E402
from hashing.retrieval import mean_average_precision  # noqa: E402
from hashing.train import LocalTrainConfig, encode, train_dpsh  # noqa: E402

SEED = 0


@dataclass(frozen=True)
class Sizes:
    """Epochs of each check, the cnn's image count, and training samples kept.

    ``samples=None``: all of the database / of multi-view digits.
    """

    dpsh_epochs: int = 30
    fedhap_epochs: int = 10
    pfmh_epochs: int = 5
    dp_epochs: int = 3
    cnn_images: int = 4096
    samples: int | None = None


FULL = Sizes()
TINY = Sizes(
    dpsh_epochs=1,
    fedhap_epochs=1,
    pfmh_epochs=1,
    dp_epochs=1,
    cnn_images=64,
    samples=300,
)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> tuple[object, float]:
    """Run ``fn()``; return its result and wall seconds (CUDA synchronised)."""
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def digits_split(samples: int | None = None) -> dict:
    """Digits as tensors, with the app's stratified query/database split.

    The database is cut to its first ``samples`` rows when given.
    """
    ds = load_dataset("digits")
    q, db = split_query_database(ds.labels, query_fraction=0.1, seed=SEED)
    x = torch.from_numpy(ds.inputs["image"]).reshape(ds.n, -1)
    y = torch.from_numpy(ds.labels)
    db = db[:samples]
    return {"xq": x[q], "yq": y[q], "xdb": x[db], "ydb": y[db]}


def dpsh(device: torch.device, data: dict, epochs: int = FULL.dpsh_epochs) -> dict:
    """DPSH on digits, then mAP@ALL of queries against the database."""
    torch.manual_seed(SEED)
    model = build_model("mlp", (64,), 32)
    config = LocalTrainConfig(epochs=epochs, learning_rate=1e-3, batch_size=64)
    stats, seconds = timed(
        lambda: train_dpsh(
            model,
            data["xdb"],
            data["ydb"],
            config=config,
            device=device,
            generator=torch.Generator().manual_seed(SEED),
        ),
        device,
    )
    q = pack_codes(sign_codes(encode(model, data["xq"], device=device)))
    d = pack_codes(sign_codes(encode(model, data["xdb"], device=device)))
    map_all = mean_average_precision(q, d, data["yq"].numpy(), data["ydb"].numpy())
    return {"loss": stats["loss"], "map_all": map_all, "seconds": seconds}


def fedhap(device: torch.device, data: dict, epochs: int = FULL.fedhap_epochs) -> dict:
    """One FedHAP round (10 epochs by default), discriminator and hash centres."""
    torch.manual_seed(SEED)
    model = build_model("mlp", (64,), 32)
    disc = Discriminator(32, 10)
    centers = hash_centers(10, 32)
    config = FedHAPTrainConfig(
        epochs=epochs, learning_rate=1e-3, batch_size=64, num_classes=10
    )
    stats, seconds = timed(
        lambda: train_fedhap(
            model,
            disc,
            data["xdb"],
            data["ydb"],
            prototypes=(centers, torch.arange(10)),
            config=config,
            device=device,
            generator=torch.Generator().manual_seed(SEED),
        ),
        device,
    )
    return {"loss": stats["loss"], "seconds": seconds}


def pfmh(
    device: torch.device, epochs: int = FULL.pfmh_epochs, samples: int | None = None
) -> dict:
    """One PFMH round on multi-view digits against its own completed prototypes.

    Only the first ``samples`` rows when given.
    """
    ds = load_multiview_digits()
    inputs = {m: torch.from_numpy(a[:samples]) for m, a in ds.inputs.items()}
    labels = torch.from_numpy(ds.labels[:samples])
    dims = {m: a.shape[1] for m, a in ds.inputs.items()}
    model = build_multimodal_model(dims, bits=32, k=512, seed=SEED)
    own = local_prototypes(model, inputs, labels, num_classes=10, device=device)
    central, personal = aggregate_and_enhance([own], num_classes=10, dim=512)
    stats, seconds = timed(
        lambda: train_pfmh(
            model,
            inputs,
            labels,
            personal_prototypes=personal[0],
            global_prototypes=central,
            config=PFMHLossConfig(),
            num_classes=10,
            epochs=epochs,
            learning_rate=1e-4,
            device=device,
            generator=torch.Generator().manual_seed(SEED),
        ),
        device,
    )
    return {"loss": stats["loss"], "seconds": seconds}


def dp_sgd(device: torch.device, data: dict, epochs: int = FULL.dp_epochs) -> dict:
    """DP-SGD (Opacus) with the per-sample CSQ loss; epsilon per record."""
    from privacy.dp_sgd import DPSGDConfig, train_dp_sgd
    from privacy.noise import NoiseSource

    torch.manual_seed(SEED)
    model = build_model("mlp", (64,), 32)
    centers = hash_centers(10, 32)

    def loss_fn(u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return csq_loss(u, y, centers.to(u.device), quantization_weight=0.1)

    result, seconds = timed(
        lambda: train_dp_sgd(
            model,
            data["xdb"],
            data["ydb"],
            loss_fn=loss_fn,
            epochs=epochs,
            batch_size=64,
            learning_rate=5e-3,
            config=DPSGDConfig(1.0, 1.0, 1e-5),
            # the same seeded noise on both devices (a benchmark, not a release)
            noise=NoiseSource.seeded(SEED, "cuda_check"),
            device=device,
        ),
        device,
    )
    return {"loss": result.loss, "epsilon": result.epsilon, "seconds": seconds}


def cnn_throughput(device: torch.device, n: int = FULL.cnn_images) -> dict:
    """Measure samples per second of DPSH training of the ``cnn`` on 32x32 RGB."""
    gen = torch.Generator().manual_seed(SEED)
    x = torch.rand((n, 3, 32, 32), generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    torch.manual_seed(SEED)
    model = build_model("cnn", (3, 32, 32), 64)
    config = LocalTrainConfig(epochs=2, learning_rate=1e-3, batch_size=256)
    stats, seconds = timed(
        lambda: train_dpsh(
            model,
            x,
            y,
            config=config,
            device=device,
            generator=torch.Generator().manual_seed(SEED),
        ),
        device,
    )
    return {
        "loss": stats["loss"],
        "seconds": seconds,
        "samples_per_s": 2 * n / seconds,
    }


def comparison(results: dict[str, dict]) -> dict:
    """CUDA against the CPU baseline of the same run; empty without a CUDA half."""
    if "cuda" not in results:
        return {}
    cpu, gpu = results["cpu"], results["cuda"]
    out = {
        "cnn_speedup_cuda_over_cpu": (
            gpu["cnn_throughput"]["samples_per_s"]
            / cpu["cnn_throughput"]["samples_per_s"]
        ),
        "dpsh_map_cpu_minus_cuda": (
            cpu["dpsh_mlp_digits"]["map_all"] - gpu["dpsh_mlp_digits"]["map_all"]
        ),
    }
    if "dp_sgd_csq" in cpu:
        out["dp_epsilon_equal"] = (
            cpu["dp_sgd_csq"]["epsilon"] == gpu["dp_sgd_csq"]["epsilon"]
        )
    return out


def main(argv: list[str] | None = None) -> None:
    """Run every check on CPU and CUDA; write JSON; print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out", default=str(ROOT / "docs/results/benchmarks/cuda.json")
    )
    parser.add_argument("--skip-dp", action="store_true", help="without Opacus")
    parser.add_argument(
        "--tiny", action="store_true", help="one epoch per check (smoke run)"
    )
    parser.add_argument("--cpu-only", action="store_true", help="leave CUDA out")
    args = parser.parse_args(argv)
    sizes = TINY if args.tiny else FULL
    devices = [torch.device("cpu")]
    if torch.cuda.is_available() and not args.cpu_only:
        devices.append(torch.device("cuda"))
    data = digits_split(sizes.samples)
    results: dict[str, dict] = {}
    for device in devices:
        name = device.type
        results[name] = {}
        checks = {
            "dpsh_mlp_digits": lambda d=device: dpsh(d, data, sizes.dpsh_epochs),
            "fedhap_round": lambda d=device: fedhap(d, data, sizes.fedhap_epochs),
            "pfmh_round": lambda d=device: pfmh(d, sizes.pfmh_epochs, sizes.samples),
            "cnn_throughput": lambda d=device: cnn_throughput(d, sizes.cnn_images),
        }
        if not args.skip_dp:
            checks["dp_sgd_csq"] = lambda d=device: dp_sgd(d, data, sizes.dp_epochs)
        for check, fn in checks.items():
            out = fn()
            for key, value in out.items():
                if isinstance(value, float) and not np.isfinite(value):
                    raise AssertionError(f"{name} {check}: {key} is {value}")
            results[name][check] = out
            print(f"{name:>4} {check:>16}: {json.dumps(out)}", flush=True)
    report = {
        "benchmark": "cuda_check",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda_device": (torch.cuda.get_device_name(0) if "cuda" in results else None),
        **({"sizes": "tiny"} if args.tiny else {}),
        "results": results,
        **comparison(results),
    }
    if "cuda" in results:
        print(json.dumps({k: v for k, v in report.items() if k != "results"}))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
