"""The documentation cannot rot: every example of README.md and docs/*.md runs, and the site builds strictly.

The convention (tests/docs_harness.py has it in code): each page's ```python / ```bash / ```sh /
```console blocks run in order in one fresh process, in a folder of its own holding the files of
tests/docfiles.py (session.nwb, climate.nc, climate2.nc, data.h5); ``https://data.example.org/``
is a loopback HTTP server serving that folder and ``s3://bucket/`` a moto server holding the same
files; ``<!-- not-run: reason -->`` skips the next block.  A block may not reach a refindex submodule
that only a call before it imported (``refindex.read...`` after a bare ``import refindex``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import docfiles
from conftest import moto_s3
from docs_harness import EXAMPLE_BUCKET, FolderServer, blocks, console_commands, run_page, runnable

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 200


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _runnable_pages() -> list[Path]:
    return [p for p in PAGES if runnable(blocks(p.read_text(encoding="utf-8"), _page_id(p)))]


@pytest.fixture(scope="module")
def doc_files(tmp_path_factory) -> Path:
    """The fixture files, built once; each page gets its own copy."""
    pytest.importorskip("pynwb")
    pytest.importorskip("netCDF4")
    folder = tmp_path_factory.mktemp("docfiles")
    docfiles.build(folder)
    return folder


@pytest.fixture(scope="module")
def s3_endpoint():
    """A moto server, started by the first page that names ``s3://bucket/``."""
    servers: list = []

    def start() -> dict:
        if not servers:
            cm = moto_s3()
            servers.append((cm, cm.__enter__()))
        return servers[0][1]

    yield start
    for cm, _ in servers:
        cm.__exit__(None, None, None)


