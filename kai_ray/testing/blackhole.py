"""A TCP relay in front of a server that a test can turn into a black hole: every
connection through it, open or new, stops carrying bytes either way while the peers stay
connected, as when a network path drops packets without resetting anything. One client
behind it loses the server; the rest, connected directly, do not."""

from __future__ import annotations

import contextlib
import select
import socket
import threading

__all__ = ["BlackHole"]


class BlackHole:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._hung = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="blackhole-accept").start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def hang(self) -> None:
        """From now on nothing passes: requests sent are never answered."""
        self._hung.set()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self._hung.is_set():
                continue  # accepted, never answered
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            self._sockets.append(server)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([a, b], [], [], 0.2)
            except (OSError, ValueError):
                return
            if self._hung.is_set():
                self._hung_until_closed()
                return
            for s in ready:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    a.close()
                    b.close()
                    return
                try:
                    peers[s].sendall(data)
                except OSError:
                    return

    def _hung_until_closed(self) -> None:
        """Keep both ends open and read nothing: the peers' writes fill the buffers and
        their reads wait, as behind a path that drops every packet."""
        self._closed.wait()
