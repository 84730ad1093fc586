"""MkDocs hook: fill the generated parts of the docs at build time.

Three markers, each an HTML comment on a line of its own in a docs page:

``<!-- config-reference -->``
    The whole configuration reference, from
    ``settings.reference.config_reference_markdown()`` (the config dataclasses).
``<!-- config: PATTERN ... -->``
    Only the reference's table rows whose key matches one of the shell-style
    patterns (``rounds``, ``fedhap.*``), under their table's header; a method page
    lists its own keys this way. Every pattern must match a key, so a renamed key
    fails the build.
``<!-- results: NAME/table.md -->``
    The file ``docs/results/NAME/table.md`` as the experiment driver wrote it;
    ``NAME/summary.json#map_at_k`` renders that column of a seed sweep's
    ``aggregate`` rows; ``benchmarks/FILE.json`` (and ``benchmarks/dphe.json#cnn``)
    renders a benchmark's JSON (see ``RENDERERS``).

Nothing generated is committed into the pages, so the docs cannot drift from the
code or from the result files. The project is imported from the repository root.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from experiments.lib.tables import MISSING, pm, table_head, table_row  # noqa: E402

RESULTS = ROOT / "docs" / "results"
_MARKER = re.compile(r"^<!-- (config-reference|config|results):?\s*(.*?)\s*-->$", re.M)


def _config_reference() -> str:
    from settings.reference import config_reference_markdown  # noqa: PLC0415

    return config_reference_markdown().strip("\n")


def _tables(markdown: str) -> list[tuple[str, list[str]]]:
    """``(header + separator, rows)`` of every pipe table in ``markdown``."""
    tables: list[tuple[str, list[str]]] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        is_table = lines[i].startswith("|") and i + 1 < len(lines)
        if is_table and re.match(r"^\|[\s:|-]+\|$", lines[i + 1]):
            head = lines[i] + "\n" + lines[i + 1]
            i += 2
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            tables.append((head, rows))
        else:
            i += 1
    return tables


def _row_key(row: str) -> str:
    return row.strip("|").split("|")[0].strip().strip("`")


def config_rows(patterns: list[str], reference: str) -> str:
    """Keep the reference's rows whose key matches a pattern, under their headers."""
    tables = _tables(reference)
    keys = [_row_key(row) for _, rows in tables for row in rows]
    for pattern in patterns:
        if not fnmatch.filter(keys, pattern):
            raise PluginError(
                f"config marker pattern {pattern!r}: no key of the configuration "
                "reference matches (a renamed key? update the marker)"
            )
    out = []
    for head, rows in tables:
        keep = [
            row
            for row in rows
            if any(fnmatch.fnmatchcase(_row_key(row), p) for p in patterns)
        ]
        if keep:
            out.append(head + "\n" + "\n".join(keep))
    return "\n\n".join(out)


def sweep_column(path: Path, column: str) -> str:
    """One metric of a seed sweep's ``aggregate`` rows: methods x bits."""
    data = json.loads(path.read_text())
    rows = data["aggregate"]
    bits = sorted({r["bits"] for r in rows})
    cells: dict[tuple[str, str], dict[int, str]] = {}
    for r in rows:
        if r.get(f"{column}_mean") is None:
            continue  # a row without this metric (e.g. a floor with mAP@ALL only)
        cell = pm(r[f"{column}_mean"], r[f"{column}_std"], scale=100)
        cells.setdefault((r["method"], r["partitioning"]), {})[r["bits"]] = cell
    order = sorted(cells, key=lambda k: (k[0] == "centralized", k))
    lines = table_head("method", "partitioning", *(f"{b} bits" for b in bits))
    for method, part in order:
        row = cells[(method, part)]
        lines.append(table_row(method, part, *(row.get(b, MISSING) for b in bits)))
    return "\n".join(lines)


