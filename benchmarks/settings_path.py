"""How far a run's settings travel: the functions that receive them, statically.

Starting at ``server/experiment.py:run_experiment`` (parameter ``settings``), every
call in a visited function that passes the tracked name as an argument (positional
or keyword) is followed into the called function, whose parameter at that place is
tracked in turn. Callees are resolved statically: a name defined in the module or
imported ``from`` a module of the app; a *hook*, called through an attribute or a
local name bound to one (``side.evaluator(settings, ...)``, ``factory =
side.strategy; factory(settings)``), is followed into every function the app's
tables put in a dataclass field of that name (each ``Cls(..., field=function)`` and
the field's default). Other calls through an attribute (methods of an object) are
counted apart (``dynamic_calls``).

Layers, high to low: the apps (``server``, ``clients``), ``strategies``,
``settings``, the libraries (``hashing``, ``hashdata``, ``privacy``, ``crypto``). A
call from a function of a lower layer into a higher one is a call *back up*.

``--baseline-root DIR`` measures another checkout in the same run.

``python benchmarks/settings_path.py [--baseline-root DIR] [--out FILE]``
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.tree_compare import compare_trees  # noqa: E402

START = ("server.experiment", "run_experiment", "settings")
LAYERS = {
    "server": 3,
    "clients": 3,
    "strategies": 2,
    "settings": 1,
    "hashing": 0,
    "hashdata": 0,
    "privacy": 0,
    "crypto": 0,
}


class Module:
    """One parsed module: its functions and the names it imports."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.tree = ast.parse(path.read_text(), str(path))
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.imports: dict[str, tuple[str, str]] = {}  # local -> (module, name)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.imports[a.asname or a.name] = (node.module, a.name)
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        self.functions[f"{node.name}.{item.name}"] = item


def load(root: Path) -> dict[str, Module]:
    """Parse every module of the layered packages under ``root``."""
    mods: dict[str, Module] = {}
    for pkg in LAYERS:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            mods[name] = Module(name, path)
    return mods


def hook_targets(mods: dict[str, Module]) -> dict[str, set[tuple[str, str]]]:
    """Map each dataclass field name to the functions the app's tables put there."""
    fields: dict[str, list[str]] = {}  # class -> field names in order
    targets: dict[str, set[tuple[str, str]]] = {}

    def add(module: str, field: str, value: ast.expr) -> None:
        if isinstance(value, ast.Call) and value.keywords:  # field(default=...)
            value = next((k.value for k in value.keywords if k.arg == "default"), value)
        if isinstance(value, ast.Name):
            target = resolve(mods, module, value.id)
            if target is not None:
                targets.setdefault(field, set()).add(target)

    for mod in mods.values():
        for node in mod.tree.body:
            if isinstance(node, ast.ClassDef) and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            ):
                names = []
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(
                        item.target, ast.Name
                    ):
                        names.append(item.target.id)
                        if item.value is not None:
                            add(mod.name, item.target.id, item.value)
                fields[node.name] = names
    for mod in mods.values():
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            names = fields.get(node.func.id)
            if not names:
                continue
            for i, arg in enumerate(node.args):
                if i < len(names):
                    add(mod.name, names[i], arg)
            for kw in node.keywords:
                if kw.arg in names:
                    add(mod.name, kw.arg, kw.value)
    return targets


def _hook_name(fn: ast.AST, func: ast.expr) -> str | None:
    """Return the hook a call goes through (``x.hook(...)``; ``f = x.hook; f()``)."""
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Assign)
                and any(
                    isinstance(t, ast.Name) and t.id == func.id for t in node.targets
                )
                and isinstance(node.value, ast.Attribute)
            ):
                return node.value.attr
    return None


def resolve(
    mods: dict[str, Module], module: str, name: str, seen: int = 0
) -> tuple[str, str] | None:
    """Return ``(module, function)`` that ``name`` means in ``module``, if static."""
    mod = mods.get(module)
    if mod is None or seen > 5:
        return None
    if name in mod.functions:
        return module, name
    if name in mod.imports:
        src, orig = mod.imports[name]
        if src in mods:
            return resolve(mods, src, orig, seen + 1)
    return None


def _param(fn: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, tracked: str):
    """Return the callee's parameter receiving ``tracked`` in ``call`` (or None)."""
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Name) and arg.id == tracked and i < len(params):
            return params[i]
    for kw in call.keywords:
        if isinstance(kw.value, ast.Name) and kw.value.id == tracked and kw.arg:
            return kw.arg
    return None


def _passes(call: ast.Call, tracked: str) -> bool:
    return any(isinstance(a, ast.Name) and a.id == tracked for a in call.args) or any(
        isinstance(k.value, ast.Name) and k.value.id == tracked for k in call.keywords
    )


def layer(module: str) -> int:
    """Return the layer of ``module`` (higher: closer to the apps)."""
    return LAYERS[module.split(".")[0]]


def measure(root: Path) -> dict:
    """Follow ``settings`` from :data:`START` through the checkout at ``root``."""
    mods = load(root)
    hooks = hook_targets(mods)
    start = (START[0], START[1])
    visited: set[tuple[str, str]] = set()
    back_up: list[str] = []
    dynamic: list[str] = []
    queue = [(start, START[2])]
    while queue:
        (module, fname), tracked = queue.pop()
        if (module, fname) in visited:
            continue
        visited.add((module, fname))
        fn = mods[module].functions[fname]
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call) or not _passes(node, tracked):
                continue
            where = f"{module}:{fname}"
            targets: set[tuple[str, str]] = set()
            if isinstance(node.func, ast.Name):
                target = resolve(mods, module, node.func.id)
                if target is not None:
                    targets.add(target)
            if not targets:
                hook = _hook_name(fn, node.func)
                targets = hooks.get(hook, set()) if hook else set()
                if not targets:
                    if isinstance(node.func, ast.Attribute):
                        dynamic.append(f"{where}: {ast.unparse(node.func)}")
                    continue  # a builtin, a third-party function, a method
            for target in sorted(targets):
                callee = mods[target[0]].functions[target[1]]
                param = _param(callee, node, tracked)
                if param is None:
                    continue
                if layer(target[0]) > layer(module):
                    back_up.append(f"{where} -> {target[0]}:{target[1]}")
                queue.append((target, param))
    files = sorted({m for m, _ in visited})
    return {
        "root": str(root),
        "functions": len(visited),
        "files": len(files),
        "calls_back_up": len(back_up),
        "dynamic_calls": len(dynamic),
        "function_list": sorted(f"{m}:{f}" for m, f in visited),
        "file_list": files,
        "back_up_list": sorted(back_up),
        "dynamic_list": sorted(dynamic),
    }


def summary(r: dict) -> str:
    """One line of the headline numbers."""
    return (
        f"{r['functions']} functions in {r['files']} files, "
        f"{r['calls_back_up']} calls back up, {r['dynamic_calls']} dynamic calls"
    )


def main(argv: list[str] | None = None) -> dict:
    """CLI entry point; returns the report it writes."""
    return compare_trees(
        argv,
        name="settings_path",
        description=__doc__.splitlines()[0],
        marker="server/experiment.py",
        measure=measure,
        line=summary,
        report=lambda results: {
            "benchmark": "settings_path",
            "start": ":".join(START),
            **results,
        },
    )


if __name__ == "__main__":
    main()
