"""A tiny HTTP status server every APPO process can run beside its main loop.

  GET /metrics   Prometheus text exposition format 0.0.4 (HELP and TYPE for each family)
  GET /healthz   liveness:  200 while the main loop makes progress, else 503
  GET /readyz    readiness: 200 once the process does its job (learner: sockets bound,
                 weights served), else 503

Each endpoint asks a callable the process hands in, on the server's own (daemon)
threads, so the callables must be cheap and safe to call from another thread
(reading ints and floats the main loop writes is).  Nothing here imports torch,
MuJoCo or ZeroMQ: `python -m common.status_server /healthz` is a container
HEALTHCHECK that starts quickly.

    server = StatusServer(9100, metrics=lambda: {"appo_iterations_total": it},
                          health=heartbeat, ready=lambda: (bound, "listening"))
    server.start()          # binds now: a port in use raises OSError here
    ...
    server.stop()

Metric values: a number (one sample), None (no sample yet), or a mapping from
label values to numbers for a family with labels (`METRICS` names the label, e.g.
{"bad_header": 3} for appo_refused_messages_total{reason="bad_header"}); for more
than one label, tuple keys in the order of the family's labels.  Names in
`METRICS` get its HELP and TYPE; any other valid name is exposed too (a counter
if it ends in _total, else a gauge).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_LEARNER_PORT = 9100
DEFAULT_COLLECTOR_PORT = 9101
# The variables the HEALTHCHECK follows (see main()): training.status_port for the
# learner, training.collector_status_port for collectors.
PORT_ENV = "APPO_TRAINING__STATUS_PORT"
COLLECTOR_PORT_ENV = "APPO_TRAINING__COLLECTOR_STATUS_PORT"

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

Check = Callable[[], "tuple[bool, str] | bool"]
MetricsFn = Callable[[], Mapping[str, Any]]


@dataclass(frozen=True)
class MetricDef:
    """One metric family of the catalog: its name, Prometheus type, HELP text and label names."""

    name: str
    type: str  # "counter" | "gauge"
    help: str
    labels: tuple[str, ...] = ()


def _defs(*items: MetricDef) -> dict[str, MetricDef]:
    return {d.name: d for d in items}


# The catalog: what each process should expose (Prometheus naming: base units, _total
# for counters, no unit-less suffixes).  Learner first, then collector.
METRICS: dict[str, MetricDef] = _defs(
    MetricDef("appo_iterations_total", "counter",
              "Learner updates completed (restored from the checkpoint on resume)."),
    MetricDef("appo_env_steps_total", "counter", "Environment steps the learner received in rollouts."),
    MetricDef("appo_policy_version", "gauge", "Version of the newest weights the learner published."),
    MetricDef("appo_collectors_connected", "gauge", "Collectors attached to the learner now."),
    MetricDef("appo_policy_lag_mean", "gauge", "Mean policy lag (versions) of the rollouts in the last update."),
    MetricDef("appo_policy_lag_max", "gauge", "Largest policy lag (versions) of the rollouts in the last update."),
    MetricDef("appo_refused_messages_total", "counter", "Messages the learner refused, by reason.", ("reason",)),
    MetricDef("appo_rollouts_received_total", "counter", "Rollouts the learner received, by collector.",
              ("collector",)),
    MetricDef("appo_ring_occupancy", "gauge", "Filled slots of the learner's pinned-memory ring."),
    MetricDef("appo_ring_slots", "gauge", "Slots of the learner's pinned-memory ring."),
    MetricDef("appo_staging_occupancy", "gauge", "Rollouts held in the learner's staging pool."),
    MetricDef("appo_env_steps_per_second", "gauge", "Environment steps per second received, since the start."),
    MetricDef("appo_iteration_seconds", "gauge", "Wall time of the last learner lap."),
    MetricDef("appo_collector_wait_seconds", "gauge", "Time the last learner lap waited for rollouts."),
    MetricDef("appo_mean_reward", "gauge", "Mean episode return of recently finished episodes."),
    MetricDef("appo_mean_episode_length", "gauge", "Mean length (steps) of recently finished episodes."),
    MetricDef("appo_learning_rate", "gauge", "Current learning rate."),
    MetricDef("appo_last_checkpoint_iteration", "gauge", "Iteration of the newest checkpoint written."),
    MetricDef("appo_collector_rollouts_sent_total", "counter", "Rollouts this collector sent."),
    MetricDef("appo_collector_env_steps_total", "counter", "Environment steps this collector stepped."),
    MetricDef("appo_collector_policy_version", "gauge", "Policy version this collector acts with."),
    MetricDef("appo_collector_connected", "gauge", "1 while this collector's learner answers, else 0."),
    MetricDef("appo_collector_env_step_seconds", "gauge", "Time of the last batched environment step."),
    MetricDef("appo_collector_inference_seconds", "gauge", "Time of the last batched policy inference."),
    MetricDef("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch in seconds."),
)


# ---------------------------------------------------------------- exposition format


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    f = float(v)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    return repr(f)


def _definition(name: str, value: Any) -> MetricDef:
    if name in METRICS:
        return METRICS[name]
    kind = "counter" if name.endswith("_total") else "gauge"
    labels = ("label",) if isinstance(value, Mapping) else ()
    return MetricDef(name, kind, f"APPO metric {name}.", labels)


def render_metrics(values: Mapping[str, Any]) -> str:
    """The exposition text for a {name: value} mapping (see the module docstring for values)."""
    lines: list[str] = []
    for name in sorted(values):
        value = values[name]
        if not _NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        d = _definition(name, value)
        if value is None:
            continue
        if isinstance(value, Mapping):
            if not d.labels:
                raise ValueError(f"{name} has no labels, but its value is a mapping")
            samples = []
            for key, v in sorted(value.items(), key=lambda kv: str(kv[0])):
                if v is None:
                    continue
                keys = key if isinstance(key, tuple) else (key,)
                if len(keys) != len(d.labels):
                    raise ValueError(f"{name}: {len(keys)} label values for labels {d.labels}")
                pairs = ",".join(f'{lab}="{_escape_label(str(k))}"' for lab, k in zip(d.labels, keys, strict=True))
                samples.append(f"{name}{{{pairs}}} {_format_value(v)}")
        else:
            samples = [f"{name} {_format_value(value)}"]
        lines.append(f"# HELP {name} {_escape_help(d.help)}")
        lines.append(f"# TYPE {name} {d.type}")
        lines.extend(samples)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- liveness helper


class Heartbeat:
    """Liveness of a loop: beat() on every pass; calling it says whether the last beat is recent.

    Calling the object answers (ok, detail): ok while the last beat is at most
    max_age_s old.  Beat on every pass of the main loop, waiting included, so a
    learner waiting for collectors is alive and a hung one is not.
    """

    def __init__(self, max_age_s: float, what: str = "main loop"):
        self.max_age_s = max_age_s
        self.what = what
        self._last = time.monotonic()

    def beat(self) -> None:
        self._last = time.monotonic()

    def __call__(self) -> tuple[bool, str]:
        age = time.monotonic() - self._last
        if age <= self.max_age_s:
            return True, f"{self.what} progressed {age:.1f} s ago"
        return False, f"{self.what} made no progress for {age:.1f} s (limit {self.max_age_s:g} s)"


# ---------------------------------------------------------------- server


def _run_check(check: Check | None) -> tuple[bool, str]:
    if check is None:
        return True, "no check configured"
    try:
        result = check()
    except Exception as exc:  # a broken check is a failed check, never a dead server
        return False, f"check failed: {type(exc).__name__}: {exc}"
    if isinstance(result, tuple):
        ok, detail = result
        return bool(ok), str(detail)
    return bool(result), ""


class _Handler(BaseHTTPRequestHandler):
    """Answers one request from the owning StatusServer's callables."""

    server: _Server
    timeout = 10  # a client that stalls mid-request releases its thread
    server_version = "appo-status"
    sys_version = ""

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, head: bool) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        content_type = "text/plain; charset=utf-8"
        if path == "/metrics":
            try:
                status, body, content_type = 200, owner.render(), CONTENT_TYPE_METRICS
            except Exception as exc:
                status, body = 500, f"metrics failed: {type(exc).__name__}: {exc}\n"
        elif path in ("/healthz", "/readyz"):
            live = path == "/healthz"
            ok, detail = _run_check(owner.health if live else owner.ready)
            word = ("ok" if ok else "unhealthy") if live else ("ready" if ok else "not ready")
            status, body = (200 if ok else 503), f"{word}: {detail}\n" if detail else f"{word}\n"
        else:
            status, body = 404, "not found; try /metrics, /healthz or /readyz\n"
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would flood the process log


