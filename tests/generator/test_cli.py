"""The qgen command: render writes <out>/<dialect>/<queue>.sql deterministically, check catches
stale or edited files with a diff, init writes a starter that renders, --help works."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from qgen.cli import STARTER, main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "generated_examples"

DECL = """\
dialects = ["postgres", "mysql", "mariadb", "sqlite"]
out = "rendered"

[queues.orders]
table = "orders_queue"
max_attempts = 3
dead_letter = { group = "orders_dead" }

[queues.orders.columns]
id = "id"
payload = "body"
group = "queue"
attempt = "attempt"
retry_after = "retry_after"
locked_until = "locked_until"

[queues.audit]
table = "audit_queue"
form = "row_lock"

[queues.audit.columns]
id = "id"
payload = "entry"
"""
EXPECTED_FILES = sorted(
    f"rendered/{d}/{q}.sql"
    for d in ("postgres", "mysql", "mariadb", "sqlite")
    for q in ("orders", "audit")
)


def qgen(*args: str, cwd: Path | None = None, seed: str = "0") -> subprocess.CompletedProcess[str]:
    """The installed command in a fresh process (its own hash seed)."""
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run(
        [sys.executable, "-m", "qgen.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "qgen.toml").write_text(DECL, encoding="utf-8")
    return tmp_path


def test_render_writes_one_file_per_queue_and_dialect(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "--config", str(project / "qgen.toml")]) == 0
    files = tree(project / "rendered")
    assert sorted(f"rendered/{p}" for p in files) == EXPECTED_FILES
    out = capsys.readouterr().out
    assert out.count("wrote ") == 8
    for name, data in files.items():
        dialect, queue = name.removesuffix(".sql").split("/")
        text = data.decode()
        assert text.startswith("-- DO NOT EDIT")
        assert f'\n-- queue: "{queue}"\n-- dialect: "{dialect}"\n' in text
        assert "\n-- name: schema\n" in text and "\n-- name: claim\n" in text
    # a second render changes nothing and says so
    assert main(["render", "--config", str(project / "qgen.toml")]) == 0
    assert capsys.readouterr().out.count("unchanged ") == 8
    assert tree(project / "rendered") == files


def test_render_is_deterministic_across_processes(tmp_path: Path) -> None:
    """Two processes with different hash seeds write the same bytes."""
    runs = []
    for seed in ("1", "2"):
        d = tmp_path / seed
        d.mkdir()
        (d / "qgen.toml").write_text(DECL, encoding="utf-8")
        proc = qgen("render", cwd=d, seed=seed)
        assert proc.returncode == 0, proc.stderr
        runs.append(tree(d / "rendered"))
    assert len(runs[0]) == 8
    assert runs[0] == runs[1]


def test_output_carries_no_version_or_date(project: Path) -> None:
    assert main(["render", "--config", str(project / "qgen.toml")]) == 0
    versions = {importlib.metadata.version(p) for p in ("qgen-sql", "sqlglot", "Jinja2")}
    for name, data in tree(project / "rendered").items():
        text = data.decode()
        for v in versions:
            assert v not in text, (name, v)
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), name
        assert str(project) not in text, name  # no absolute paths either


def test_render_one_dialect(project: Path) -> None:
    assert main(["render", "--config", str(project / "qgen.toml"), "--dialect", "sqlite"]) == 0
    assert sorted(tree(project / "rendered")) == ["sqlite/audit.sql", "sqlite/orders.sql"]


def test_render_dialect_not_declared(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "qgen.toml").write_text(DECL.replace('"mariadb", "sqlite"', '"mariadb"'))
    assert main(["render", "--config", str(project / "qgen.toml"), "-d", "sqlite"]) == 2
    err = capsys.readouterr().err
    assert "'sqlite' is not in the declaration's dialects" in err
    assert len(err.strip().splitlines()) == 1
    assert not (project / "rendered").exists()


def test_render_stdout_writes_no_files(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["render", "--config", str(project / "qgen.toml"), "--stdout", "-d", "postgres"]) == 0
    )
    out = capsys.readouterr().out
    assert not (project / "rendered").exists()
    headers = re.findall(r"^-- file: (.*)$", out, re.M)
    assert sorted(Path(h).relative_to(project).as_posix() for h in headers) == [
        "rendered/postgres/audit.sql",
        "rendered/postgres/orders.sql",
    ]
    # the printed text is exactly what render would write
    assert main(["render", "--config", str(project / "qgen.toml"), "-d", "postgres"]) == 0
    written = (project / "rendered/postgres/orders.sql").read_text()
    assert f"-- file: {project / 'rendered/postgres/orders.sql'}\n{written}\n" in out


def test_render_out_replaces_the_declarations_folder(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    assert main(["render", "--config", str(project / "qgen.toml"), "--out", str(elsewhere)]) == 0
    assert sorted(tree(elsewhere)) == sorted(p.removeprefix("rendered/") for p in EXPECTED_FILES)
    assert not (project / "rendered").exists()
    # and check reads the same folder
    assert main(["check", "--config", str(project / "qgen.toml"), "--out", str(elsewhere)]) == 0


def test_out_is_relative_to_the_declaration_not_the_cwd(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "cwd"
    other.mkdir()
    monkeypatch.chdir(other)
    assert main(["render", "--config", str(project / "qgen.toml"), "-d", "mysql"]) == 0
    assert (project / "rendered/mysql/orders.sql").is_file()
    assert not (other / "rendered").exists()


# ----------------------------------------------------------------------- check


def test_check_clean_after_render(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(project / "qgen.toml")
    assert main(["render", "--config", cfg]) == 0
    capsys.readouterr()
    assert main(["check", "--config", cfg]) == 0
    assert "8 files up to date" in capsys.readouterr().out


def test_check_fails_with_a_diff_on_a_hand_edit(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(project / "qgen.toml")
    assert main(["render", "--config", cfg]) == 0
    edited = project / "rendered/postgres/orders.sql"
    text = edited.read_text()
    assert 'WHERE "id" = %(id)s AND "locked_until" = %(token)s;' in text
    edited.write_text(text.replace(' AND "locked_until" = %(token)s;', ";", 1))
    capsys.readouterr()
    assert main(["check", "--config", cfg]) == 1
    out, err = capsys.readouterr()
    assert f"--- {edited} (on disk)\n+++ {edited} (rendered)\n" in out
    assert re.search(r'^-WHERE "id" = %\(id\)s;$', out, re.M), out
    assert re.search(r'^\+WHERE "id" = %\(id\)s AND "locked_until" = %\(token\)s;$', out, re.M)
    assert "1 of 8 files are stale" in err and "run `qgen render`" in err
    # check never writes
    assert edited.read_text() != text


def test_check_fails_when_a_file_is_missing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(project / "qgen.toml")
    assert main(["render", "--config", cfg]) == 0
    missing = project / "rendered/sqlite/audit.sql"
    missing.unlink()
    capsys.readouterr()
    assert main(["check", "--config", cfg]) == 1
    out, err = capsys.readouterr()
    assert f"+++ {missing} (rendered)" in out
    assert "+-- DO NOT EDIT" in out
    assert "1 of 8 files are stale" in err
    assert not missing.exists()


def test_check_fails_when_the_declaration_changed(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = project / "qgen.toml"
    assert main(["render", "--config", str(cfg)]) == 0
    cfg.write_text(DECL.replace("max_attempts = 3", "max_attempts = 4"))
    capsys.readouterr()
    assert main(["check", "--config", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert "--- " in out and "-- max_attempts: 3" in out and "+-- max_attempts: 4" in out


def test_check_exit_codes_from_a_real_process(project: Path) -> None:
    assert qgen("render", cwd=project).returncode == 0
    assert qgen("check", cwd=project).returncode == 0
    (project / "rendered/mariadb/orders.sql").write_text("-- DO NOT EDIT\n")
    proc = qgen("check", cwd=project)
    assert proc.returncode == 1
    assert "rendered/mariadb/orders.sql (rendered)" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_generated_examples_are_fresh() -> None:
    proc = qgen("check", "--config", str(EXAMPLES / "qgen.toml"), cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert "up to date" in proc.stdout
    n = len(list((EXAMPLES / "sql").rglob("*.sql")))
    assert f"qgen check: {n} files up to date" in proc.stdout


# ----------------------------------------------------------------------- init


def test_init_writes_a_starter_that_renders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "qgen.toml"
    assert main(["init", "--config", str(cfg)]) == 0
    assert cfg.read_text() == STARTER
    assert main(["render", "--config", str(cfg)]) == 0
    assert sorted(tree(tmp_path / "sql")) == ["postgres/orders.sql", "sqlite/orders.sql"]
    assert main(["check", "--config", str(cfg)]) == 0
    # the starter's queue has retry_after, so a Consumer given no policy backs off
    import runtime

    for dialect in ("postgres", "sqlite"):
        queue = runtime.load(tmp_path / "sql" / dialect / "orders.sql")
        assert queue.rendered.get("retry_after") and "retry_after" in queue.columns
    # the commented-out examples in the starter are valid too once uncommented
    uncommented = re.sub(r"^# (\[queues\.orders\.|drop = |default = )", r"\1", STARTER, flags=re.M)
    assert uncommented != STARTER
    cfg.write_text(uncommented)
    capsys.readouterr()
    assert main(["render", "--config", str(cfg)]) == 0, capsys.readouterr().err
    assert "-- name: custom.park" in (tmp_path / "sql/postgres/orders.sql").read_text()


def test_init_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "qgen.toml"
    cfg.write_text("# mine\n")
    assert main(["init", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert cfg.read_text() == "# mine\n"
    assert main(["init", "--config", str(cfg), "--force"]) == 0
    assert cfg.read_text() == STARTER


def test_init_in_cwd_from_a_real_process(tmp_path: Path) -> None:
    proc = qgen("init", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "qgen.toml").read_text() == STARTER
    proc = qgen("render", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sql/postgres/orders.sql").is_file()


# ----------------------------------------------------------------------- help


@pytest.mark.parametrize(
    "args",
    [["--help"], ["render", "--help"], ["check", "--help"], ["init", "--help"]],
    ids=lambda a: " ".join(a),
)
def test_help(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: qgen")
    if args == ["render", "--help"]:
        for option in ("--config", "--dialect", "--out", "--stdout"):
            assert option in out


def test_help_from_the_console_script() -> None:
    exe = Path(sys.executable).with_name("qgen")
    if not exe.exists():
        pytest.skip("the qgen console script is not installed next to this python")
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "render" in proc.stdout and "check" in proc.stdout and "init" in proc.stdout


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage: qgen" in capsys.readouterr().err
