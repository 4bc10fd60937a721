"""A TCP proxy that adds latency with jitter to every chunk, each way, keeping order (the lab's stand-in for netem).

    python -m benchmarks.delay_proxy --target 10.231.0.1 --delay-ms 150 --jitter-ms 50 5555 5556

listens on 127.0.0.1:PORT for each PORT and forwards to target:PORT.  SIGUSR1 switches the delay off
and on again (--start-off: off until the first SIGUSR1).  Runs until killed.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import signal
import socket
import threading
import time
from collections import deque

DELAY_ON = threading.Event()


def pump(src: socket.socket, dst: socket.socket, delay_s: float, jitter_s: float) -> None:
    """Copy src -> dst, each chunk released delay +- jitter after it arrived, never before the one ahead of it."""
    queue: deque[tuple[float, bytes]] = deque()
    cond = threading.Condition()
    done = threading.Event()

    def reader() -> None:
        release = 0.0
        try:
            while data := src.recv(65536):
                # In order: a chunk may not overtake the one before it, as on a real link.
                delay = random.uniform(delay_s - jitter_s, delay_s + jitter_s) if DELAY_ON.is_set() else 0.0
                release = max(release, time.monotonic() + max(0.0, delay))
                with cond:
                    queue.append((release, data))
                    cond.notify()
        except OSError:
            pass
        finally:
            done.set()
            with cond:
                cond.notify()

    threading.Thread(target=reader, daemon=True).start()
    try:
        while True:
            with cond:
                while not queue and not done.is_set():
                    cond.wait()
                if not queue:
                    break
                release, data = queue[0]
            wait = release - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # this chunk's latency
            with cond:
                queue.popleft()
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):  # the other pump may have closed it already
                s.shutdown(socket.SHUT_RDWR)


def serve(port: int, target: str, delay_s: float, jitter_s: float) -> None:
    """Accept on 127.0.0.1:port; each connection gets its own upstream connection and two pumps."""
    server = socket.create_server(("127.0.0.1", port), reuse_port=False)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((target, port), timeout=5)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(a, b, delay_s, jitter_s), daemon=True).start()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--start-off", action="store_true", help="no delay until the first SIGUSR1")
    p.add_argument("ports", type=int, nargs="+")
    a = p.parse_args()
    if not a.start_off:
        DELAY_ON.set()
    signal.signal(signal.SIGUSR1, lambda *_: DELAY_ON.clear() if DELAY_ON.is_set() else DELAY_ON.set())
    for port in a.ports:
        threading.Thread(target=serve, args=(port, a.target, a.delay_ms / 1e3, a.jitter_ms / 1e3), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
