"""Fixed-seed small runs of every method; dump the metrics (timing fields dropped)."""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from experiments.simulate import simulate  # noqa: E402

BASE = {
    "rounds": 2,
    "eval-every": 1,
    "local-epochs": 2,
    "code-length": 16,
    "map-top-k": 50,
    "precision-k": "10,50",
    "seed": 7,
}
RUNS = {
    "fedavg": {**BASE},
    "fedprox-dpsgd-seeded": {
        **BASE,
        "strategy": "fedprox",
        "dp-sgd.enabled": True,
        "loss": "csq",
        "privacy.noise": "seeded",
        "privacy.code-flip-epsilon": 4.0,
    },
    "fedhap": {
        **BASE,
        "strategy": "fedhap",
        "partitioning": "pathological",
        "classes-per-client": 4,
    },
    "pfmh": {
        **BASE,
        "strategy": "pfmh",
        "dataset": "multiview-digits",
        "pfmh.k": 64,
        "learning-rate": 0.002,
    },
    "dpcode": {
        "strategy": "dpcode",
        "dpcode.k": 10,
        "dpcode.epsilon": 2.0,
        "privacy.noise": "seeded",
        "seed": 7,
    },
    "fedavg-dphe": {
        **BASE,
        "model": "mlp",
        "min-train-nodes": 3,
        "updates.sparsity": 0.9,
        "secure-aggregation": "dphe",
        "dphe.key-dir": "/tmp/eq36/keys",
        "dphe.weighting": "num-examples",
        "dphe.max-weight": 4096,
    },
    # dense updates: no block layout, whose phi-space blocks depend on the
    # keyholder's random session, so the run is repeatable in the seeded mode
    "fedavg-dphe-dense-seeded": {
        **BASE,
        "model": "mlp",
        "min-train-nodes": 3,
        "secure-aggregation": "dphe",
        "dphe.key-dir": "/tmp/eq36/keys",
        "privacy.noise": "seeded",
        "dphe.weighting": "num-examples",
        "dphe.max-weight": 4096,
    },
    # secure noise mixes fresh node entropy into training (clients/privacy_noise.py):
    # not repeatable by design; the seeded mode is
    "fedavg-dphe-seeded": {
        **BASE,
        "model": "mlp",
        "min-train-nodes": 3,
        "updates.sparsity": 0.9,
        "secure-aggregation": "dphe",
        "dphe.key-dir": "/tmp/eq36/keys",
        "privacy.noise": "seeded",
        "dphe.weighting": "num-examples",
        "dphe.max-weight": 4096,
    },
}
TIMING = ("_s", "_seconds", "seconds", "elapsed")


def clean(x):
    """Drop wall-clock fields and temporary paths."""
    if isinstance(x, dict):
        return {
            k: clean(v)
            for k, v in x.items()
            if not any(k.endswith(t) for t in TIMING)
            and k
            not in (
                "dir",
                "root",
                "results",
                "results_dir",
                "time",
                "timing",
                "seconds_per_round",
            )
        }
    if isinstance(x, list):
        return [clean(v) for v in x]
    return x


out = {}
names = sys.argv[2:] or list(RUNS)
for name in names:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = simulate({**RUNS[name], "results-dir": tmp}, num_clients=3, cpus=1)
        files = {}
        for f in (
            "rounds.jsonl",
            "summary.json",
            "releases.json",
            "privacy_ledger.json",
        ):
            p = run_dir / f
            if p.exists():
                txt = p.read_text()
                files[f] = clean(
                    [json.loads(line) for line in txt.splitlines()]
                    if f.endswith("jsonl")
                    else json.loads(txt)
                )
        cfg = json.loads((run_dir / "config.json").read_text())
        files["config"] = clean(
            {
                k: cfg.get(k)
                for k in ("config", "model", "protocol", "num_query", "num_database")
            }
        )
        out[name] = files
        dest = Path(sys.argv[1])
        old = json.loads(dest.read_text()) if dest.exists() else {}
        old[name] = files
        dest.write_text(json.dumps(old, indent=1, sort_keys=True))
        print(name, "done", flush=True)
