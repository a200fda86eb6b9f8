"""Every fenced code block of README.md, CONTRIBUTING.md, CHANGELOG.md and docs/ runs here.

One test per page: the page's blocks run in order, in a fresh folder of its own, so a page
reads as one session (a file written by one block is there for the next, a name a python
block defines is there for the next python block). The convention, also described in
CONTRIBUTING.md ("Code blocks in the docs"):

- ``python``: executed in the page's namespace; top-level ``await`` runs on the page's event
  loop (so a connection opened by one block serves the next).
- ``sh``: run by ``bash -e`` in the page's folder, with this interpreter's ``bin`` first on
  PATH (``qgen`` and ``python`` are the ones under test); must exit 0.
- ``console``: each ``$ `` line is a command, run as ``sh``; the lines after it are expected
  output: each must appear in what the command printed, a ``…`` standing for any text.
- ``toml``: must parse; ``sql``: must be annotated.

Annotations are HTML comments on the lines just before a block:

- ``<!-- file: PATH -->`` writes the block to PATH in the page's folder instead of running it.
- ``<!-- exit: N -->`` (sh, console): the command's expected exit status.
- ``<!-- stop-after: S -->`` (sh): a command that runs until stopped (a worker): it gets
  SIGTERM after S seconds and must then exit 0.
- ``<!-- rendered: PATH -->`` (sql): every line of the block without ``…`` appears in the
  rendered file PATH, in the same order.
- ``<!-- pending: FEATURE -->``: the block documents a feature not merged yet; skipped.
- ``<!-- cwd: repo -->`` (sh, console): run in the repository's root (read-only checks only).

Databases: the URL ``postgresql://postgres@127.0.0.1:5432/test`` in a block is replaced by
``QGEN_TEST_POSTGRES_URL`` (a schema of its own per page), ``mysql://root@127.0.0.1:3306/test``
by ``QGEN_TEST_MYSQL_URL`` (a MariaDB server here). A page reaching such a block without that
server is skipped from there on (failed under CI=true). A few commands are shown but never run
(NOT_RUN below, each with its reason).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import types
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from support.engines import engine_url, in_ci, require

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "CHANGELOG.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
)

#: the URLs the docs show, and the engine each stands for in the tests
DOC_URLS = {
    "postgresql://postgres@127.0.0.1:5432/test": "postgres",
    "mysql://root@127.0.0.1:3306/test": "mysql",
}

#: blocks shown but never run: the whole text of the block → why
NOT_RUN = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[generator,sqlite]' "
    "&& qgen demo": "creates a virtualenv and installs from the network; the tutorial runs "
    "`qgen demo` itself",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' "
    "&& python -m pytest": "installs, then runs this whole test suite (which runs this test)",
    "pip install 'qgen-sql[generator,postgres]'": "installs from the package index; the "
    "tests run in an environment that has it",
    (
        "import django\n"
        "from django.conf import settings\n"
        "\n"
        "# a Django project has this in its settings.py\n"
        "settings.configure(\n"
        '    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "shop.db"}}\n'
        ")\n"
        "django.setup()\n"
        "\n"
        "from django.db import connection, transaction\n"
        "\n"
        "with transaction.atomic():\n"
        "    with connection.cursor() as cursor:\n"
        '        cursor.execute("INSERT INTO orders (item) VALUES (%s)", ["tea"])\n'
        '    sqlite_queue.sync.enqueue(connection, {"order": "tea"})'
    ): "configures Django's process-wide settings once for the whole test process, "
    "which would leave the Django tests unable to configure theirs; "
    "tests/engines/test_service_connections.py runs these calls on every engine",
}

#: the features a `<!-- pending: … -->` block may name (landing from other branches); add
#: the name here with the block, and remove both once the feature is merged
PENDING: set[str] = set()

LANGUAGES = {"python", "sh", "console", "toml", "sql"}
_FENCE = re.compile(r"```(.*)")
_NOTE = re.compile(r"<!-- ([a-z-]+)(?:: (.*?))? -->")
_NOTES = {"file", "exit", "stop-after", "rendered", "pending", "cwd"}


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    text: str
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with the annotations just before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.fullmatch(lines[i])
        if fence is None:
            i += 1
            continue
        notes: dict[str, str] = {}
        j = i - 1
        while j >= 0 and (note := _NOTE.fullmatch(lines[j].strip())):
            notes[note.group(1)] = note.group(2) or ""
            j -= 1
        end = i + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        assert end < len(lines), f"{page.relative_to(ROOT)}:{i + 1}: unclosed code block"
        out.append(
            Block(page, i + 1, fence.group(1).strip(), "\n".join(lines[i + 1 : end]) + "\n", notes)
        )
        i = end + 1
    return out


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_block_follows_the_convention() -> None:
    """Languages and annotations are the known ones, no fence hides in an indent, and every
    NOT_RUN entry is still shown somewhere (a stale entry would excuse nothing)."""
    shown: set[str] = set()
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            assert not re.match(r"\s+```", line), (
                f"{_page_id(page)}:{n}: an indented fence is not run: put code blocks at the "
                "start of a line"
            )
        for block in blocks_of(page):
            assert block.lang in LANGUAGES, (
                f"{block.where}: code block language {block.lang!r}: use one of "
                f"{', '.join(sorted(LANGUAGES))}"
            )
            assert set(block.notes) <= _NOTES, f"{block.where}: unknown annotation {block.notes}"
            assert block.notes.get("cwd", "repo") == "repo", f"{block.where}: cwd: repo only"
            if "pending" in block.notes:
                assert block.notes["pending"] in PENDING, (
                    f"{block.where}: pending feature {block.notes['pending']!r}; known: "
                    f"{', '.join(sorted(PENDING))}"
                )
            if block.lang == "sql":
                assert {"rendered", "file", "pending"} & set(block.notes), (
                    f"{block.where}: a sql block needs <!-- rendered: PATH --> or <!-- file: PATH -->"
                )
            shown.add(block.text.strip())
    assert set(NOT_RUN) <= shown, f"NOT_RUN lists blocks no page shows: {set(NOT_RUN) - shown}"
    assert len(NOT_RUN) <= 4, "keep the blocks that are not run few"


def test_pending_blocks_are_listed() -> None:
    """The pending blocks, printed for whoever merges the features (pytest -s)."""
    for page in PAGES:
        for block in blocks_of(page):
            if "pending" in block.notes:
                print(f"pending {block.notes['pending']}: {block.where}")


class Session:
    """One page's run: its folder, its python namespace and event loop, its database URLs."""

    def __init__(self, page: Path, folder: Path) -> None:
        self.page, self.folder = page, folder
        # a module of its own in sys.modules, as a reader's script is: a dataclass defined in
        # a block resolves its annotations there (this file's `from __future__ import
        # annotations` reaches the blocks, so they are strings)
        self.module = types.ModuleType("__docs__")
        sys.modules["__docs__"] = self.module
        self.namespace: dict[str, object] = self.module.__dict__
        self.loop = asyncio.new_event_loop()
        self.urls: dict[str, str] = {}

    def close(self) -> None:
        self.loop.close()
        if sys.modules.get("__docs__") is self.module:
            del sys.modules["__docs__"]
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None) or ""
            if file.startswith(str(self.folder)):
                del sys.modules[name]

    # ---------------------------------------------------------------- databases

    def substitute(self, text: str) -> str:
        for doc_url, engine in DOC_URLS.items():
            if doc_url in text:
                text = text.replace(doc_url, self._url(engine))
        return text

    def _url(self, engine: str) -> str:
        if engine not in self.urls:
            require(engine)  # skips the rest of the page (fails under CI=true)
            url = engine_url(engine, self.folder)
            if engine == "postgres":
                url = _own_schema(
                    url, "docs_" + re.sub(r"\W", "_", _page_id(self.page).lower())[:40]
                )
            else:
                _drop_declared_tables(url, self.page)
            self.urls[engine] = url
        return self.urls[engine]

    # ---------------------------------------------------------------- blocks

    def run(self, block: Block) -> None:
        if "file" in block.notes:
            path = self.folder / block.notes["file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.substitute(block.text), encoding="utf-8")
            if path.suffix == ".py":  # the page's module, not one of that name imported before
                sys.modules.pop(path.stem, None)
            return
        getattr(self, f"run_{block.lang}")(block)

    def run_python(self, block: Block) -> None:
        if block.text.strip() in NOT_RUN:
            return
        source = self.substitute(block.text)
        code = compile(source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, self.namespace)
        if inspect.iscoroutine(result):
            self.loop.run_until_complete(result)

    def run_sh(self, block: Block) -> None:
        self._shell(block, block.text)

    def run_console(self, block: Block) -> None:
        command: str | None = None
        expected: list[str] = []
        for line in [*block.text.splitlines(), "$ "]:
            if line.startswith("$ "):
                if command:
                    output = self._shell(block, command)
                    for want in expected:
                        pattern = ".*".join(re.escape(part) for part in want.strip().split("…"))
                        assert re.search(pattern, output), (
                            f"{block.where}: `{command}` printed no line with {want.strip()!r}; "
                            f"it printed:\n{output}"
                        )
                command, expected = line[2:], []
            elif line.strip() not in ("", "…"):
                expected.append(line)

    def _shell(self, block: Block, command: str) -> str:
        if block.text.strip() in NOT_RUN:
            return ""
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        proc = subprocess.Popen(
            ["bash", "-e", "-c", self.substitute(command)],
            cwd=ROOT if block.notes.get("cwd") == "repo" else self.folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        stop_after = block.notes.get("stop-after")
        try:
            output, _ = proc.communicate(timeout=float(stop_after) if stop_after else 120)
        except subprocess.TimeoutExpired:
            if not stop_after:
                os.killpg(proc.pid, signal.SIGKILL)
                raise
            os.killpg(proc.pid, signal.SIGTERM)
            output, _ = proc.communicate(timeout=60)
        want = int(block.notes.get("exit", "0"))
        assert proc.returncode == want, (
            f"{block.where}: `{command.strip()}` exited {proc.returncode}, not {want}:\n{output}"
        )
        print(output)
        return output

    def run_toml(self, block: Block) -> None:
        tomllib.loads(block.text)

    def run_sql(self, block: Block) -> None:
        rendered = (self.folder / block.notes["rendered"]).read_text(encoding="utf-8")
        lines = iter(rendered.splitlines())
        for want in block.text.splitlines():
            if "…" in want:
                continue
            assert any(line == want for line in lines), (
                f"{block.where}: {want!r} is not in {block.notes['rendered']} (in this order)"
            )


def _own_schema(url: str, schema: str) -> str:
    """``url`` with its search_path on a fresh schema ``schema`` (dropped and created)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{schema}"')
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, f"options={quote(f'-csearch_path={schema}')}") if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def _drop_declared_tables(url: str, page: Path) -> None:
    """Drop the tables the page's declarations name, so the page starts from empty tables."""
    from support.engines import drop_tables, run

    tables: set[str] = set()
    for block in blocks_of(page):
        if block.lang == "toml":
            tables.update(re.findall(r'table = "([A-Za-z0-9_.]+)"', block.text))
        if block.lang == "python":
            tables.update(
                re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?([A-Za-z0-9_]+)", block.text)
            )
    run(drop_tables(url, *sorted(tables)))


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's blocks run in order in a folder of their own, as a reader would run them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    session = Session(page, tmp_path)
    try:
        for block in blocks_of(page):
            if "pending" in block.notes:
                continue
            session.run(block)
    finally:
        session.close()


def test_links_outside_the_site_resolve() -> None:
    """README.md, CONTRIBUTING.md and CHANGELOG.md are not in the site (mkdocs checks the
    links of docs/): each of their relative links names a file of the repository."""
    for page in (ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{_page_id(page)}: link to missing {target}"


def test_site_builds(tmp_path: Path) -> None:
    """mkdocs.yml builds the site from docs/ with warnings as errors (a broken link fails)."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        message = "mkdocs is not installed; install it with: pip install -e '.[docs]'"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    proc = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
