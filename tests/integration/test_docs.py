"""The docs site, the README and what a FAB carries.

`mkdocs build --strict` must pass without a single warning, so a broken link, a
broken anchor, a page outside the nav, a missing result file or a config key the
reference no longer has fails here (and in CI), not on a reader's screen.
"""

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "hooks"))

import generate  # noqa: E402  (docs/hooks/generate.py, the mkdocs hook)


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        # no --quiet: it drops the warnings that --strict counts
        [sys.executable, "-m", "mkdocs", "build", "--strict"]
        + ["--config-file", str(config), "--site-dir", str(site)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _nav_pages(nav: list) -> list[str]:
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def test_docs_build_strict_without_warnings(tmp_path):
    site = tmp_path / "site"
    proc = _mkdocs_build(ROOT / "mkdocs.yml", site)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert "WARNING" not in output, output[-5000:]
    # the hook filled every marker: no marker is left in any page
    for page in site.rglob("*.html"):
        assert "<!-- results:" not in page.read_text(), page
        assert "<!-- config" not in page.read_text(), page
    # generated content landed: the reference's keys, a result table's numbers
    assert "code-length" in (site / "configuration" / "index.html").read_text()
    fedhap = (site / "methods" / "fedhap" / "index.html").read_text()
    table = (DOCS / "results" / "fedhap" / "table.md").read_text()
    assert table.splitlines()[4].split("|")[2].strip() in fedhap  # first result cell


def test_every_page_is_in_the_nav_and_every_nav_page_exists():
    nav = _nav_pages(_config()["nav"])
    assert len(nav) == len(set(nav))
    for page in nav:
        assert (DOCS / page).is_file(), page
    pages = {
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if p.relative_to(DOCS).parts[0] not in ("results", "hooks")
    }
    assert pages == set(nav)


def test_readme_is_the_door_not_the_house():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 220, len(lines)
    text = "\n".join(lines)
    for command in ("make run", "make test", "make test-fast", "make docs"):
        assert command in text, command
    for page in _nav_pages(_config()["nav"]):
        if page.startswith("methods/"):
            assert f"docs/{page}" in text, page  # the method -> docs table


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """The validation settings of mkdocs.yml make broken links and anchors fatal."""
    config = _config()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(
        "# Home\n\n[gone](missing.md) and [no anchor](#nowhere)\n"
    )
    small = {
        "site_name": "t",
        "theme": config["theme"],
        "validation": config["validation"],
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(small))
    proc = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert "missing.md" in proc.stdout + proc.stderr


def test_hook_refuses_missing_results_and_unknown_config_keys():
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="does not exist"):
        generate.fill("<!-- results: no-such-experiment/table.md -->\n")
    with pytest.raises(PluginError, match="no-such-key"):
        generate.config_rows(["rounds", "no-such-key"], "| k |\n|---|\n| `rounds` |\n")
    table = "| key | default |\n|---|---|\n| `a-x` | 1 |\n| `b` | 2 |\n"
    assert generate.config_rows(["a-*"], table) == (
        "| key | default |\n|---|---|\n| `a-x` | 1 |"
    )


def test_every_results_marker_names_a_committed_file():
    markers = []
    for page in DOCS.rglob("*.md"):
        markers += generate._MARKER.findall(page.read_text())
    results = [arg.partition("#")[0] for kind, arg in markers if kind == "results"]
    assert results
    for name in results:
        assert (DOCS / "results" / name).is_file(), name


def test_fab_ships_only_the_app():
    """What `flwr run .` sends: Flower's own FAB builder over the working tree."""
    from flwr.cli.build import build_fab_from_disk, build_fab_from_files

    # the files `flwr build` collects, less .venv and other ignored folders that
    # Flower would drop anyway (walking .venv takes seconds); outside a git
    # checkout, exactly what `flwr build` does
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode == 0:
        names = listed.stdout.split("\0")
        files = {name: ROOT / name for name in names if (ROOT / name).is_file()}
        files[".gitignore"] = ROOT / ".gitignore"
        fab, _ = build_fab_from_files(files)
    else:
        fab = build_fab_from_disk(ROOT)
    names = zipfile.ZipFile(io.BytesIO(fab)).namelist()
    tops = {n.split("/")[0] for n in names if "/" in n}
    for left_out in ("docs", "experiments", "benchmarks", "tests", "deploy", "results"):
        assert left_out not in tops, left_out
    for needed in ("server/server_app.py", "clients/client_app.py", "pyproject.toml"):
        assert needed in names, needed
    assert any(n.startswith("conf/") for n in names)  # presets are config
    assert "docker-compose.yml" not in names and "mkdocs.yml" not in names
    # Flower stores the files uncompressed: the app's code alone is about 1 MB; a
    # shipped dataset, result folder or docs tree would be several MB
    assert len(fab) < 1_200_000, len(fab)
