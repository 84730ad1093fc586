"""The docs site, the README and what a FAB carries.

`mkdocs build --strict` must pass without a single warning, so a broken link, a
broken anchor, a page outside the nav, a missing result file or a config key the
reference no longer has fails here (and in CI), not on a reader's screen.
"""

import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

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


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The site, built once for the tests that read it."""
    site = tmp_path_factory.mktemp("docs") / "site"
    return site, _mkdocs_build(ROOT / "mkdocs.yml", site)


def test_docs_build_strict_without_warnings(built):
    site, proc = built
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert "WARNING" not in output, output[-5000:]
    # the hook filled every marker: no marker is left in any page
    for page in site.rglob("*.html"):
        assert "<!-- results:" not in page.read_text(), page
        assert "<!-- config" not in page.read_text(), page
    # generated content landed: the reference's keys, a result table's numbers
    assert "code-length" in (site / "configuration.html").read_text()
    fedhap = (site / "methods" / "fedhap.html").read_text()
    table = (DOCS / "results" / "fedhap" / "table.md").read_text()
    assert table.splitlines()[4].split("|")[2].strip() in fedhap  # first result cell


_LINK = re.compile(r"""(?:href|src)=["']([^"']+)["']""")


def test_site_opened_from_disk_links_to_pages_not_folders(built):
    """Opened as site/index.html (no web server), a link to a folder shows a
    directory listing: every local link and asset must be a file of the site."""
    site, proc = built
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    # 404.html is only ever served by a web server (its links are absolute)
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    assert len(pages) >= len(_nav_pages(_config()["nav"]))
    checked = 0
    for page in pages:
        for link in _LINK.findall(page.read_text()):
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # external, or an anchor on the same page
            target = (page.parent / unquote(parts.path)).resolve()
            assert target.is_file(), f"{page.relative_to(site)} links to {link}"
            checked += 1
    assert checked > 100, checked


def test_search_works_offline(built):
    """The search index is inlined as a script (mkdocs-material's offline plugin)
    and the web-worker shim it needs under file:// is served from the site."""
    site, _ = built
    index = (site / "search" / "search_index.js").read_text()
    assert index.startswith("var __index = {") and '"location":"running.html' in index
    for page in site.rglob("*.html"):
        html = page.read_text()
        assert "iframe-worker-shim.js" in html or page.name == "404.html", page
        remote = re.findall(r"""<(?:script|link)[^>]+(?:src|href)=["']https?:""", html)
        assert not remote, (page, remote)  # nothing a reader offline cannot load


def test_maths_render_offline_as_mathml(built):
    """TeX in the pages becomes MathML at build time (docs/hooks/mathml.py): the
    browser renders it, with no script, font or CDN."""
    site, _ = built
    for page in ("methods/random-flipping.html", "methods/pfmh.html"):
        html = (site / page).read_text()
        assert html.count("<math ") >= 2 and "arithmatex" not in html, page
        assert "\\frac" not in html and "\\varepsilon" not in html, page  # no raw TeX
    assert 'display="block"' in (site / "methods/pfmh.html").read_text()


def test_figures_link_to_their_image(built):
    """Click to zoom: every result figure links to its PNG (docs/hooks/figures.py);
    the link check above makes sure each target exists."""
    site, _ = built
    html = (site / "methods" / "fedhap.html").read_text()
    figures = re.findall(r'<a class="zoom" href="([^"]+[.]png)"><img', html)
    assert figures and all("results/" in f for f in figures), figures


def test_math_hook_converts_and_names_the_page_of_a_bad_formula():
    from mkdocs.exceptions import PluginError

    hook = _load_hook("mathml")
    out = hook.render(
        '<p><span class="arithmatex">\\(e^{\\varepsilon} &lt; 2\\)</span></p>'
        '<div class="arithmatex">\\[\\frac{1}{2}\\]</div>'
    )
    assert '<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">' in out
    assert 'display="block"' in out and "<mfrac>" in out
    assert "<mo>&#x0003C;</mo>" in out  # the HTML-escaped < became a MathML operator
    with pytest.raises(PluginError, match="page.md: formula 'a\\^'"):
        hook.render('<span class="arithmatex">\\(a^\\)</span>', where="page.md")


def test_no_hook_shadows_a_standard_module():
    """docs/hooks/ is on this process's sys.path (and so on that of the Ray workers
    it starts): a hook named like a standard module (it was math.py) broke every
    Ray worker that imported ``math`` after it."""
    names = {p.stem for p in (DOCS / "hooks").glob("*.py")}
    shadowing = names & set(sys.stdlib_module_names)
    assert not shadowing, shadowing


def _load_hook(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: repository paths the docs name, outside links and result markers
_REPO_PATH = re.compile(r"(?<![\w/.<>-])((?:tests|benchmarks)/[\w./*-]*)")


def _doc_texts() -> dict[str, str]:
    pages = [p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).parts[0] != "results"]
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in pages}
    texts["README.md"] = (ROOT / "README.md").read_text()
    return texts


def test_every_tests_and_benchmarks_path_named_in_the_docs_exists():
    missing = []
    for name, text in _doc_texts().items():
        text = re.sub(r"<!--.*?-->", "", text, flags=re.S)  # result markers
        for match in _REPO_PATH.finditer(text):
            path = match.group(1).rstrip(".").split("::")[0]
            if "<" in path or "{" in path:
                continue
            found = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
            if not found:
                missing.append(f"{name}: {path}")
    assert not missing, missing


def test_docs_document_no_decorator_the_registry_lacks():
    """The methods are explicit tables (catalog, sides), not a ``@register``."""
    has_decorator = any(
        "def register(" in (ROOT / "strategies" / f"{name}.py").read_text()
        for name in ("catalog", "server_side", "client_side")
    )
    for name, text in _doc_texts().items():
        assert has_decorator or "@register" not in text, name


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
    # Flower stores the files uncompressed: the app's code alone is about 1.2 MB;
    # a shipped dataset, result folder or docs tree would be several MB
    assert len(fab) < 1_600_000, len(fab)
