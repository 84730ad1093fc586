"""Smoke test of ``benchmarks/fedhap_cost.py`` at its smallest (2 clients, 3 rounds,
16 bits) on this pytest process's Ray head: FedAvg baseline and FedHAP in the same
run, the fields docs/methods/fedhap.md quotes, and the ratios computed from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import fedhap_cost


def test_fedhap_cost_benchmark_runs_tiny(tmp_path: Path, ray_head: str):
    out = tmp_path / "fedhap_cost.json"
    fedhap_cost.main(
        [
            "--clients",
            "2",
            "--rounds",
            "3",
            "--bits",
            "16",
            "--out",
            str(out),
            "--ray-address",
            ray_head,
        ]
    )
    report = json.loads(out.read_text())
    assert report["benchmark"] == "fedhap_cost"
    base, fedhap = report["baseline"], report["fedhap"]
    assert (base["strategy"], fedhap["strategy"]) == ("fedavg", "fedhap")
    for side in (base, fedhap):
        assert side["rounds_measured"] == 1  # round 2 of 3
        assert side["train_seconds_per_round"] > 0
        assert side["down_bytes_per_client"] > 0 < side["up_bytes_per_client"]
    assert report["ratio_train_seconds"] == pytest.approx(
        fedhap["train_seconds_per_round"] / base["train_seconds_per_round"]
    )
    # FedHAP sends the discriminator both ways on top of FedAvg's model
    disc = report["discriminator_parameter_bytes"]
    assert disc > 0
    assert report["extra_down_bytes_per_client"] >= disc
    assert report["extra_up_bytes_per_client"] >= disc
