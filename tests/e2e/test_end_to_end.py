"""Real runs through Flower's simulation engine (Ray): 3 clients, 2 rounds.

They join one Ray head per pytest process (``simulation``, ``tests/e2e/conftest.py``);
the FedAvg run also runs on its own local instance, as a user's does.

The privacy mechanisms' runs are in ``test_privacy_end_to_end.py``.
"""

import pytest

from clients.data import load_local_data
from experiments.simulate import load_run, simulate
from privacy.ledger import PrivacyLedger
from settings.run_settings import RunSettings
from tests.fixtures import write_feature_npz

pytestmark = pytest.mark.e2e

BASE = {
    "rounds": 2,
    "eval-every": 1,
    "local-epochs": 5,
    "learning-rate": 0.0005,
    "code-length": 16,
    "map-top-k": 50,
    "precision-k": "10,50",
}


def test_fedavg_learns_and_is_reproducible(tmp_path, ray_head):
    # the same seed twice: once on a fresh local Ray instance (what a user's
    # `python -m experiments.simulate` starts; one CPU, one actor, to keep make
    # test short), once on the Ray head the other simulation tests join
    # (tests/e2e/conftest.py): the same metrics
    runs = []
    for name, address in (("a", None), ("b", ray_head)):
        out = tmp_path / name
        run_dir = simulate(
            {**BASE, "results-dir": str(out)},
            num_clients=3,
            cpus=1,
            ray_address=address,
        )
        assert not run_dir.name.endswith(".incomplete")
        runs.append(load_run(run_dir))
    (config, rows, summary), (_, rows_b, summary_b) = runs
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert summary["initial_map_all"] is not None
    # training must beat the untrained model on retrieval
    assert summary["final"]["map_all"] > summary["initial_map_all"] + 0.1
    assert summary["final"]["map_all"] > 0.4
    # same seed, same metrics (CPU)
    metrics = [(r["round"], r.get("map_all"), r["train_loss"]) for r in rows]
    metrics_b = [(r["round"], r.get("map_all"), r["train_loss"]) for r in rows_b]
    assert metrics == metrics_b
    assert summary["final"] == summary_b["final"]
    assert len(config["nodes"]) == 3
    assert "query set" in config["protocol"]
    for plot in ("map_per_round.png", "pr_curve.png", "precision_at_k.png"):
        assert (run_dir_png := (tmp_path / "a").glob(f"*/{plot}")) and next(run_dir_png)


def test_fedprox_on_multi_label_features_end_to_end(tmp_path, simulation):
    # FedProx + MLP over a multi-label .npz feature file (the MIRFlickr/NUS-WIDE path)
    path = write_feature_npz(
        tmp_path / "feat.npz", n=300, num_classes=5, multi_label=True
    )
    run_dir = simulation(
        {
            **BASE,
            "strategy": "fedprox",
            "fedprox.mu": 0.1,
            "dataset": "npz",
            "data-path": str(path),
            "partitioning": "dirichlet",
            "learning-rate": 0.001,
            "results-dir": str(tmp_path / "results"),
        },
        num_clients=3,
    )
    config, rows, summary = load_run(run_dir)
    assert config["config"]["strategy"] == "fedprox"
    assert config["model"] == "mlp"
    assert "shares at least one label" in config["protocol"]
    assert summary["final"]["map_all"] > summary["initial_map_all"]


