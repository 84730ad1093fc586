"""Smoke test of ``benchmarks/dphe_binding.py``: a tiny run writes its JSON."""

import json

from benchmarks import dphe_binding


def test_binding_benchmark_writes_its_costs(tmp_path):
    out = tmp_path / "binding.json"
    code = dphe_binding.main(
        [
            "--key-bits",
            "512",
            "--dim",
            "40",
            "--clients",
            "4",
            "--reps",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "dphe-binding"
    for part, keys in (
        (
            "client",
            ("digest_s", "encrypt_bound_s", "encrypt_unbound_s", "binding_ratio"),
        ),
        (
            "keyholder",
            (
                "honest_decrypt_s",
                "refused_decrypt_s",
                "identify_s",
                "rest_decrypt_s",
                "check_ratio",
            ),
        ),
        ("aggregator", ("mask_s",)),
    ):
        for key in keys:
            assert data[part][key] > 0, (part, key)
