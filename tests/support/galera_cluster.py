"""A MariaDB Galera cluster of a test's own: three ``mariadbd`` nodes with wsrep on, each with its
own datadir (``mariadb-install-db``), ports, socket and config file in a temp dir, the first
bootstrapped with ``--wsrep-new-cluster`` and the others joining it by state transfer (rsync,
or mariabackup when installed); the shared server on 3306 is never touched.

``cluster = GaleraCluster(3)`` returns once every node is Synced and ``wsrep_cluster_size`` is
3; ``cluster.kill(i)`` sends SIGKILL to a node, ``cluster.close()`` stops them all and removes
the temp dir. Without the binaries (or when the cluster does not come up) the test is skipped,
failed under CI=true, with what was missing or the node's last log lines.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pymysql
import pytest

from support.engines import in_ci

MARIADBD = "/usr/sbin/mariadbd"
PROVIDER = "/usr/lib/galera/libgalera_smm.so"
#: the OS user the nodes run as: the rsync daemon of a state transfer, started by a joiner
#: running as root, would switch to "nobody" and could not write the joiner's datadir
USER = "mysql"
#: how long one node may take to start (or to join by state transfer)
START_TIMEOUT = 90.0


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


class GaleraNode:
    """One node: its ports (client, group communication, IST, SST), datadir and process."""

    def __init__(self, base: Path, index: int, ports: list[int]) -> None:
        self.index = index
        self.port, self.gcomm, self.ist, self.sst = ports
        self.dir = base / f"node{index}"
        self.data = self.dir / "data"
        self.socket = self.dir / "mariadb.sock"
        self.cnf = self.dir / "my.cnf"
        self.log = self.dir / "error.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = f"127.0.0.1:{self.port}"

    def write_config(self, cluster_address: str, sst_method: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(exist_ok=True)
        for path in (self.dir, self.data):
            shutil.chown(path, USER, USER)
        provider_options = (
            f"base_port={self.gcomm}; gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm}; "
            f"ist.recv_addr=127.0.0.1:{self.ist}; gcache.size=32M; "
            # a killed node is declared gone within ~3 s, not the default ~5-15 s
            "evs.suspect_timeout=PT2S; evs.inactive_timeout=PT3S; evs.keepalive_period=PT0.5S; "
            "evs.inactive_check_period=PT0.5S; evs.install_timeout=PT3S"
        )
        self.cnf.write_text(
            "[mysqld]\n"
            f"datadir={self.data}\n"
            f"socket={self.socket}\n"
            f"pid-file={self.dir / 'mariadb.pid'}\n"
            f"log-error={self.log}\n"
            f"port={self.port}\n"
            "bind-address=127.0.0.1\n"
            f"user={USER}\n"
            "skip-name-resolve\n"
            "skip-log-bin\n"
            "binlog_format=ROW\n"
            "default_storage_engine=InnoDB\n"
            "innodb_autoinc_lock_mode=2\n"
            "innodb_buffer_pool_size=32M\n"
            "innodb_log_file_size=16M\n"
            "innodb_flush_log_at_trx_commit=0\n"
            "innodb_doublewrite=0\n"
            "performance_schema=OFF\n"
            "max_connections=300\n"
            "wsrep_on=ON\n"
            f"wsrep_provider={PROVIDER}\n"
            f"wsrep_provider_options='{provider_options}'\n"
            "wsrep_cluster_name=qgen_test\n"
            f"wsrep_cluster_address={cluster_address}\n"
            f"wsrep_node_name=node{self.index}\n"
            f"wsrep_node_address=127.0.0.1:{self.gcomm}\n"
            f"wsrep_node_incoming_address=127.0.0.1:{self.port}\n"
            f"wsrep_sst_receive_address=127.0.0.1:{self.sst}\n"
            f"wsrep_sst_method={sst_method}\n"
            "wsrep_slave_threads=2\n"
            "[client]\n"
            f"socket={self.socket}\n"
        )

    def install(self) -> None:
        done = subprocess.run(
            [
                "mariadb-install-db",
                f"--defaults-file={self.cnf}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                f"--user={USER}",
            ],
            capture_output=True,
            timeout=120,
        )
        if done.returncode != 0:
            out = (done.stdout + done.stderr).decode(errors="replace")
            raise RuntimeError(f"mariadb-install-db for node{self.index} failed: {out[-2000:]}")

    def start(self, bootstrap: bool = False) -> None:
        args = [MARIADBD, f"--defaults-file={self.cnf}"]
        if bootstrap:
            args.append("--wsrep-new-cluster")
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "stderr.txt", "ab"),  # noqa: SIM115 (the process keeps it)
            start_new_session=True,  # a Ctrl-C of pytest does not reach the node
        )

    def connect(self, timeout: float = 5) -> pymysql.connections.Connection:  # type: ignore[type-arg]
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            connect_timeout=timeout,
            read_timeout=timeout * 2,
            autocommit=True,
        )

    def status(self, name: str) -> str | None:
        """A wsrep status variable (``wsrep_local_state_comment`` …), None if unreachable."""
        try:
            with contextlib.closing(self.connect(timeout=2)) as c, c.cursor() as cur:
                cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
                row = cur.fetchone()
        except (pymysql.Error, OSError):  # pymysql.err may be a second copy (Django)
            return None
        return None if row is None else str(row[1])

    def wait_synced(self, size: int | None, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"node{self.index} exited {self.proc.returncode}: {self.tail()}")
            if self.status("wsrep_local_state_comment") == "Synced" and (
                size is None or self.status("wsrep_cluster_size") == str(size)
            ):
                return
            time.sleep(0.2)
        raise RuntimeError(f"node{self.index} not Synced within {timeout:.0f} s: {self.tail()}")

    def tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else "(no log)"
        return text[-3000:]

    def kill(self) -> None:
        """SIGKILL: no goodbye to the cluster, its clients' sockets reset."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 30) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class GaleraCluster:
    """``size`` nodes on free ports in a temp dir, all Synced; ``url(database, first)`` lists
    every node's host, node ``first`` first (a consumer's failover order)."""

    def __init__(self, size: int = 3) -> None:
        missing = [p for p in (MARIADBD, PROVIDER) if not os.path.exists(p)] + [
            t for t in ("mariadb-install-db",) if shutil.which(t) is None
        ]
        sst = "mariabackup" if shutil.which("mariabackup") else "rsync"
        if sst == "rsync" and shutil.which("rsync") is None:
            missing.append("rsync (or mariabackup) for state transfer")
        try:
            pwd.getpwnam(USER)
        except KeyError:
            missing.append(f"an OS user {USER!r} to run the nodes as")
        if os.geteuid() != 0:
            missing.append(f"root (to start the nodes as {USER!r})")
        if missing:
            _unavailable(f"a Galera cluster needs {', '.join(missing)}")
        self.base = Path(tempfile.mkdtemp(prefix="qgen-galera-"))
        os.chmod(self.base, 0o755)
        ports = _free_ports(4 * size)
        self.nodes = [GaleraNode(self.base, i, ports[4 * i : 4 * i + 4]) for i in range(size)]
        address = "gcomm://" + ",".join(f"127.0.0.1:{n.gcomm}" for n in self.nodes)
        try:
            for node in self.nodes:
                node.write_config(address, sst)
            # only the first node needs system tables: the others receive its datadir
            self.nodes[0].install()
            self.nodes[0].start(bootstrap=True)
            self.nodes[0].wait_synced(1)
            for i, node in enumerate(self.nodes[1:], start=2):
                node.start()  # one at a time: an rsync donor serves one joiner
                node.wait_synced(i)
        except BaseException as exc:
            self.close()
            if isinstance(exc, RuntimeError):
                _unavailable(f"the Galera cluster did not start: {exc}")
            raise

    def url(self, database: str, first: int = 0, scheme: str = "mariadb") -> str:
        order = self.nodes[first:] + self.nodes[:first]
        return f"{scheme}://root@{','.join(n.host for n in order)}/{database}"

    def node_url(self, i: int, database: str) -> str:
        return f"mariadb://root@{self.nodes[i].host}/{database}"

    def sql(self, i: int, statement: str) -> list[tuple[object, ...]]:
        with contextlib.closing(self.nodes[i].connect()) as c, c.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())

    def kill(self, i: int) -> None:
        self.nodes[i].kill()

    def wait_size(self, size: int, timeout: float = 30) -> None:
        """Until every live node sees a cluster of ``size`` (a killed node's loss noticed)."""
        for node in self.nodes:
            if node.alive:
                node.wait_synced(size, timeout)

    def close(self) -> None:
        for node in reversed(self.nodes):
            with contextlib.suppress(Exception):
                node.stop()
        shutil.rmtree(self.base, ignore_errors=True)
