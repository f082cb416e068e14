"""A TCP proxy between Kafka clients and a broker that can take the broker "down".

The broker advertises the proxy's port, so every client connection goes through it. `outage()`
closes every open connection and refuses new ones until `restore()`: to clients this is a
broker that went away and came back. `stall()` is the nastier outage: open connections stay
open but never carry another byte (a host gone without a reset, a half-open connection), new
ones are refused until `restore()`; clients find out only from their own request timeouts.
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    """Forward 127.0.0.1:<port> to `upstream_port`; `outage()` / `restore()` cut and heal it."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", port))
        self.port = port
        self.down = threading.Event()
        self.stalled: set[socket.socket] = set()
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        self.bytes = 0
        self.closed = False
        self.refusing = False

    def start(self) -> "TcpProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down.is_set() or self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.connections += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data or self.down.is_set():
                    break
                if source in self.stalled or target in self.stalled:
                    continue  # swallowed: the connection looks open and never answers
                self.bytes += len(data)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.close()
                except OSError:
                    pass

    def outage(self) -> None:
        """Drop every connection and refuse new ones."""
        self.down.set()
        with self.lock:
            for sock in self.connections:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
                except OSError:
                    pass
            self.connections.clear()

    def stall(self) -> None:
        """Keep every open connection open but silent forever, and refuse new ones."""
        with self.lock:
            self.stalled.update(self.connections)
            self.connections.clear()
            self.refusing = True

    def restore(self) -> None:
        """Accept and forward new connections again (stalled ones stay silent)."""
        self.refusing = False
        self.down.clear()

    def close(self) -> None:
        self.closed = True
        with self.lock:
            self.connections.extend(self.stalled)
            self.stalled.clear()
        self.outage()
        self.listener.close()