def test_fedhap_exchanges_prototypes_and_learns(tmp_path, simulation):
    run_dir = simulation(
        {
            **BASE,
            "strategy": "fedhap",
            "partitioning": "pathological",
            "classes-per-client": 4,
            "local-epochs": 3,
            "results-dir": str(tmp_path / "results"),
        },
        num_clients=3,
    )
    config, rows, summary = load_run(run_dir)
    assert config["config"]["fedhap.variant"] == "full"
    # every trained round built global prototypes for exactly the classes the
    # clients hold (pathological: some of the 10 digits are held by nobody)
    settings = RunSettings.from_config(config["config"])
    held = set()
    for pid in range(3):
        local = load_local_data(settings, partition_id=pid, num_partitions=3)
        held |= set(local.labels.tolist())
    assert len(held) < 10
    assert [r.get("prototype_classes") for r in rows] == [None, len(held), len(held)]
    # uploads carry prototypes (10 classes x 16 bits at most) on top of the arrays
    trained = [r for r in rows if r["round"] > 0]
    assert all(r["up_bytes_per_client"] > 0 for r in trained)
    # round 2's broadcast carries the prototypes, round 1's does not
    assert trained[1]["down_bytes_per_client"] > trained[0]["down_bytes_per_client"]
    assert summary["final"]["map_all"] > summary["initial_map_all"] + 0.1


def test_pfmh_personalized_exchanges_prototypes_and_learns(tmp_path, simulation):
    # PFMH on the two-view digits: only prototypes travel, models stay on clients
    run_dir = simulation(
        {
            **BASE,
            "strategy": "pfmh",
            "dataset": "multiview-digits",
            "pfmh.k": 64,
            "learning-rate": 0.002,
            "results-dir": str(tmp_path / "results"),
        },
        num_clients=3,
    )
    config, rows, summary = load_run(run_dir)
    assert config["model"] == "pfmh-multimodal"
    assert "per-client protocol" in config["protocol"]
    trained = [r for r in rows if r["round"] > 0]
    # prototypes flowed: uploads every round, per-client sets sent from round 2 on
    assert [r.get("prototype_classes") for r in trained] == [10, 10]
    assert all(r["up_bytes_per_client"] > 64 * 4 for r in trained)
    assert trained[1]["down_bytes_per_client"] > trained[0]["down_bytes_per_client"]
    # no model arrays: round 1 sends only the config
    assert trained[0]["down_bytes_per_client"] < 64
    for r in rows:  # every round is evaluated (eval-every = 1)
        assert r["local_clients"] == 3
        assert 0 <= r["local_map_all"] <= 1 and r["local_map_at_k"] is not None
        assert r["server_queries_client_db_map_all"] is not None
        # the global protocol's P@K per cut-off, averaged over clients (Fig. 4)
        pk = [r[f"server_queries_client_db_precision_at_{k}"] for k in (10, 50)]
        assert all(0 <= v <= 1 for v in pk)
        assert r.get("map_all") is None  # no union ranking of personal models
    final, initial = summary["final_per_client"], summary["initial_per_client"]
    assert summary["final"] is None
    assert final["local_map_all"] > initial["local_map_all"] + 0.1
    assert (
        final["server_queries_client_db_map_all"]
        > initial["server_queries_client_db_map_all"] + 0.1
    )


def test_dpcode_federated_analytics_end_to_end(tmp_path, simulation):
    # DPcode: every client publishes its private top-k patterns once; the server
    # merges them, charges each client once (per frame) and evaluates the merged
    # list against the exact pooled top-k
    import json

    run_dir = simulation(
        {
            "strategy": "dpcode",
            "dpcode.k": 10,
            "dpcode.epsilon": 2.0,
            "results-dir": str(tmp_path / "results"),
        },
        num_clients=3,
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["clients"], summary["rejected"]) == (3, 0)
    assert 0 < summary["published"] <= 10
    assert 0.0 <= summary["evaluation"]["f_score"] <= 1.0
    assert summary["evaluation"]["pooled_frames"] > 0
    ledger = PrivacyLedger.read(run_dir / "privacy_ledger.json")
    assert sorted(c.client for c in ledger.charges) == [0, 1, 2]
    for c in ledger.charges:
        assert (c.mechanism, c.unit, c.round) == ("dpcode/patterns", "per frame", 1)
        assert 0 < c.epsilon <= 2.0 and not c.note  # secure noise: no warning
    releases = json.loads((run_dir / "releases.json").read_text())
    assert set(releases["clients"]) == {"0", "1", "2"}
    assert len(releases["merged"]["patterns"]) == summary["published"]