def _retrieval(data: dict[str, Any]) -> str:
    topk, mapall = data["topk"], data["map_all"]
    return "\n".join(
        [
            *table_head(
                "task",
                "ours (packed popcount, numba)",
                f"faiss `IndexBinaryFlat` {topk['faiss_version']}",
                "float dot product + full `np.argsort`*",
            ),
            table_row(
                f"exhaustive top-{data['parameters']['top_k']}, all queries",
                f"**{topk['ours_seconds']:.2f} s**",
                f"{topk['faiss_seconds']:.2f} s "
                f"(ours {topk['ratio_faiss']:.1f}x faster)",
                f"~{topk['float_baseline_seconds_extrapolated']:.1f} s",
            ),
            table_row(
                "mAP@ALL, all queries",
                f"**{mapall['ours_seconds']:.2f} s**",
                MISSING,
                f"~{mapall['float_baseline_seconds_extrapolated']:.1f} s",
            ),
        ]
    )


def _round_time(data: dict[str, Any]) -> str:
    lines = table_head(
        "clients", "seconds / round", "sequential local training (baseline)", "ratio"
    )
    for r in data["results"]:
        lines.append(
            table_row(
                r["clients"],
                f"{r['seconds_per_round']:.2f}",
                f"{r['sequential_local_training_seconds']:.2f}",
                f"{r['ratio_round_over_sequential']:.2f}",
            )
        )
    return "\n".join(lines)


def _fedhap_cost(data: dict[str, Any]) -> str:
    base, fedhap = data["baseline"], data["fedhap"]
    down, up = data["extra_down_bytes_per_client"], data["extra_up_bytes_per_client"]
    return "\n".join(
        [
            "| | FedAvg (DPSH) | FedHAP | FedHAP / FedAvg |",  # an empty first name
            "|---|---|---|---|",
            table_row(
                "training wall time per round (all clients)",
                f"{base['train_seconds_per_round']:.2f} s",
                f"{fedhap['train_seconds_per_round']:.2f} s",
                f"{data['ratio_train_seconds']:.2f}x",
            ),
            table_row(
                "bytes per client, server → client",
                f"{base['down_bytes_per_client']:,.0f}",
                f"{fedhap['down_bytes_per_client']:,.0f}",
                f"+{down:,.0f} B (+{100 * down / base['down_bytes_per_client']:.1f}%)",
            ),
            table_row(
                "bytes per client, client → server",
                f"{base['up_bytes_per_client']:,.0f}",
                f"{fedhap['up_bytes_per_client']:,.0f}",
                f"+{up:,.0f} B (+{100 * up / base['up_bytes_per_client']:.1f}%)",
            ),
        ]
    )


