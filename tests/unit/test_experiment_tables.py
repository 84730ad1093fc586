"""The experiment drivers' one table writer (experiments/lib/tables.py)."""

import statistics

import pytest

from experiments.lib.tables import (
    mean_sd,
    mean_sd_cell,
    n_note,
    paired_interval,
    pm,
    table_head,
    table_row,
)


def test_row_and_head_write_a_pipe_table() -> None:
    assert table_head("method", "16 bits") == ["| method | 16 bits |", "|---|---|"]
    assert table_row("FedAvg", 3, "1.00 ± 0.10") == "| FedAvg | 3 | 1.00 ± 0.10 |"


def test_mean_sd_is_the_sample_std_and_zero_for_one_value() -> None:
    assert mean_sd([0.5]) == (0.5, 0.0)
    vals = [0.1, 0.4, 0.7]
    assert mean_sd(vals) == (statistics.fmean(vals), statistics.stdev(vals))
    with pytest.raises(statistics.StatisticsError):
        mean_sd([])


def test_cells_scale_format_and_count_missing_runs() -> None:
    assert pm(0.12345, 0.01, scale=100) == "12.35 ± 1.00"
    assert pm(0.5, 0.25, fmt=".3f") == "0.500 ± 0.250"
    assert mean_sd_cell([]) == "-"
    assert mean_sd_cell([0.1, 0.3], scale=100) == "20.00 ± 14.14"
    assert mean_sd_cell([0.1, 0.3], scale=100, expected=3) == "20.00 ± 14.14 (n=2)"
    assert mean_sd_cell([0.1, 0.3], scale=100, expected=2) == "20.00 ± 14.14"
    assert n_note(1, None) == ""


def test_paired_interval_signs_every_number() -> None:
    assert paired_interval(1.2, -0.4, 2.0) == "+1.20 points, 95% CI [-0.40, +2.00]"
