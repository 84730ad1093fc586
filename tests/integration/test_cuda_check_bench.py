"""Smoke test of ``benchmarks/cuda_check.py --tiny --cpu-only``: its CPU half (the
baseline of the CUDA comparison) runs every check for one epoch and writes its JSON.
This machine has no GPU, so the CUDA half is exercised only through
:func:`comparison`, fed the CPU results as both halves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import cuda_check

CHECKS = (
    "dpsh_mlp_digits",
    "fedhap_round",
    "pfmh_round",
    "cnn_throughput",
    "dp_sgd_csq",
)


def test_cuda_check_cpu_half_runs_tiny(tmp_path: Path):
    out = tmp_path / "cuda.json"
    cuda_check.main(["--tiny", "--cpu-only", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["benchmark"] == "cuda_check"
    assert report["sizes"] == "tiny"
    assert report["cuda_device"] is None
    assert set(report["results"]) == {"cpu"}
    cpu = report["results"]["cpu"]
    assert set(cpu) == set(CHECKS)
    for check in CHECKS:
        assert cpu[check]["seconds"] > 0, check
        assert cpu[check]["loss"] == pytest.approx(cpu[check]["loss"]), check  # finite
    assert 0 < cpu["dpsh_mlp_digits"]["map_all"] <= 1
    assert cpu["dp_sgd_csq"]["epsilon"] > 0
    assert cpu["cnn_throughput"]["samples_per_s"] > 0
    # no CUDA half: no comparison fields, rather than made-up ones
    assert "cnn_speedup_cuda_over_cpu" not in report
    # the comparison the CUDA run writes, on the CPU results as both halves
    same = cuda_check.comparison({"cpu": cpu, "cuda": cpu})
    assert same == {
        "cnn_speedup_cuda_over_cpu": 1.0,
        "dpsh_map_cpu_minus_cuda": 0.0,
        "dp_epsilon_equal": True,
    }
