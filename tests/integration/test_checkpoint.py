"""Checkpoints: strategy state round trip, atomic files, refusals."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, MetricRecord

from privacy.ledger import LedgerJournal, MechanismUse, PrivacyLedger
from server import checkpoint as ck
from server.results import RunResults
from settings.run_settings import ConfigError, RunSettings
from strategies.state import pack, unpack
from tests.integration.test_pfmh_strategy import good_replies, round1, strategy

pytestmark = pytest.mark.usefixtures("task_identity")


def test_pack_round_trips_without_pickle():
    value = {
        "history": {3: MetricRecord({"train-loss": 0.5})},
        "uses": [(2, [MechanismUse("dp-sgd/model", 1.0, 1e-5, "per sample")])],
        "x": np.arange(6, dtype=np.float32).reshape(2, 3),
        "n": np.int64(4),
    }
    arrays: dict[str, np.ndarray] = {}
    text = json.dumps(pack(value, arrays))  # plain JSON
    back = unpack(json.loads(text), arrays)
    assert back["history"][3]["train-loss"] == 0.5
    assert back["uses"][0][1][0] == value["uses"][0][1][0]
    assert np.array_equal(back["x"], value["x"]) and back["n"] == 4
    with pytest.raises(TypeError, match="cannot checkpoint a object"):
        pack({"bad": object()}, {})


def test_pfmh_state_moves_to_new_node_ids_by_partition():
    s = strategy()
    round1(s)
    s.aggregate_train(1, good_replies())
    arrays: dict[str, np.ndarray] = {}
    state = unpack(json.loads(json.dumps(pack(s.state_dict(), arrays))), arrays)
    t = strategy()
    # a resumed run: the same partitions behind new node ids
    t.set_node_partitions({300: 0, 200: 1, 100: 2})
    t.load_state_dict(state)
    assert np.array_equal(t.centralized.vectors, s.centralized.vectors)
    for old, new in ((30, 300), (20, 200), (10, 100)):
        assert np.array_equal(t.personal[new].vectors, s.personal[old].vectors)
        assert np.array_equal(t.uploads[new].classes, s.uploads[old].classes)
    assert t.prototype_history == s.prototype_history
    assert t.train_history[1]["train-loss"] == s.train_history[1]["train-loss"]
    u = strategy()
    u.set_node_partitions({300: 0, 200: 1})  # partition 2 is gone
    with pytest.raises(ValueError, match=r"partitions \[2\]"):
        u.load_state_dict(state)


KEY = bytes(range(32))


def _write(run_dir, settings, **over):
    journal, charges = LedgerJournal.open(run_dir / ck.JOURNAL, KEY, run_dir.name)
    ledger = PrivacyLedger(charges, journal=journal)
    ledger.charge(0, 1, "random-flipping/codes", epsilon=1.0, unit="per bit")
    kwargs = {
        "server_round": 2,
        "settings": settings,
        "arrays": ArrayRecord({"w": Array(np.ones((2, 2), np.float32))}),
        "strategy_state": {"own": {}, "train_history": {}, "comm_history": {},
                           "privacy_history": {}, "prototype_history": {}},
        "rows": [{"round": 0, "precision_at_k": {10: 0.5}}],
        "journal": ledger.journal,
        "key": KEY,
        **over,
    }
    return ck.write_checkpoint(run_dir, **kwargs)


def test_checkpoint_round_trip_rng_and_only_the_newest_data_file(tmp_path):
    settings = RunSettings()
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    _write(tmp_path, settings, server_round=1)
    _write(tmp_path, settings)
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-r2.npz", "checkpoint.json", "privacy_charges.jsonl",
    ]
    back = ck.read_checkpoint(tmp_path, settings, key=KEY)
    assert back.round == 2
    assert np.array_equal(back.arrays["w"].numpy(), np.ones((2, 2), np.float32))
    assert back.rows[0]["precision_at_k"] == {10: 0.5}  # int keys kept
    assert len(back.ledger) == 2  # both charges of the journal
    assert back.after == 0  # the second checkpoint covers them both
    back.restore_rng()
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws


def test_another_config_code_or_damaged_file_is_refused(tmp_path, monkeypatch):
    settings = RunSettings()
    _write(tmp_path, settings)
    other = RunSettings.from_config({"rounds": 7, "fedhap.mu": 0.5})
    with pytest.raises(ConfigError, match=r"another config; differing keys: "
                       r"fedhap.mu, rounds"):
        ck.read_checkpoint(tmp_path, other, key=KEY)
    # the resume key itself may differ
    ck.read_checkpoint(
        tmp_path, RunSettings.from_config({"resume": str(tmp_path)}), key=KEY
    )
    monkeypatch.setattr(ck, "code_version", lambda: "0" * 64)
    with pytest.raises(ConfigError, match="another version of the app's code"):
        ck.read_checkpoint(tmp_path, settings, key=KEY)
    monkeypatch.undo()
    data = tmp_path / "checkpoint-r2.npz"
    data.write_bytes(data.read_bytes()[:-8] + b"tampered")
    with pytest.raises(ConfigError, match="does not match the SHA-256"):
        ck.read_checkpoint(tmp_path, settings, key=KEY)
    with pytest.raises(ConfigError, match="no checkpoint.json"):
        ck.read_checkpoint(tmp_path / "nope", settings, key=KEY)


def test_resume_dir_refusals_and_suffix(tmp_path):
    run = RunResults(tmp_path, "r1")
    assert ck.resume_dir(RunSettings.from_config({"resume": str(run.final_dir)})) == (
        run.dir
    )
    with pytest.raises(ConfigError, match="no such run directory"):
        ck.resume_dir(RunSettings.from_config({"resume": str(tmp_path / "x")}))
    personal = {"resume": str(run.dir), "strategy": "pfmh",
                "dataset": "multiview-digits", "pfmh.mode": "personalized"}
    # refused as the settings are read (python -m settings check, both apps)
    with pytest.raises(ConfigError, match="resume: personalized PFMH keeps each"):
        RunSettings.from_config(personal)
    with pytest.raises(ConfigError, match="resume: DPcode is a one-shot release"):
        RunSettings.from_config({"resume": str(run.dir), "strategy": "dpcode"})
    run.write_json("summary.json", {})
    run.finish()
    with pytest.raises(ConfigError, match="that run finished"):
        ck.resume_dir(RunSettings.from_config({"resume": str(run.final_dir)}))


def test_reopen_keeps_the_old_error_and_rewrites_rounds(tmp_path):
    run = RunResults(tmp_path, "r1")
    run.append_round({"round": 0})
    run.append_round({"round": 1})
    run.append_round({"round": 2})
    run.fail(RuntimeError("killed"))
    again = RunResults.reopen(run.dir)
    again.rewrite_rounds([{"round": 0}, {"round": 1}])
    lines = (run.dir / "rounds.jsonl").read_text().splitlines()
    assert [json.loads(x)["round"] for x in lines] == [0, 1]
    assert (run.dir / "error-before-resume-1.txt").exists()
    assert not (run.dir / "error.txt").exists()
