"""Per-round checkpoints of a run, and reading one back to resume (``resume`` key).

After every completed round ``r < rounds`` the server writes, inside the run's
``.incomplete`` directory:

* ``checkpoint-r<r>.npz`` -- the global arrays, the strategy's arrays (FedHAP
  global prototypes, PFMH centralized / per-client prototype sets) and the torch
  RNG state; written first, under a temporary name, then renamed;
* ``checkpoint.json`` -- the commit point, replaced atomically: round number, the
  run's id, the npz's name and SHA-256, the run config and a hash of the app's code,
  the strategy's histories, the rows of ``rounds.jsonl``, the length and head MAC of
  the privacy-ledger journal and the Python / NumPy RNG states, authenticated by an
  HMAC-SHA256 under the server's local key (``server/state_key.py``).

The privacy ledger is not in the checkpoint: every charge is appended to the
journal ``privacy_charges.jsonl`` (``privacy.ledger.LedgerJournal``) the moment its
reply reaches the ServerApp (``server/charging_grid.py``). A resume keeps every
charge of the journal, those of the round that crashed included, and charges the
redo again: a client that released three times is charged three times.

A checkpoint whose HMAC fails (edited, or from another run or server), a journal
with an edited line, or one shorter than the checkpoint says, is refused with one
line: editing them cannot reset a client's spent epsilon.

A crash at any moment leaves the previous checkpoint intact (the old npz is
removed only after the new ``checkpoint.json`` is in place). No pickle is read
back (``strategies/state.py``). The last round is not checkpointed: after it the
run writes its summary and the directory loses its ``.incomplete`` suffix, so a
crash in between resumes from the round before and redoes the last one.

What a checkpoint cannot hold is client memory: personalized PFMH keeps each
client's model in the client's ``context.state``, which a new run does not have,
so resuming it is refused (as is DPcode, which has no rounds).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord

from privacy.ledger import JournalError, LedgerJournal, PrivacyLedger
from server.run_files import INCOMPLETE
from settings.resume import CHECKPOINT, checkpoint_file
from settings.resume import resume_dir as resume_dir  # the ServerApp's import
from settings.run_settings import ConfigError, RunSettings
from strategies.state import pack, unpack

JOURNAL = "privacy_charges.jsonl"
FORMAT = 2
_MAC_DOMAIN = b"fedhash checkpoint v2\0"
#: the packages whose code decides a run's numbers (hashed into every checkpoint)
APP_PACKAGES = (
    "clients", "crypto", "hashdata", "hashing", "privacy", "server", "settings",
    "strategies",
)
_ROOT = Path(__file__).resolve().parents[1]
_RESUME = RunSettings.key("resume")


@functools.cache
def code_version(root: Path = _ROOT) -> str:
    """SHA-256 over the app packages' ``.py`` files (relative path and bytes).

    Computed once per process (the code this process runs), not once per round.
    """
    digest = hashlib.sha256()
    for package in APP_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def run_config(settings: RunSettings) -> dict[str, Any]:
    """Return the config a checkpoint must match: every key but ``resume``."""
    config = dict(settings.to_dict())
    config.pop(_RESUME, None)
    return config


@dataclass
class Checkpoint:
    """A run's state after ``round`` (see the module docstring).

    ``ledger`` holds every charge of the run's journal and appends new ones to it;
    ``after`` of them were charged after this checkpoint was written (releases of
    the round that crashed).
    """

    round: int
    arrays: ArrayRecord
    strategy: dict[str, Any]
    rows: list[dict[str, Any]]
    ledger: PrivacyLedger
    rng: dict[str, Any]
    after: int = 0

    def restore_rng(self) -> None:
        """Put the server process's Python, NumPy and torch RNGs back."""
        version, state, gauss = self.rng["python"]
        random.setstate((version, tuple(state), gauss))
        name, keys, pos, has_gauss, cached = self.rng["numpy"]
        np.random.set_state((name, np.asarray(keys, np.uint32), pos, has_gauss, cached))
        torch.set_rng_state(torch.from_numpy(np.asarray(self.rng["torch"], np.uint8)))


