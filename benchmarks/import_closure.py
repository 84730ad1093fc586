"""What each Flower app imports of this repository, and the import circles.

Two measures of how the apps hang together:

* **closures**: a fresh interpreter imports one app entry (``clients.client_app``,
  ``server.server_app``; and the ClientApp with what a FedAvg train message loads)
  and lists the modules of the app's packages (the wheel's
  ``packages`` in ``pyproject.toml``) that are then in ``sys.modules``; the JSON names
  those under ``server/`` in the ClientApp's closure and the client trainers in the
  ServerApp's.
* **circles**: the static import graph of those packages (every ``import`` statement,
  at module level or inside a function, except under ``if TYPE_CHECKING:``); each
  strongly connected component of more than one module is one circle, reported with
  its modules. ``module_level_circles`` counts those of the module-level imports only
  (the ones that can fail at import time).

``--baseline-root DIR`` measures another checkout (e.g. the commit before a change) in
the same run, so the JSON holds both and their differences.

``python benchmarks/import_closure.py [--baseline-root DIR] [--out FILE]``
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.tree_compare import compare_trees  # noqa: E402

ENTRIES = {
    "clientapp": ["clients.client_app"],
    "serverapp": ["server.server_app"],
    # what a ClientApp process holds once it has run a plaintext FedAvg train
    # message: the method's client side and the update's mods (an older tree's
    # single transport module, built on the first one; a tree without a module
    # skips it)
    "clientapp_fedavg_train": [
        "clients.client_app",
        "strategies.fedavg.trainer",
        "clients.sparse_updates",
        "clients.update_transport",
    ],
}

PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import importlib
for entry in json.loads(sys.argv[2]):
    try:
        importlib.import_module(entry)
    except ModuleNotFoundError as error:
        if error.name != entry:
            raise
packages = json.loads(sys.argv[3])
print(json.dumps(sorted(
    m for m in sys.modules if m.split(".")[0] in packages
)))
"""


def app_packages(root: Path) -> list[str]:
    """Return the app's packages (``[tool.hatch.build.targets.wheel] packages``)."""
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    return list(meta["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])


def module_files(root: Path, packages: list[str]) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of ``packages``."""
    found: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def closure(root: Path, entry: list[str], packages: list[str]) -> list[str]:
    """Modules of ``packages`` a fresh interpreter holds after importing ``entry``."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), json.dumps(entry)]
        + [json.dumps(packages)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    if proc.returncode != 0:
        raise SystemExit(f"importing {entry} in {root} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, bool]]:
    """List ``(name, at module level)`` of each import not under TYPE_CHECKING."""
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit_stmt(sub, top)
                continue
            visit_stmt(child, top)

    def visit_stmt(child: ast.AST, top: bool) -> None:
        if isinstance(child, ast.Import):
            out.extend((a.name, top) for a in child.names)
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                pkg = module.split(".")
                if not is_package:
                    pkg = pkg[:-1]
                pkg = pkg[: len(pkg) - (child.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            out.extend((f"{base}.{a.name}", top) for a in child.names)
            out.append((base, top))
        else:
            inner = top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            visit(child, inner)

    visit(tree, True)
    return out


def import_graph(
    files: dict[str, Path], *, module_level_only: bool = False
) -> dict[str, set[str]]:
    """Return ``{module: modules of the app it imports}`` (static, from the source)."""
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        names = _imports(tree, mod, path.name == "__init__.py")
        for name, top in names:
            if module_level_only and not top:
                continue
            if name in files:
                targets.add(name)
        # "from pkg import name": an edge to pkg only where name is no submodule
        for name, top in names:
            if module_level_only and not top:
                continue
            parent = name.rpartition(".")[0]
            if parent in files and name not in files and parent != mod:
                targets.add(parent)
        targets.discard(mod)
        graph[mod] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(found)


def is_trainer(module: str) -> bool:
    """Tell a client trainer (``strategies.<m>.trainer``, ``clients.trainers``)."""
    return module.endswith(".trainer") or module == "clients.trainers"


def measure(root: Path) -> dict:
    """Closures of both apps and the import circles of the checkout at ``root``."""
    packages = app_packages(root)
    files = module_files(root, packages)
    out: dict = {"root": str(root), "app_modules": len(files), "closures": {}}
    for app, entry in ENTRIES.items():
        mods = closure(root, entry, packages)
        out["closures"][app] = {
            "entry": entry,
            "modules": len(mods),
            "under_server": [m for m in mods if m.split(".")[0] == "server"],
            "client_trainers": [m for m in mods if is_trainer(m)],
            "module_list": mods,
        }
    every = circles(import_graph(files))
    top = circles(import_graph(files, module_level_only=True))
    out["circles"] = {"count": len(every), "components": every}
    out["module_level_circles"] = {"count": len(top), "components": top}
    return out


def summary(m: dict) -> str:
    """One line of the headline numbers."""
    c, s = m["closures"]["clientapp"], m["closures"]["serverapp"]
    t = m["closures"]["clientapp_fedavg_train"]
    return (
        f"ClientApp {c['modules']}/{m['app_modules']} modules "
        f"({len(c['under_server'])} under server/; {t['modules']} after a FedAvg "
        f"train message), ServerApp {s['modules']} "
        f"({len(s['client_trainers'])} client trainers), import circles "
        f"{m['circles']['count']} (module level {m['module_level_circles']['count']})"
    )


def main(argv: list[str] | None = None) -> dict:
    """CLI entry point; returns the report it writes."""

    def report(results: dict[str, dict]) -> dict:
        out: dict = {"benchmark": "import_closure", "results": results}
        if "baseline" in results:
            this, base = results["this"], results["baseline"]
            out["difference"] = {
                f"{app}_modules": this["closures"][app]["modules"]
                - base["closures"][app]["modules"]
                for app in ENTRIES
            } | {"circles": this["circles"]["count"] - base["circles"]["count"]}
        return out

    return compare_trees(
        argv,
        name="import_closure",
        description=__doc__.splitlines()[0],
        marker="pyproject.toml",
        measure=measure,
        line=summary,
        report=report,
    )


if __name__ == "__main__":
    main()