def _fill_bucket(options: dict, folder: Path) -> None:
    """``bucket`` holds exactly the page's files (a page never sees what the one before wrote)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=options["endpoint_url"], aws_access_key_id=options["key"],
                      aws_secret_access_key=options["secret"], region_name="us-east-1")
    if "bucket" in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bucket"):
            for obj in page.get("Contents", []):
                s3.delete_object(Bucket="bucket", Key=obj["Key"])
    else:
        s3.create_bucket(Bucket="bucket")
    for name in docfiles.FILES:
        s3.upload_file(str(folder / name), "bucket", name)


def _page_env(folder: Path, s3: dict | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTEST_", "REFINDEX_"))}
    env.update(REFINDEX_CACHE_DIR=str(folder / ".cache"), MPLBACKEND="Agg", PYTHONWARNINGS="ignore",
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
    if s3 is not None:
        env.update(AWS_ENDPOINT_URL=s3["endpoint_url"], AWS_ACCESS_KEY_ID=s3["key"],
                   AWS_SECRET_ACCESS_KEY=s3["secret"], AWS_DEFAULT_REGION="us-east-1")
    return env


@pytest.mark.parametrize("page", _runnable_pages(), ids=_page_id)
def test_page_examples_run(page: Path, doc_files: Path, s3_endpoint, tmp_path: Path):
    """Every runnable block of the page runs as written, in order, without error."""
    folder = tmp_path / "page"
    shutil.copytree(doc_files, folder)
    text = page.read_text(encoding="utf-8")
    s3 = None
    if any(EXAMPLE_BUCKET in b.code for b in runnable(blocks(text, _page_id(page)))):
        s3 = s3_endpoint()
        _fill_bucket(s3, folder)
    with FolderServer(folder) as url:
        rc, out = run_page(page, folder, url, _page_env(folder, s3))
    assert rc == 0, f"an example of {_page_id(page)} failed:\n{out[-6000:]}"


# ---------------------------------------------------------------- the convention itself


def test_blocks_follow_the_convention():
    text = "\n".join([
        "# page", "```python", "x = 1", "```", "", "<!-- not-run: needs the internet -->", "", "```bash",
        "curl https://example.com", "```", "```json", "{}", "```", "```console", "$ refindex --help",
        "usage: ...", "$ echo a \\", "  b", "```", "````sh", "```", "echo nested", "````"])
    got = blocks(text, "p.md")
    assert [(b.kind, b.line, b.skip) for b in got] == [
        ("python", 3, None), ("shell", 9, "needs the internet"), ("", 12, None), ("console", 15, None),
        ("shell", 21, None)]
    assert console_commands(got[3].code) == "refindex --help\necho a \\\n  b"
    assert [b.line for b in runnable(got)] == [3, 15, 21]


def test_a_failing_example_fails_its_page_at_its_line(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("intro\n\n```python\nvalue = open('data.txt').read()\n```\n\n"
                    "<!-- not-run: would fail -->\n```python\nraise SystemExit(3)\n```\n\n"
                    "```bash\ntest \"$(cat data.txt)\" = hello\n```\n\n```python\nassert value == 'bye', value\n```\n")
    (tmp_path / "data.txt").write_text("hello")
    env = _page_env(tmp_path, None)
    rc, out = run_page(page, tmp_path, "http://unused/", env)
    assert rc == 1
    assert f"FAILED: {page}:17 (python block)" in out, out
    assert f'File "{page}", line 17' in out and "AssertionError: hello" in out


def test_a_page_cannot_lean_on_what_a_call_imported(tmp_path: Path):
    """``refindex.read.cache_folder()`` ran on docs/troubleshooting.md only because a call before it had
    imported refindex.read; a reader who ran that block after ``import refindex`` met AttributeError."""
    page = tmp_path / "page.md"
    leaning = ("```python\nimport importlib\nimport refindex\n\nimportlib.import_module('refindex.testing')  # as a "
               "call does\n```\n\n```python\nprint(refindex.testing.__name__)\n```\n")
    page.write_text(leaning)
    rc, out = run_page(page, tmp_path, "http://unused/", _page_env(tmp_path, None))
    assert rc == 1, out
    assert (f"FAILED: {page}:9 (python block): `refindex.testing` is there only because something the page ran "
            "imported it: a fresh interpreter that does the page's imports (refindex) has no `refindex.testing`") in out
    page.write_text(leaning.replace("import refindex\n", "import refindex\nimport refindex.testing\n"))
    rc, out = run_page(page, tmp_path, "http://unused/", _page_env(tmp_path, None))
    assert rc == 0, out  # written as an import, it is the page's own


def test_the_read_side_is_there_after_import_refindex(tmp_path: Path):
    """As docs/troubleshooting.md shows it: ``refindex.read.cache_folder()`` right after ``import refindex``."""
    env = dict(os.environ, REFINDEX_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", "import refindex\nprint(refindex.read.cache_folder())"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == f"{tmp_path}\n", out.stderr


def test_the_loopback_server_serves_ranges_etag_and_last_modified(tmp_path: Path):
    import urllib.request

    (tmp_path / "f.bin").write_bytes(bytes(range(100)))
    with FolderServer(tmp_path) as url:
        req = urllib.request.Request(url + "f.bin", headers={"Range": "bytes=10-19"})
        with urllib.request.urlopen(req) as r:
            assert r.status == 206 and r.read() == bytes(range(10, 20))
            assert r.headers["ETag"] and r.headers["Last-Modified"]
            assert r.headers["Content-Range"] == "bytes 10-19/100"
        with urllib.request.urlopen(urllib.request.Request(url + "f.bin", headers={"Range": "bytes=-5"})) as r:
            assert r.read() == bytes(range(95, 100))


# ---------------------------------------------------------------- README and the site


def test_readme_is_short_and_its_links_resolve():
    """README.md is not part of the site, so its links (and their #anchors) are checked here."""
    from markdown.extensions.toc import slugify

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    for target, anchor in re.findall(r"\]\(([^)#\s]+)(?:#([^)]*))?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"(?m)^#+ (.+)$", (ROOT / target).read_text(encoding="utf-8"))
            assert anchor in {slugify(h, "-") for h in headings}, f"README.md links to {target}#{anchor}: no such heading"


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mkdocs")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], capture_output=True, text=True, timeout=120)


def test_site_builds_in_strict_mode(tmp_path: Path):
    """``make docs``: broken links, missing pages and anchors fail the build."""
    proc = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built = {p.relative_to(tmp_path / "site").parts[0] for p in (tmp_path / "site").iterdir()}
    for page in (ROOT / "docs").glob("*.md"):
        assert page.stem == "index" or page.stem in built, f"docs/{page.name} is not in the site"
    _api_page_documents_every_public_name((tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8"))


def _api_page_documents_every_public_name(page: str) -> None:
    """docs/api.md (mkdocstrings) has a section, with its docstring, for each name of ``refindex.__all__``,
    made from the object ``refindex.NAME`` is; no Sphinx role is left as it was written."""
    import html
    import importlib.util

    import refindex

    spec = importlib.util.spec_from_file_location("griffe_roles", ROOT / "docs" / "griffe_roles.py")
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)  # the page shows a docstring's Sphinx roles as code spans
    ids = set(re.findall(r'<h3 id="([^"]+)"', page))
    for name in sorted(set(refindex.__all__) - {"__version__"}):
        obj = getattr(refindex, name)
        assert f"{obj.__module__}.{obj.__qualname__}" in ids, f"docs/api.md does not document refindex.{name}"
        first = roles.plain(" ".join(obj.__doc__.split()).split(". ")[0]).replace("`", "")
        assert first[:40] in " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split()), name
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert not re.search(r":(func|class|mod|meth|attr|data|exc):", text), "a Sphinx role shows as written"


def test_strict_mode_fails_on_a_broken_link(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text(re.sub(r"(?m)^docs_dir:.*$", f"docs_dir: {docs}", config))
    proc = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0 and "missing.md" in proc.stdout + proc.stderr


def test_benchmarks_page_shows_every_chart():
    """A chart `make bench` draws (a new P-table included) is shown on docs/benchmarks.md."""
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    charts = sorted(p.name for p in (ROOT / "benchmarks" / "charts").glob("*.png"))
    assert charts, "benchmarks/charts/ is empty: run make charts"
    missing = [c for c in charts if f"(charts/{c})" not in page]
    assert not missing, f"docs/benchmarks.md does not show {missing}"
