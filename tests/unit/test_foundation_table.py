"""The foundation table: the untrained floor beside FedAvg, FedProx, centralized."""

from __future__ import annotations

from experiments.tables import foundation as F


def test_floor_row_comes_from_the_centralized_runs_initial_model_and_leads_the_table():
    rows = []
    for seed, (initial, final) in enumerate(((0.20, 0.95), (0.30, 0.97))):
        cen = {"initial": {"map_all": initial}, "final": {"map_all": final}}
        rows.append(
            {
                "method": "centralized",
                "partitioning": "-",
                "bits": 16,
                "seed": seed,
                "map_all": final,
                "map_at_k": final,
                "top_k": 100,
                "seconds": 1.0,
            }
        )
        rows.append(F.floor_row(16, seed, cen))
    agg = F.aggregate(rows)
    floor = next(a for a in agg if a["method"] == F.FLOOR)
    assert round(floor["map_all_mean"], 6) == 0.25 and floor["map_at_k_mean"] is None
    table = F.markdown_table(agg, [16]).splitlines()
    assert table[2].startswith(f"| {F.FLOOR} | - | 25.00 ± 7.07")
    assert table[3].startswith("| centralized | - | 96.00 ± 1.41")