def _dphe_grid(data: dict[str, Any]) -> str:
    lines = [
        "| update | sparsity | method | ciphertexts / client | encrypt s "
        "| aggregate s | decrypt s | total s / client / round "
        "| upload MB / client | |",  # an empty last name
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        lines.append(
            table_row(
                r["model"],
                f"{100 * r['sparsity']:.0f}%",
                r["method"],
                f"{r['ciphertexts_per_client']:,.0f}",
                f"{r['encrypt_s']:.2f}",
                f"{r['aggregate_s']:.3f}",
                f"{r['decrypt_s']:.2f}",
                f"{r['total_s']:.2f}",
                f"{r['upload_bytes_per_client'] / 1e6:.2f}",
                "measured" if r["measured"] else "extrapolated",
            )
        )
    return "\n".join(lines)


#: rows of the DPHE-vs-CKKS table: key under ``cnn.dphe`` -> label
_CNN_ROWS = {
    "default-shared-full-pool": "**shared blocks, full r^n from the node's pool** "
    "(the default; precompute on 1 background process)",
    "block-full-pool": "each client's own top-k blocks, full r^n from the node's pool",
    "block-djn": "block, DJN (opt-in short-exponent assumption)",
    "block-djn-keyholder1": "block, DJN, keyholder on 1 thread",
    "block-djn-pool2": "block, DJN, obfuscators precomputed on 2 processes",
    "block-full": "block, full r^n",
    "block-full-pool2": "block, full r^n, precomputed on 2 processes",
    "element-full": "element-wise top-k, full r^n (before this work)",
    "block-djn-max16": "block, DJN, `dphe.max-contributors = 16` (wider slots)",
}


def _dphe_cnn(data: dict[str, Any]) -> str:
    cnn = data["cnn"]
    ckks, naive = cnn["ckks"], cnn["naive"]
    lines = [
        *table_head(
            "row",
            "ciphertexts / client",
            "setup s",
            "precompute s",
            "client s",
            "keyholder s",
            "upload MB / client",
            "max error",
        ),
        table_row(
            f"CKKS, TenSEAL {ckks['tenseal']} (N {ckks['poly_modulus_degree']}, "
            f"2^{ckks['scale_bits']}, dense)",
            f"{ckks['ciphertexts_per_client']:,}",
            MISSING,
            MISSING,
            f"{ckks['client_s']:.2f}",
            f"{ckks['decrypt_s']:.2f}",
            f"{ckks['upload_bytes_per_client'] / 1e6:.2f}",
            f"{ckks['max_abs_error']:.0e}",
        ),
    ]
    for key, label in _CNN_ROWS.items():
        if key not in cnn["dphe"]:  # a --quick run leaves out the element-wise row
            continue
        r = cnn["dphe"][key]
        lines.append(
            table_row(
                label,
                f"{r['ciphertexts_per_client']:,.0f}",
                f"{r['setup_s']:.2f}",
                f"{r['precompute_s']:.2f}",
                f"{r['client_s']:.2f}",
                f"{r['keyholder_s']:.2f}",
                f"{r['upload_bytes_per_client'] / 1e6:.2f}",
                f"{r['max_abs_error']:.0e}",
            )
        )
    # naive: one ciphertext (mod n^2, 2 x key bits) per value and the weight
    ciphertexts = cnn["dimension"] + 1
    upload = ciphertexts * 2 * data["settings"]["key_bits"] / 8
    lines.append(
        table_row(
            "naive per-value Paillier (*extrapolated* from "
            f"{naive['sample_values']:,} values run for real)",
            f"{ciphertexts:,}",
            MISSING,
            MISSING,
            f"{naive['client_s']:,.0f}",
            f"{naive['keyholder_s']:,.0f}",
            f"{upload / 1e6:.1f}",
            f"{naive['sample']['max_abs_error']:.0e}",
        )
    )
    return "\n".join(lines)


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "benchmarks/retrieval.json": _retrieval,
    "benchmarks/round_time.json": _round_time,
    "benchmarks/fedhap_cost.json": _fedhap_cost,
    "benchmarks/dphe.json": _dphe_grid,
    "benchmarks/dphe.json#cnn": _dphe_cnn,
}


def results_block(spec: str) -> str:
    """Render what a ``results:`` marker stands for, as markdown."""
    name, _, column = spec.partition("#")
    path = RESULTS / name
    if not path.is_file():
        raise PluginError(f"results marker {spec!r}: {path} does not exist")
    if spec in RENDERERS:
        return RENDERERS[spec](json.loads(path.read_text()))
    if column:
        return sweep_column(path, column)
    if path.suffix != ".md":
        raise PluginError(f"results marker {spec!r}: no renderer for {name}")
    return path.read_text().strip("\n")


def fill(markdown: str) -> str:
    """Replace every marker of ``markdown`` with what it stands for."""
    reference: list[str] = []  # computed once per page, on first use

    def _reference() -> str:
        if not reference:
            reference.append(_config_reference())
        return reference[0]

    def _replace(match: re.Match[str]) -> str:
        kind, arg = match.group(1), match.group(2)
        if kind == "config-reference":
            return _reference()
        if kind == "config":
            return config_rows(arg.split(), _reference())
        return results_block(arg)

    return _MARKER.sub(_replace, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: fill the page's markers before it is rendered."""
    return fill(markdown)
