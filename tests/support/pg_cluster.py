"""PostgreSQL clusters of a test's own: initdb (or pg_basebackup from another one, for a streaming
standby) in a temp dir with the installed binaries, run as the postgres OS user on a free port,
so a test can restart, stop or promote them; the shared server is never touched."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import runtime
from support.engines import in_ci

_TEMPLATES: dict[Path, Path] = {}


def _initdb_template(bindir: Path, user: pwd.struct_passwd) -> Path:
    """A data directory initdb made once per run (per binaries), for clusters to copy; removed
    when the run ends."""
    if bindir not in _TEMPLATES:
        base = Path(tempfile.mkdtemp(prefix="qgen-pg-template-"))
        atexit.register(shutil.rmtree, base, ignore_errors=True)
        os.chmod(base, 0o755)
        os.chown(base, user.pw_uid, user.pw_gid)
        cmd = [shutil.which("runuser") or "runuser", "-u", "postgres", "--"]
        cmd += [str(bindir / "initdb"), "-D", str(base / "data"), "-U", "postgres", "-A", "trust"]
        done = subprocess.run([*cmd, "--no-sync"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"initdb: {(done.stdout + done.stderr)[-2000:]}"
        _TEMPLATES[bindir] = base / "data"
    return _TEMPLATES[bindir]


class PrivatePostgres:
    """A cluster of the test's own; ``standby_of``: a streaming standby of that cluster (named
    ``name`` for synchronous_standby_names), started from its base backup."""

    def __init__(self, standby_of: PrivatePostgres | None = None, name: str = "primary") -> None:
        bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[4]))
        self.runuser = shutil.which("runuser")
        if not bindirs or self.runuser is None or os.geteuid() != 0:
            reason = "needs initdb/pg_ctl (/usr/lib/postgresql/*/bin), runuser and root"
            if in_ci():
                pytest.fail(reason, pytrace=False)
            pytest.skip(reason)
        self.bin = Path(bindirs[-1])
        self.name = name
        user = pwd.getpwnam("postgres")
        self.base = Path(tempfile.mkdtemp(prefix=f"qgen-pg-{name}-"))
        try:
            os.chmod(self.base, 0o755)
            os.chown(self.base, user.pw_uid, user.pw_gid)
            self.data = self.base / "data"
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            self.host = f"127.0.0.1:{self.port}"
            self.url = f"postgresql://postgres@{self.host}/postgres"
            if standby_of is None:
                # a copy of one initdb per run: initdb takes seconds, the copy a fraction
                subprocess.run(
                    ["cp", "-a", str(_initdb_template(self.bin, user)), str(self.data)],
                    check=True,
                    timeout=120,
                )
            else:
                self._pg(
                    "pg_basebackup", "-D", self.data, "-h", "127.0.0.1", "-p", standby_of.port,
                    "-U", "postgres", "-X", "stream", "-R", "--no-sync",
                )  # fmt: skip
                with open(self.data / "postgresql.auto.conf", "a") as conf:
                    conf.write(
                        f"primary_conninfo = 'host=127.0.0.1 port={standby_of.port} "
                        f"user=postgres application_name={name}'\n"
                    )
            opts = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off"
            self.ctl("start", "-o", opts)
        except BaseException:
            shutil.rmtree(self.base, ignore_errors=True)
            raise

    def _pg(self, tool: str, *args: object) -> None:
        cmd = [self.runuser, "-u", "postgres", "--", str(self.bin / tool), *map(str, args)]
        # output to a file, not a pipe: the server pg_ctl starts would hold a pipe open
        with open(self.base / f"{tool}.out", "a+") as out:
            done = subprocess.run(cmd, stdout=out, stderr=out, timeout=120)
            out.seek(0)
            assert done.returncode == 0, f"{tool} {args}: {out.read()[-2000:]}"

    def ctl(self, action: str, *args: object) -> None:
        logfile = ("-l", self.base / "log") if action in ("start", "restart") else ()
        self._pg("pg_ctl", "-D", self.data, "-w", action, *logfile, *args)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ctl("stop", "-m", "immediate")
        shutil.rmtree(self.base, ignore_errors=True)


async def sync_replication(primary: PrivatePostgres, standby: str) -> None:
    """Make the primary wait for ``standby`` at every commit, and wait until it does."""
    async with await runtime.connect(primary.url) as conn:
        await conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{standby}'")
        await conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 60
        while True:
            row = await conn.fetchone(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = %(name)s",
                {"name": standby},
            )
            if row is not None and row["sync_state"] == "sync":
                return
            assert time.monotonic() < deadline, f"the standby is not synchronous: {row}"
            await asyncio.sleep(0.1)
