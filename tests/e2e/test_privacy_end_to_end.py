"""Privacy mechanisms through Flower's simulation engine (Ray): 3 clients, 2 rounds.

Random Flipping with its ledger and a kill-and-resume, DP-SGD with FedAvg and FedHAP,
FedAvg under DPHE, all on the Ray head of ``tests/e2e/conftest.py``. Split from
``test_end_to_end.py`` (same settings, ``BASE``) so that ``make test``'s two workers
(``--dist loadfile``) can share the end-to-end runs.
"""

from collections import Counter

import pytest

from experiments.simulate import load_run
from privacy.ledger import PrivacyLedger
from tests.e2e.resume_kit import kill_and_resume, rows_without_timing
from tests.e2e.test_end_to_end import BASE

pytestmark = pytest.mark.e2e

FLIPPING = {
    **BASE,
    "strategy": "fedhap",
    "local-epochs": 3,
    "privacy.code-flip-epsilon": 3.0,
    "privacy.prototype-flip-epsilon": 4.0,
    # simulation-only reproducible noise: allowed here, labelled everywhere
    "privacy.noise": "seeded",
}


def test_random_flipping_end_to_end_with_ledger_and_resume(
    tmp_path, simulation, ray_head
):
    # PHashing (flipped database codes) + FedHAP's private prototype mode
    run_dir = simulation(
        {**FLIPPING, "results-dir": str(tmp_path / "results")}, num_clients=3
    )
    _, rows, summary = load_run(run_dir)
    ledger = PrivacyLedger.read(run_dir / "privacy_ledger.json")
    bits = BASE["code-length"]
    # 3 evaluations (rounds 0, 1, 2) of flipped codes at 3 per bit (per code = bits
    # x per bit), and 2 rounds of flipped prototypes at 4 per bit, charged per
    # record (single labels: one record moves one prototype); basic composition
    codes, prototypes = 3 * bits * 3.0, 2 * bits * 4.0
    assert ledger.clients() == (0, 1, 2)
    for client in range(3):
        eps, delta = ledger.total(client, "per code")
        assert eps == pytest.approx(codes) and delta == 0.0
        assert ledger.total(client, "per record")[0] == pytest.approx(prototypes)
    assert summary["privacy"]["per code"]["max_client_epsilon"] == pytest.approx(
        codes
    )
    # every charge says the guarantee does not hold against the server
    assert all("SEEDED" in c.note for c in ledger.charges)
    assert summary["privacy_noise"]["holds_against_server"] is False
    assert [r.get("prototype_classes") for r in rows] == [None, 10, 10]
    assert summary["final"]["map_all"] > summary["initial_map_all"] + 0.1

    # the same run, SIGKILLed after its round-1 checkpoint and resumed: the same
    # rounds and final metrics (FedHAP's global prototypes and the flips' seeded
    # noise come back from the checkpoint). The ledger holds every charge of the
    # uninterrupted run; a release of round 2 that reached the server before the
    # kill stays charged, and its redo is charged again
    resumed = kill_and_resume(
        FLIPPING, clients=3, results=tmp_path / "killed", ray_address=ray_head
    )
    assert rows_without_timing(resumed) == rows_without_timing(run_dir)
    again = load_run(resumed)[2]
    for key in ("final", "initial_map_all", "best_round", "best_map_all"):
        assert again[key] == summary[key], key
    charges = Counter(PrivacyLedger.read(resumed / "privacy_ledger.json").charges)
    assert not Counter(ledger.charges) - charges  # nothing lost
    extra = list((charges - Counter(ledger.charges)).elements())
    assert all(c.round == 2 for c in extra), extra  # only the crashed round repeats
    if not extra:
        assert again["privacy"] == summary["privacy"]


@pytest.mark.parametrize("strategy", ["fedavg", "fedhap"])
def test_dp_sgd_end_to_end_with_ledger(tmp_path, strategy, simulation):
    dp = {
        "dp-sgd.enabled": True,
        "dp-sgd.noise-multiplier": 0.7,
        "model": "mlp",
        "learning-rate": 0.005,
        "local-epochs": 3,
    }
    if strategy == "fedavg":
        dp |= {"loss": "csq"}
    else:
        dp |= {
            "strategy": "fedhap",
            "fedhap.variant": "fedhap-3",
            "fedhap.initial-prototypes": "centers",
            "privacy.prototype-flip-epsilon": 3.0,
        }
    run_dir = simulation(
        {**BASE, **dp, "results-dir": str(tmp_path / "results")}, num_clients=3
    )
    _, rows, summary = load_run(run_dir)
    ledger = PrivacyLedger.read(run_dir / "privacy_ledger.json")
    for client in range(3):
        dp_charges = [
            c
            for c in ledger.charges
            if c.client == client and c.mechanism == "dp-sgd/model"
        ]
        assert [c.round for c in dp_charges] == [1, 2]
        assert all(c.unit == "per record" and 0 < c.epsilon < 100 for c in dp_charges)
        assert all(c.delta == 1e-5 for c in dp_charges)
        eps, delta = ledger.total(client, "per record")
        # FedHAP's flipped prototypes are charged per record too (2 rounds x 16
        # bits x 3 per bit, single labels), composed with DP-SGD
        flips = 2 * 16 * 3.0 if strategy == "fedhap" else 0.0
        assert eps == pytest.approx(sum(c.epsilon for c in dp_charges) + flips)
        assert delta == pytest.approx(2e-5)
        assert not any(c.note for c in ledger.charges)  # secure noise: no warning
    assert summary["privacy"]["per record"]["max_client_epsilon"] > 0
    assert summary["final"]["map_all"] > summary["initial_map_all"] + 0.1


def _dphe_keys(tmp_path, clients=3):
    from crypto import generate_keys

    keys = tmp_path / "keys"
    generate_keys(keys, num_clients=clients, key_bits=512, allow_test_keys=True)
    return keys


def test_fedavg_with_dphe_end_to_end(tmp_path, simulation):
    # sparse updates summed under DPHE (small test keys), sharded: the server gets
    # only the weighted average; equality with plaintext FedAvg within the
    # fixed-point bound is tested in test_dphe_strategy.py, and at 2048 bits over 3
    # seeds by experiments/tables/dphe_map.py
    run_dir = simulation(
        {
            **BASE,
            "model": "mlp",  # 24,864 values to encrypt instead of the cnn's 289,632
            "min-train-nodes": 3,
            "updates.sparsity": 0.9,
            # padding is on by default with the automatic capacity M (a divisor of
            # the block count, >= 1/4 of it): every client sends padded shards
            "secure-aggregation": "dphe",
            "dphe.key-dir": str(_dphe_keys(tmp_path)),
            # FedAvg's weights (the default is uniform), each checked by the
            # keyholder against max-weight
            "dphe.weighting": "num-examples",
            "dphe.max-weight": 4096,
            "results-dir": str(tmp_path / "dphe"),
        },
        num_clients=3,
    )
    config, rows, summary = load_run(run_dir)
    assert config["config"]["secure-aggregation"] == "dphe"
    trained = [r for r in rows if r["round"] > 0]
    assert [r["dphe"]["contributors"] for r in trained] == [3, 3]
    # num-examples-weighted: the decrypted total weight is the clients' data size
    assert trained[0]["dphe"]["total-weight"] == config["num_database"]
    assert summary["final"]["map_all"] > summary["initial_map_all"] + 0.1
    assert all(r["up_bytes_per_client"] > 0 for r in trained)