def _rng_state(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    version, state, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    arrays["rng.torch"] = torch.get_rng_state().numpy()
    return {
        "python": [version, list(state), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": {"__array__": "rng.torch"},
    }


def write_checkpoint(
    run_dir: Path,
    *,
    server_round: int,
    settings: RunSettings,
    arrays: ArrayRecord,
    strategy_state: dict[str, Any],
    rows: list[dict[str, Any]],
    journal: LedgerJournal,
    key: bytes,
) -> Path:
    """Write the checkpoint of ``server_round`` atomically; return its json path.

    ``journal``: the run's privacy-ledger journal, whose length and head MAC the
    checkpoint records; ``key``: the server's key (``server/state_key.py``).
    """
    npz: dict[str, np.ndarray] = {}
    names = list(arrays.keys())
    for i, name in enumerate(names):
        npz[f"global.{i}"] = arrays[name].numpy()
    strategy = pack(strategy_state, npz, "strategy")
    packed_rows = pack(rows, npz, "rows")  # keeps int keys (precision_at_k)
    rng = _rng_state(npz)
    data_name = f"checkpoint-r{server_round}.npz"
    tmp = run_dir / f"{data_name}.tmp"
    with tmp.open("wb") as fh:
        np.savez(fh, **npz)  # type: ignore[arg-type]
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, run_dir / data_name)
    count, head = journal.head()
    payload = {
        "format": FORMAT,
        "run": _run_id(run_dir),
        "round": server_round,
        "data": data_name,
        "sha256": _sha256(run_dir / data_name),
        "config": run_config(settings),
        "code": code_version(),
        "global_names": names,
        "strategy": strategy,
        "rows": packed_rows,
        "journal": {"charges": count, "mac": head},
        "rng": rng,
    }
    payload = json.loads(json.dumps(payload, allow_nan=True))  # as read back
    payload["hmac"] = _mac(key, payload)
    path = run_dir / CHECKPOINT
    tmp = path.with_suffix(".json.tmp")
    with tmp.open("w") as fh:
        fh.write(json.dumps(payload, allow_nan=True))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    for old in run_dir.glob("checkpoint-r*.npz"):
        if old.name != data_name:
            old.unlink()
    return path


def read_checkpoint(run_dir: Path, settings: RunSettings, *, key: bytes) -> Checkpoint:
    """Read and check the checkpoint in ``run_dir`` against this run's settings.

    ``key`` is the server's key (``server/state_key.py``). The checkpoint's HMAC is
    checked first, then the journal against it; ``ledger`` of the result appends to
    that journal.

    Raises
    ------
    ConfigError
        Naming ``resume`` and the reason: no checkpoint, a damaged one, one whose
        HMAC fails (edited, another run's or another server's), a journal that was
        edited or cut below the checkpoint's length, or one written with another
        config (the differing keys are listed) or another version of the code.
    """
    path = checkpoint_file(run_dir)
    try:
        payload = json.loads(path.read_text())
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else "unreadable"
        raise ConfigError(
            f"{_RESUME}: checkpoint format {found!r}, this code reads format {FORMAT}"
        )
    given = payload.pop("hmac", None)
    if (
        not isinstance(given, str)
        or not hmac.compare_digest(given, _mac(key, payload))
        or payload.get("run") != _run_id(run_dir)
    ):
        raise ConfigError(
            f"{_RESUME}={str(run_dir)!r}: {CHECKPOINT} fails its HMAC under this "
            "server's key: it was edited, or written for another run or by another "
            "server; refused (a checkpoint's ledger position cannot be trusted)"
        )
    ours = json.loads(json.dumps(run_config(settings)))
    if payload["config"] != ours:
        keys = sorted(
            k
            for k in set(ours) | set(payload["config"])
            if ours.get(k) != payload["config"].get(k)
        )
        raise ConfigError(
            f"{_RESUME}={str(run_dir)!r}: the checkpoint was written with another "
            f"config; differing keys: {', '.join(keys)} (resume with the run's own "
            "config, from its config.json)"
        )
    if payload["code"] != code_version():
        raise ConfigError(
            f"{_RESUME}={str(run_dir)!r}: the checkpoint was written by another "
            "version of the app's code (its hash differs); resume with the code "
            "that started the run"
        )
    data = run_dir / payload["data"]
    if not data.is_file() or _sha256(data) != payload["sha256"]:
        raise ConfigError(
            f"{_RESUME}={str(run_dir)!r}: {payload['data']} is missing or does not "
            "match the SHA-256 in the checkpoint"
        )
    with np.load(data, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    global_arrays = ArrayRecord(
        {
            name: Array(np.ascontiguousarray(arrays[f"global.{i}"]))
            for i, name in enumerate(payload["global_names"])
        }
    )
    ledger, after = _resumed_ledger(run_dir, payload["journal"], key)
    return Checkpoint(
        round=int(payload["round"]),
        arrays=global_arrays,
        strategy=unpack(payload["strategy"], arrays),
        rows=unpack(payload["rows"], arrays),
        ledger=ledger,
        rng={**payload["rng"], "torch": arrays["rng.torch"]},
        after=after,
    )


def open_ledger(run_dir: Path, key: bytes) -> PrivacyLedger:
    """Return a new run's ledger, appending to a new journal in ``run_dir``."""
    journal, charges = LedgerJournal.open(run_dir / JOURNAL, key, _run_id(run_dir))
    if charges:
        raise ConfigError(f"{run_dir / JOURNAL}: a new run's journal must be empty")
    return PrivacyLedger(journal=journal)


def _resumed_ledger(
    run_dir: Path, mark: dict[str, Any], key: bytes
) -> tuple[PrivacyLedger, int]:
    """Every charge of the journal; how many came after the checkpoint."""
    where = f"{_RESUME}={str(run_dir)!r}"
    try:
        journal, charges = LedgerJournal.open(run_dir / JOURNAL, key, _run_id(run_dir))
    except JournalError as exc:
        raise ConfigError(f"{where}: privacy-ledger journal refused: {exc}") from None
    count = int(mark["charges"])
    if len(charges) < count or journal.mac_at(count) != mark["mac"]:
        raise ConfigError(
            f"{where}: {JOURNAL} holds {len(charges)} charges, not the {count} the "
            "checkpoint covers (or other ones): charges were removed; refused"
        )
    return PrivacyLedger(charges, journal=journal), len(charges) - count


def _run_id(run_dir: Path) -> str:
    return run_dir.name.removesuffix(INCOMPLETE)


def _mac(key: bytes, payload: dict[str, Any]) -> str:
    """HMAC-SHA256 of the payload's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hmac.new(key, _MAC_DOMAIN + text.encode(), hashlib.sha256).hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
