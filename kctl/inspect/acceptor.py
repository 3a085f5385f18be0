"""The proxy's listeners and its acceptor's bookkeeping (Kafka's SocketServer ``Acceptor``).

How this works
--------------
``Listeners`` owns every listening socket of one proxy: one per upstream broker at
start (or one per virtual broker), and one more for each further broker a response
names (``port_for``, called by the response rewriter; thread-safe). ``accept`` takes
one connection from a readable listener and numbers it: ids follow accept order over
the whole proxy, so a connection's fault seed (``--seed`` with its id) does not depend
on which processor gets it. ``on_new_listener`` tells the driver that polls the
listeners about one made later.

Kafka runs one Acceptor thread per listener (endpoint); here one acceptor polls every
listener (one selector, in the parent's acceptor thread or the single processor's loop):
the proxy makes a listener per broker as the cluster names them, and a thread each
would buy nothing but threads.

With a fixed ``--listen`` port the first listener takes it and the next ones take
the ports after it (port+1, ...) when free, else any free port; the rewriter tells
clients the real ones.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kctl.errors import ConfigError
from kctl.inspect.processor import Address, Handoff


@dataclass(frozen=True, slots=True)
class ListenerInfo:
    address: Address
    upstream: Address
    node_id: int | None             # the virtual node id, in virtual-broker mode


class Listener:
    __slots__ = ("sock", "address", "upstream", "node_id")

    def __init__(self, sock: socket.socket, upstream: Address, node_id: int | None) -> None:
        self.sock = sock
        self.address: Address = sock.getsockname()[:2]
        self.upstream = upstream
        self.node_id = node_id


class Listeners:
    """Every listener of one proxy, and the connection ids of what they accept."""

    def __init__(self, host: str, port: int = 0) -> None:
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._all: list[Listener] = []
        self._by_upstream: dict[Address, Listener] = {}
        self._next_id = 0
        self.on_new_listener: Callable[[Listener], None] | None = None

    def add(self, upstream: Address, node_id: int | None = None) -> Listener:
        with self._lock:
            lst = self._bind(upstream, node_id)
            self._all.append(lst)
            self._by_upstream.setdefault(upstream, lst)
        if self.on_new_listener is not None:
            self.on_new_listener(lst)
        return lst

    def _bind(self, upstream: Address, node_id: int | None) -> Listener:
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        port = self.port + len(self._all) if self.port else 0
        try:
            sock.bind((self.host, port))
        except OSError as e:
            if not self._all:   # the port the user asked for
                sock.close()
                raise ConfigError(f"cannot listen on {self.host}:{port}: {e.strerror or e}") from None
            sock.bind((self.host, 0))
        sock.listen(512)
        sock.setblocking(False)
        return Listener(sock, upstream, node_id)

    def port_for(self, host: str, port: int) -> int:
        """The listener port forwarding to upstream ``host:port``, made on first use."""
        lst = self._by_upstream.get((host, port))
        if lst is None:
            with self._lock:
                lst = self._by_upstream.get((host, port))
            if lst is None:
                lst = self.add((host, port))
        return lst.address[1]

    def accept(self, lst: Listener) -> tuple[socket.socket, Handoff] | None:
        """One connection from a readable listener, with its id; ``None`` when none is there."""
        try:
            sock, addr = lst.sock.accept()
        except OSError:
            return None
        with self._lock:
            conn_id = self._next_id
            self._next_id += 1
        return sock, Handoff(conn_id, addr[:2], lst.address, lst.upstream)

    @property
    def all(self) -> list[Listener]:
        with self._lock:
            return list(self._all)

    def known(self) -> dict[Address, int]:
        """upstream -> listener port, for processors that rewrite responses elsewhere."""
        with self._lock:
            return {up: lst.address[1] for up, lst in self._by_upstream.items()}

    def close(self) -> None:
        with self._lock:
            for lst in self._all:
                lst.sock.close()
