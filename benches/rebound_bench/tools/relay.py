"""A TCP relay on 127.0.0.1 that delays every byte by a fixed time each way: another
region's Redis, one ocean away, on one machine (the kernel here has no netem). Bytes keep
their order; each chunk read is written `delay` seconds after it was read."""

from __future__ import annotations

import asyncio
import threading
import time


class DelayedRelay:
    """Listens on a free port of 127.0.0.1 and relays each connection to `target_port`,
    `delay` seconds each way, from a thread of its own until `stop`."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"relay-{target_port}", daemon=True)

    def start(self) -> "DelayedRelay":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the relay did not start")
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            # The connections still open end with the relay.
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    async def _accept(self, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            down_w.close()
            return
        await asyncio.gather(self._pump(down_r, up_w), self._pump(up_r, down_w), return_exceptions=True)
        for w in (up_w, down_w):
            w.close()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Reads chunks as they come and writes each `delay` after it was read, in order."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def later() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    dst.close()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                dst.write(chunk)
                await dst.drain()

        writer = asyncio.ensure_future(later())
        try:
            while True:
                chunk = await src.read(65536)
                queue.put_nowait((time.monotonic() + self.delay, chunk))
                if not chunk:
                    break
            await writer
        finally:
            writer.cancel()
