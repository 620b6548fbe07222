"""The regions scenario's relay: every byte arrives, in order, and a round trip through it
takes at least the two delays."""

from __future__ import annotations

import socket
import threading
import time

from rebound_bench.tools.relay import DelayedRelay


def echo_server() -> tuple[socket.socket, int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while chunk := conn.recv(65536):
                conn.sendall(chunk)

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def test_bytes_go_through_in_order_and_each_way_is_delayed() -> None:
    listener, port = echo_server()
    relay = DelayedRelay(port, 0.05).start()
    try:
        sent = bytes(range(256)) * 4000
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as conn:
            started = time.monotonic()
            conn.sendall(b"x")
            assert conn.recv(1) == b"x"
            round_trip = time.monotonic() - started
            conn.sendall(sent)
            got = b""
            while len(got) < len(sent):
                got += conn.recv(65536)
        assert got == sent
        assert round_trip >= 0.1, round_trip
    finally:
        relay.stop()
        listener.close()
