"""Smoke test of ``benchmarks/dphe.py --tiny``: it runs and writes its goal fields."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import run_benchmark

ROOT = Path(__file__).resolve().parents[2]


def test_dphe_benchmark_tiny_writes_the_default_summary(tmp_path):
    out = tmp_path / "dphe.json"
    data = run_benchmark("dphe.py", out, "--tiny")
    default = data["summary"]["default"]
    row = data["cnn"]["dphe"][default["row"]]
    # the app's default: shared blocks, full obfuscators, the round's values pooled
    assert row["structure"] == "shared" and row["obfuscators"] == "full"
    # one set for every client: the keyholder decrypts k blocks, not the union
    assert row["decrypted_blocks"] == row["capacity"]
    assert row["disk_pool"] and row["online_obfuscator_draws"] == 0
    assert row["pool_values_left_on_disk"] == 0  # each value used once, deleted
    assert row["max_abs_error"] <= row["error_bound"]
    assert default["precompute_s"] > 0 and default["online_s"] > 0
    width = 2 * 512 // 8
    assert default["pool_bytes_per_node_per_round"] == row["capacity"] * width
    assert data["summary"]["cnn"]["packed_vs_naive"] > 1
    if importlib.util.find_spec("tenseal") is None:
        assert default["online_vs_ckks"] is None
    else:
        assert default["online_vs_ckks"] == default["paired_ratios"][0] > 0


def test_round_part_prefills_each_node_pool_with_the_app_filler(tmp_path):
    from gmpy2 import mpz, powmod

    from benchmarks import dphe
    from crypto.obfuscator_store import ObfuscatorStore

    n = mpz(2**61 - 1) * mpz(2**31 - 1)
    folders = [tmp_path / "partition-0", tmp_path / "partition-1"]
    filled = dphe.fill_pools(folders, n, 5)
    assert filled["values_per_node"] == 5 and filled["processes"] == 2
    assert filled["wall_s"] > 0 and filled["cpu_s"] > 0  # the fillers' own CPU
    phi = mpz(2**61 - 2) * mpz(2**31 - 2)
    for folder in folders:
        values = ObfuscatorStore(folder, n).take(10)
        assert len(values) == 5 and all(powmod(v, phi, n * n) == 1 for v in values)
    wall, cpu = dphe.round_precompute(n, 3)
    assert wall > 0 and cpu > 0


def test_table2_part_measures_the_papers_scheme_per_sparsity_and_seed(tmp_path):
    # packing 1 (one value a ciphertext): the sparse rows are real rounds checked
    # against the plaintext average; the dense row, over the budget, is priced from
    # the same seed's measured per-ciphertext times and says so
    out = tmp_path / "dphe.json"
    t2 = run_benchmark(
        "dphe.py", out, "--tiny", "--part", "table2", "--table2-seeds", "0,1",
        "--table2-sparsities", "0,0.99", "--table2-budget-s", "0.001",
    )["table2"]  # fmt: skip
    assert [(r["seed"], r["sparsity"], r["measured"]) for r in t2["rows"]] == [
        (0, 0.99, True), (0, 0.0, False), (1, 0.99, True), (1, 0.0, False)
    ]  # fmt: skip
    for r in t2["rows"]:
        assert r["packing"] == 1 and r["clients"] == 3
        assert r["nonzeros"] <= r["ciphertexts"] and r["encrypt_s"] > 0
    sparse, dense = t2["rows"][0], t2["rows"][1]
    assert sparse["max_abs_error"] <= sparse["error_bound"]
    per_ct = sparse["encrypt_s"] / sparse["ciphertexts"]
    assert dense["encrypt_s"] == pytest.approx(per_ct * dense["ciphertexts"])
    assert t2["summary"]["0.99"]["seeds"] == 2 and t2["summary"]["0.99"]["measured"]
    assert not t2["summary"]["0.0"]["measured"]
    assert t2["summary"]["0.99"]["dense_over_this"] > 10
    # --table2-resume reruns one pair and keeps the others; the summary is over all
    again = run_benchmark(
        "dphe.py", out, "--tiny", "--part", "table2", "--table2-seeds", "1",
        "--table2-sparsities", "0.99", "--table2-resume",
    )["table2"]  # fmt: skip
    assert again["settings"]["rows_kept_from_before"] == 3
    assert [(r["seed"], r["sparsity"]) for r in again["rows"]] == [
        (0, 0.99), (0, 0.0), (1, 0.99), (1, 0.0)
    ]  # fmt: skip
    assert again["rows"][:2] == t2["rows"][:2] and again["rows"][3] == t2["rows"][3]
    assert again["rows"][2]["encrypt_s"] != t2["rows"][2]["encrypt_s"]  # rerun
    assert again["summary"]["0.99"]["seeds"] == again["summary"]["0.0"]["seeds"] == 2
    # another table's rows are never mixed in: one line, before any key is made
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dphe.py"), "--tiny", "--part",
         "table2", "--clients", "4", "--table2-resume", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--table2-resume" in done.stderr and "clients=4" in done.stderr
    assert "accepted: the same" in done.stderr.strip().splitlines()[-1]


def test_table2_arguments_refuse_bad_seeds_and_sparsities_by_name():
    import argparse

    from benchmarks import dphe

    assert dphe._seed_list("0,1,2") == [0, 1, 2]
    assert dphe._sparsity_list("0,0.9,0.99") == [0.0, 0.9, 0.99]
    for bad in ("", "a,b", "-1", "0,,1"):
        with pytest.raises(argparse.ArgumentTypeError, match="integers >= 0"):
            dphe._seed_list(bad)
    for bad in ("", "x", "1", "0,1.5", "-0.1"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"in \[0, 1\)"):
            dphe._sparsity_list(bad)
