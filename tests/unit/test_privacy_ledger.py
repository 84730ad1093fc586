"""Tests of privacy.ledger: charges, basic composition, JSON, table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from privacy.ledger import PrivacyCharge, PrivacyLedger


def make_ledger() -> PrivacyLedger:
    ledger = PrivacyLedger()
    for rnd in (1, 2, 3):
        ledger.charge(0, rnd, "random-flipping", epsilon=0.5, unit="per code")
    ledger.charge(0, 3, "dp-sgd", epsilon=2.0, delta=1e-5, unit="per record")
    ledger.charge(1, 1, "random-flipping", epsilon=0.25, unit="per code")
    ledger.charge(1, 2, "random-flipping", epsilon=0.25, unit="per code", note="rr")
    return ledger


def test_totals_per_unit() -> None:
    ledger = make_ledger()
    assert len(ledger) == 6
    assert ledger.total(0, "per code") == (1.5, 0.0)
    assert ledger.total(0, "per record") == (2.0, 1e-5)
    assert ledger.total(0, "per bit") == (0.0, 0.0)
    assert ledger.total(1) == (0.5, 0.0)
    assert ledger.total(7) == (0.0, 0.0)
    assert ledger.clients() == (0, 1)
    assert ledger.units(0) == ("per code", "per record")


def test_mixing_units_refused() -> None:
    ledger = make_ledger()
    with pytest.raises(ValueError, match="do not add"):
        ledger.total(0)


def test_totals_by_client() -> None:
    assert make_ledger().totals_by_client() == {
        0: {"per code": (1.5, 0.0), "per record": (2.0, 1e-5)},
        1: {"per code": (0.5, 0.0)},
    }


def test_deltas_compose_and_fsum() -> None:
    ledger = PrivacyLedger()
    for rnd in range(10):
        ledger.charge(2, rnd, "gauss", epsilon=0.1, delta=1e-6, unit="per record")
    eps, delta = ledger.total(2)
    assert eps == 1.0
    assert delta == pytest.approx(1e-5)


def test_charges_tuple_and_order() -> None:
    ledger = make_ledger()
    charges = ledger.charges
    assert isinstance(charges, tuple)
    assert [c.round for c in charges if c.client == 0] == [1, 2, 3, 3]
    assert charges[-1].note == "rr"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epsilon": -0.1},
        {"epsilon": math.inf},
        {"epsilon": math.nan},
        {"delta": 1.0},
        {"delta": -1e-9},
        {"delta": math.nan},
        {"unit": ""},
        {"mechanism": " "},
        {"client": -1},
        {"round": -1},
        {"client": True},
        {"epsilon": "1"},
    ],
)
def test_invalid_charges_refused(kwargs: dict) -> None:
    args = {
        "client": 0,
        "round": 1,
        "mechanism": "m",
        "epsilon": 1.0,
        "delta": 0.0,
        "unit": "per code",
    }
    args.update(kwargs)
    ledger = PrivacyLedger()
    with pytest.raises(ValueError):
        ledger.charge(
            args["client"],
            args["round"],
            args["mechanism"],
            epsilon=args["epsilon"],
            delta=args["delta"],
            unit=args["unit"],
        )
    assert len(ledger) == 0


def test_numpy_scalars_accepted() -> None:
    ledger = PrivacyLedger()
    c = ledger.charge(
        np.int64(3), np.int32(2), "m", epsilon=np.float32(0.5), unit="per bit"
    )
    assert type(c.client) is int and type(c.epsilon) is float
    json.loads(ledger.to_json())


def test_json_round_trip(tmp_path: Path) -> None:
    ledger = make_ledger()
    text = ledger.to_json()
    data = json.loads(text)
    assert isinstance(data, list) and len(data) == 6
    assert data[3] == {
        "client": 0,
        "round": 3,
        "mechanism": "dp-sgd",
        "epsilon": 2.0,
        "delta": 1e-5,
        "unit": "per record",
        "note": "",
    }
    again = PrivacyLedger.from_json(text)
    assert again.charges == ledger.charges

    path = ledger.write(tmp_path / "ledger.json")
    assert PrivacyLedger.read(path).charges == ledger.charges
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]
    # Overwrite atomically with a longer ledger.
    ledger.charge(1, 3, "random-flipping", epsilon=0.25, unit="per code")
    ledger.write(path)
    assert PrivacyLedger.read(path).total(1) == (0.75, 0.0)
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]


def test_from_json_refuses_bad_documents() -> None:
    with pytest.raises(ValueError, match="list"):
        PrivacyLedger.from_json('{"client": 0}')
    with pytest.raises(ValueError, match="missing"):
        PrivacyLedger.from_json('[{"client": 0, "round": 1}]')
    good = PrivacyCharge(0, 1, "m", 1.0, 0.0, "per code").to_dict()
    with pytest.raises(ValueError, match="unknown"):
        PrivacyLedger.from_json(json.dumps([{**good, "sigma": 1.0}]))
    with pytest.raises(ValueError):
        PrivacyLedger.from_json(json.dumps([{**good, "epsilon": -1}]))
    no_note = {k: v for k, v in good.items() if k != "note"}
    assert PrivacyLedger.from_json(json.dumps([no_note])).charges[0].note == ""


def test_write_failure_leaves_no_temp_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        make_ledger().write(tmp_path / "missing-dir" / "ledger.json")
    assert list(tmp_path.iterdir()) == []


def test_table_contains_numbers() -> None:
    table = make_ledger().table()
    lines = table.splitlines()
    assert lines[0].split() == [
        "client",
        "mechanism",
        "unit",
        "charges",
        "epsilon",
        "delta",
    ]
    assert set(lines[1]) <= {"-", " "}
    rows = [line.split() for line in lines[2:]]
    # client, mechanism, unit (two words), charges, epsilon, delta
    assert ["0", "dp-sgd", "per", "record", "1", "2", "1e-05"] in rows
    assert ["0", "random-flipping", "per", "code", "3", "1.5", "0"] in rows
    assert ["0", "total", "per", "code", "3", "1.5", "0"] in rows
    assert ["0", "total", "per", "record", "1", "2", "1e-05"] in rows
    assert ["1", "total", "per", "code", "2", "0.5", "0"] in rows
    assert len({len(line) for line in lines[:2]}) == 1


def test_empty_table() -> None:
    assert PrivacyLedger().table().splitlines()[0].startswith("client")


def test_journal_appends_durably_and_detects_every_edit(tmp_path):
    from privacy.ledger import JournalError, LedgerJournal

    key, path = b"k" * 32, tmp_path / "j.jsonl"
    journal, charges = LedgerJournal.open(path, key, "run-a")
    assert charges == [] and path.stat().st_mode & 0o777 == 0o600
    ledger = PrivacyLedger(journal=journal)
    ledger.charge(0, 1, "dp-sgd/model", epsilon=0.5, delta=1e-5, unit="per record")
    ledger.charge(1, 1, "dp-sgd/model", epsilon=0.7, delta=1e-5, unit="per record")
    with pytest.raises(ValueError):  # an invalid charge is neither kept nor written
        ledger.charge(1, 1, "dp-sgd/model", epsilon=-1.0, unit="per record")
    again, back = LedgerJournal.open(path, key, "run-a")
    assert back == list(ledger.charges) and again.head() == journal.head()
    assert again.mac_at(2) == journal.head()[1]
    lines = path.read_text().splitlines()
    for bad, where in (
        ([lines[1], lines[0]], "line 1 fails"),  # reordered
        ([lines[0].replace("0.5", "0.05"), lines[1]], "line 1 fails"),  # edited
        ([lines[1]], "line 1 fails"),  # the first removed
        ([lines[0], "{"], "line 2 is not a journal entry"),
    ):
        path.write_text("\n".join(bad) + "\n")
        with pytest.raises(JournalError, match=where):
            LedgerJournal.open(path, key, "run-a")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(JournalError, match="another run or with another server key"):
        LedgerJournal.open(path, key, "run-b")
    with pytest.raises(JournalError, match="line 1 fails"):
        LedgerJournal.open(path, b"x" * 32, "run-a")
    path.write_text("\n".join(lines))  # last line torn (no newline)
    with pytest.raises(JournalError, match="line 2 is incomplete"):
        LedgerJournal.open(path, key, "run-a")