class _Server(ThreadingHTTPServer):
    """The threaded HTTP server, with a link back to the StatusServer that owns it."""

    daemon_threads = True
    allow_reuse_address = True
    owner: StatusServer


class StatusServer:
    """Serves /metrics, /healthz and /readyz on host:port from daemon threads.

    port 0 binds an ephemeral port (tests; read `.port` after start()).  A config
    whose status_port is 0 means "no server": the caller simply does not create one.
    """

    def __init__(self, port: int, metrics: MetricsFn | None = None, health: Check | None = None,
                 ready: Check | None = None, host: str = "0.0.0.0", process: str = ""):
        self.host = host
        self.requested_port = port
        self.metrics = metrics
        self.health = health
        self.ready = ready
        self.process = process
        self.started_at = time.time()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def render(self) -> str:
        values: dict[str, Any] = dict(self.metrics() if self.metrics else {})
        values.setdefault("process_start_time_seconds", self.started_at)
        return render_metrics(values)

    def start(self) -> StatusServer:
        if self._server is not None:
            return self
        server_cls = _Server
        if ":" in self.host:  # an IPv6 address such as "::"
            server_cls = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
        server = server_cls((self.host, self.requested_port), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="status-server", daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        if self._server is None:
            return self.requested_port
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else ("[::1]" if self.host == "::" else self.host)
        return f"http://{host}:{self.port}"

    def stop(self, timeout: float = 5.0) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> StatusServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ---------------------------------------------------------------- probe client (HEALTHCHECK)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text (as /metrics writes it) -> {'name' or 'name{labels}': value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                continue
    return out


def probe(url: str, timeout: float = 3.0) -> tuple[int, str]:
    """(HTTP status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(getattr(exc, "reason", exc))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m common.status_server",
        description="Probe a running APPO process's status server (a container HEALTHCHECK). The port is "
        "the --port-env variable when set, else --default-port; 0 means the server is off (exit 0).",
    )
    p.add_argument("path", nargs="?", default="/healthz", help="/healthz (default), /readyz or /metrics")
    p.add_argument("--port-env", default=PORT_ENV,
                   help=f"variable holding the port: {PORT_ENV} (learner, default) or {COLLECTOR_PORT_ENV}")
    p.add_argument("--default-port", type=int, default=0, help="port when the variable is unset (default 0: off)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--timeout", type=float, default=3.0)
    args = p.parse_args(argv)
    raw = os.environ.get(args.port_env, "").strip()
    try:
        port = int(raw) if raw else args.default_port
    except ValueError:
        print(f"{args.port_env}={raw!r} is not a port", file=sys.stderr)
        return 2
    if port == 0:
        print("status server is off (port 0)")
        return 0
    status, body = probe(f"http://{args.host}:{port}{args.path}", args.timeout)
    print(f"{status} {body.strip()[:500]}")
    return 0 if 200 <= status < 400 else 1


if __name__ == "__main__":
    sys.exit(main())
