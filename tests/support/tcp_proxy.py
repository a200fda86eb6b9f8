"""A TCP forwarder for tests that need the database to go away: a network cut on demand.

``TcpProxy(url)`` listens on 127.0.0.1 on a free port and forwards every connection to the
server the URL names; ``proxy.url`` is the same URL through the proxy. ``cut()`` closes every
connection it carries (both sides: the server sees its client go and rolls back, releases
locks) and, until ``heal()``, answers new ones by closing them at once ("refuse") or by
accepting and never forwarding a byte ("blackhole": the client waits for its connect
timeout). ``outage(seconds)`` is a cut healed after ``seconds``. ``stall()`` is a silent
partition: every connection stays open but nothing reaches the other side any more, and new
ones are black-holed, until ``heal()`` (the bytes sent meanwhile are lost). The proxy runs its own event
loop on a thread, so it keeps forwarding while the test's loop (or another process) is busy.

``upstream_ports()`` gives the local ports of its connections to the server: the client port
the server shows for each session (pg_stat_activity.client_port, PROCESSLIST.HOST), which
picks out exactly the sessions that came through this proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from urllib.parse import urlsplit, urlunsplit

_DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306}


class TcpProxy:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or _DEFAULT_PORTS[parts.scheme])
        self._parts = parts
        # None: forwarding; "refuse" / "blackhole": cut; "stall": connections kept, bytes dropped
        self.mode: str | None = None
        self.cuts = 0
        self._loop = asyncio.new_event_loop()
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        # black-holed clients, forwarded when the cut heals (their SYN finally answered)
        self._held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._heal_timer: asyncio.TimerHandle | None = None
        self.port = 0

    # ------------------------------------------------------------ the test's side

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    @property
    def url(self) -> str:
        """The URL the proxy was made for, pointed at the proxy."""
        p = self._parts
        userinfo = p.netloc.rsplit("@", 1)[0] + "@" if "@" in p.netloc else ""
        return urlunsplit(
            (p.scheme, f"{userinfo}127.0.0.1:{self.port}", p.path, p.query, p.fragment)
        )

    def cut(self, mode: str = "refuse") -> None:
        """Close every current connection; answer new ones by ``mode`` until heal()."""
        if mode not in ("refuse", "blackhole"):
            raise ValueError(f"unknown cut mode {mode!r}")
        self.cuts += 1
        self._call(self._cut(mode))

    def stall(self) -> None:
        """A silent partition: open connections stay open, every byte is dropped, new ones
        are black-holed; until heal(). No side hears of it: a half-open connection."""
        self.mode = "stall"

    def heal(self) -> None:
        self._call(self._heal())

    def outage(self, seconds: float, mode: str = "refuse") -> None:
        """A cut now, healed ``seconds`` later (returns at once)."""
        self.cuts += 1
        self._call(self._cut(mode, heal_after=seconds))

    def upstream_ports(self) -> set[int]:
        return self._call(self._ports())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    # ------------------------------------------------------------ the proxy's loop

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _ports(self) -> set[int]:
        ports = set()
        for _, upstream in self._pairs:
            sock = upstream.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    ports.add(sock.getsockname()[1])
        return ports

    async def _cut(self, mode: str, heal_after: float | None = None) -> None:
        self.mode = mode
        for client, upstream in list(self._pairs):
            _abort(client)
            _abort(upstream)
        self._pairs.clear()
        if self._heal_timer is not None:
            self._heal_timer.cancel()
            self._heal_timer = None
        if heal_after is not None:
            self._heal_timer = self._loop.call_later(
                heal_after, lambda: self._loop.create_task(self._heal())
            )

    async def _heal(self) -> None:
        self.mode = None
        self._heal_timer = None
        held, self._held = self._held, []
        for reader, writer in held:
            if not writer.is_closing():
                self._loop.create_task(self._forward(reader, writer))

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut("refuse")
        for _, writer in self._held:
            _abort(writer)
        self._held.clear()
        # every forwarding task ends here, not as "destroyed but pending" when the loop is
        # collected (asyncio logs that at ERROR, into whichever test runs then)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            _abort(writer)
            return
        if self.mode in ("blackhole", "stall"):
            self._held.append((reader, writer))
            return
        await self._forward(reader, writer)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if self.mode == "stall":
                    continue  # a silent partition: the bytes are lost
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if self.mode != "stall":  # a partition hides the close too
                writer.close()  # the other side closed: pass its close on, after what it sent

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        if self.mode is not None:  # cut while connecting
            _abort(writer)
            _abort(up_writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            self._pairs.discard(pair)
            _abort(writer)
            _abort(up_writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close at once (RST, not a graceful FIN after pending data): a cable pulled."""
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
