"""Every third-party package the project imports is declared in pyproject.toml.

A package that only arrives as some other package's dependency can disappear with
that package's next release; `pip install -e .` must bring everything the code
imports. Checked over the app packages, deploy/, experiments/, benchmarks/ and the
tests, against [project] dependencies and the optional extras.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = (
    "server", "clients", "strategies", "hashing", "hashdata", "settings", "privacy",
    "crypto", "deploy", "experiments", "benchmarks", "tests", "docs/hooks",
)
#: modules of packages that are declared but not installed here (optional extras)
NOT_INSTALLED = {"faiss": "faiss-cpu", "tenseal": "tenseal"}
#: declared through an extra of a declared package
VIA_EXTRA = {"ray": "flwr"}  # flwr[simulation]
#: typing-only modules (imported under TYPE_CHECKING)
TYPING_ONLY = {"_typeshed"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    return {_norm(re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0]) for spec in specs}


def _local_names() -> set[str]:
    names = {p.name for p in ROOT.iterdir() if p.is_dir()}
    for folder in ("tests", "benchmarks", "docs/hooks", "experiments"):
        names |= {p.stem for p in (ROOT / folder).glob("*.py")}
    return names


_distributions = functools.cache(packages_distributions)


@functools.cache
def _imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared():
    declared = _declared()
    local = _local_names()
    dists = _distributions()
    missing = []
    for module, files in sorted(_imports().items()):
        if not module or module in sys.stdlib_module_names or module in local:
            continue
        if module in TYPING_ONLY:
            continue
        candidates = dists.get(module, []) or [NOT_INSTALLED.get(module, module)]
        if module in VIA_EXTRA:
            candidates = [VIA_EXTRA[module]]
        if not any(_norm(c) in declared for c in candidates):
            missing.append(f"{module} ({', '.join(candidates)}): {sorted(files)[0]}")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(
        missing
    )


def test_the_check_sees_an_undeclared_import(tmp_path, monkeypatch):
    """The test above can fail: fastapi, uvicorn and httpx were undeclared once."""
    declared = _declared()
    assert {"fastapi", "uvicorn", "httpx"} <= declared
    monkeypatch.setattr(
        sys.modules[__name__], "_declared", lambda: declared - {"fastapi"}
    )
    try:
        test_every_imported_package_is_declared()
    except AssertionError as err:
        assert "fastapi (fastapi)" in str(err)
    else:
        raise AssertionError("an undeclared fastapi went unnoticed")
