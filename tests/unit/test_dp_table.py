"""The DP-SGD table's untrained floor rows."""

from __future__ import annotations

from experiments.tables.dp_table import floors_from_rows, table


def _row(method: str, noise: float | None, seed: int, floor: float | None) -> dict:
    return {
        "method": method,
        "noise": noise,
        "seed": seed,
        "map_all": 0.9 if noise is None else 0.5,
        "eps_per_record": None if noise is None else 10.0,
        "delta_per_record": None if noise is None else 1e-4,
        "eps_per_code": None,
        "floor_map_all": floor,
    }


def test_floor_row_sits_under_its_method_from_the_non_private_runs() -> None:
    rows = [
        _row("A", None, 0, 0.30),
        _row("A", None, 1, 0.32),
        _row("A", 1.0, 0, 0.99),  # a DP run's floor is not read
        _row("B", None, 0, None),  # rows of an older sweep: no floor recorded
        _row("B", 1.0, 0, None),
    ]
    floors = floors_from_rows(rows)
    assert floors == [
        {"method": "A", "seed": 0, "map_all": 0.30},
        {"method": "A", "seed": 1, "map_all": 0.32},
    ]
    lines = table(rows, floors).splitlines()
    methods = [line.split("|")[1].strip() for line in lines[2:]]
    sigmas = [line.split("|")[2].strip() for line in lines[2:]]
    assert methods == ["A", "A", "A", "B", "B"]
    assert sigmas == ["no DP", "1.0", "untrained (floor)", "no DP", "1.0"]
    assert "31.00 ± 1.41 (n=2)" in lines[4]
