"""Tests of common/status_server.py: a real server on a loopback port, real HTTP requests."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from common.status_server import (
    CONTENT_TYPE_METRICS,
    METRICS,
    Heartbeat,
    StatusServer,
    render_metrics,
)

# One exposition line: name, optional {labels}, value (text format 0.0.4).
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def get(url: str) -> tuple[int, str, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def parse_exposition(text: str) -> dict[str, dict]:
    """Strict parse: {family: {"type", "help", "samples": [(name, labels, value)]}}; HELP/TYPE precede samples."""
    families: dict[str, dict] = {}
    current = None
    assert text.endswith("\n"), "the exposition must end with a newline"
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert name not in families, f"family {name} appears twice"
            families[name] = {"help": help_text, "type": None, "samples": []}
            current = name
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert name == current and families[name]["type"] is None, f"TYPE {name} not right after its HELP"
            assert kind in {"counter", "gauge", "histogram", "summary", "untyped"}
            families[name]["type"] = kind
        else:
            m = _SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, labels, value = m.groups()
            assert name == current, f"sample {name} outside its family {current}"
            pairs = dict(_PAIR.findall(labels)) if labels else {}
            if labels:
                assert ",".join(f'{k}="{v}"' for k, v in _PAIR.findall(labels)) == labels, f"bad labels {labels!r}"
            families[name]["samples"].append((name, pairs, float(value)))
    return families


@pytest.fixture
def server():
    state = {"healthy": (True, "loop ok"), "ready": (False, "weights not served yet"), "iterations": 3}

    def metrics():
        return {
            "appo_iterations_total": state["iterations"],
            "appo_env_steps_total": 3 * 384,
            "appo_collectors_connected": 2,
            "appo_policy_lag_mean": 0.5,
            "appo_policy_lag_max": 2,
            "appo_refused_messages_total": {"bad_header": 4, 'odd "reason"\\n': 1},
            "appo_ring_occupancy": 1,
            "appo_mean_reward": None,  # no episode finished yet: no sample
        }

    srv = StatusServer(0, metrics=metrics, health=lambda: state["healthy"], ready=lambda: state["ready"],
                       host="127.0.0.1", process="learner")
    srv.start()
    srv.state = state
    yield srv
    srv.stop()


def test_metrics_are_valid_exposition_with_help_type_and_labels(server):
    """/metrics serves format 0.0.4: every family once, HELP and TYPE first, counters end in _total, labels escaped."""
    status, body, headers = get(server.url + "/metrics")
    assert status == 200
    assert headers["Content-Type"] == CONTENT_TYPE_METRICS
    fam = parse_exposition(body)
    assert fam["appo_iterations_total"]["type"] == "counter"
    assert fam["appo_iterations_total"]["samples"] == [("appo_iterations_total", {}, 3.0)]
    assert fam["appo_collectors_connected"]["type"] == "gauge"
    assert fam["appo_policy_lag_max"]["samples"][0][2] == 2.0
    refused = {labels["reason"]: v for _, labels, v in fam["appo_refused_messages_total"]["samples"]}
    assert refused == {"bad_header": 4.0, 'odd \\"reason\\"\\\\n': 1.0}
    assert "appo_mean_reward" not in fam  # None: no sample, and no empty family
    assert fam["process_start_time_seconds"]["type"] == "gauge"
    for name, f in fam.items():
        assert f["help"] and f["type"], name
        assert (f["type"] == "counter") == name.endswith("_total"), name
        if name in METRICS:
            assert f["type"] == METRICS[name].type


def test_metrics_parse_with_the_prometheus_client_parser(server):
    """The official Python parser reads the same exposition: names, types and label values agree."""
    from prometheus_client.parser import text_string_to_metric_families

    _, body, _ = get(server.url + "/metrics")
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    # the parser names a counter family without its _total suffix
    assert fams["appo_iterations"].type == "counter"
    assert fams["appo_iterations"].samples[0].value == 3
    assert fams["appo_collectors_connected"].type == "gauge"
    reasons = {s.labels["reason"] for s in fams["appo_refused_messages"].samples}
    assert "bad_header" in reasons and 'odd "reason"\\n' in reasons


def test_metrics_follow_the_callable_between_scrapes(server):
    """Each scrape calls the metrics callable again: a counter that advanced shows its new value."""
    server.state["iterations"] = 10
    _, body, _ = get(server.url + "/metrics")
    assert "appo_iterations_total 10\n" in body


def test_healthz_and_readyz_report_200_or_503_with_the_detail(server):
    """/healthz and /readyz answer 200 when their callable says ok and 503 otherwise, with a short text body."""
    assert get(server.url + "/healthz")[:2] == (200, "ok: loop ok\n")
    assert get(server.url + "/readyz")[:2] == (503, "not ready: weights not served yet\n")
    server.state["ready"] = (True, "sockets bound, weights v1 served")
    server.state["healthy"] = (False, "main loop made no progress for 61.0 s")
    assert get(server.url + "/readyz")[:2] == (200, "ready: sockets bound, weights v1 served\n")
    assert get(server.url + "/healthz")[:2] == (503, "unhealthy: main loop made no progress for 61.0 s\n")


def test_a_check_that_raises_is_a_503_and_the_server_keeps_serving(server):
    """A callable that raises makes its endpoint 503 (never a dead server); other endpoints keep working."""
    def broken():
        raise RuntimeError("boom")

    server.health = broken
    status, body, _ = get(server.url + "/healthz")
    assert status == 503 and "RuntimeError: boom" in body
    assert get(server.url + "/metrics")[0] == 200


def test_broken_metrics_are_a_500_not_a_partial_exposition(server):
    """A metrics callable that fails answers 500, so Prometheus marks the scrape failed instead of storing half."""
    server.metrics = lambda: {"bad name!": 1}
    status, body, _ = get(server.url + "/metrics")
    assert status == 500 and "invalid metric name" in body


def test_unknown_paths_are_404_and_head_has_no_body(server):
    """Paths other than the three are 404; HEAD answers the status with no body."""
    assert get(server.url + "/")[0] == 404
    req = urllib.request.Request(server.url + "/readyz", method="HEAD")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 503 and info.value.read() == b""


def test_concurrent_scrapes_are_served(server):
    """Many clients at once all get answers (threaded server)."""
    results = []

    def scrape():
        results.append(get(server.url + "/metrics")[0])

    threads = [threading.Thread(target=scrape) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [200] * 16


def test_stop_releases_the_port_and_ends_the_thread():
    """stop() ends the serving thread and closes the socket: the port refuses connections and can be bound again."""
    srv = StatusServer(0, host="127.0.0.1").start()
    port = srv.port
    assert get(srv.url + "/healthz")[0] == 200  # no checks configured: alive and ready
    thread = srv._thread
    srv.stop()
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    again = StatusServer(port, host="127.0.0.1").start()  # the port is free again
    assert get(again.url + "/readyz")[0] == 200
    again.stop()
    srv.stop()  # idempotent


def test_a_port_in_use_fails_at_start():
    """start() binds synchronously, so a taken port is an OSError the process can report."""
    with StatusServer(0, host="127.0.0.1") as first, pytest.raises(OSError):
        StatusServer(first.port, host="127.0.0.1").start()


def test_binds_all_interfaces_by_default():
    """The default host is 0.0.0.0: a kubelet or Prometheus reaches it on the pod address."""
    with StatusServer(0) as srv:
        assert srv._server.server_address[0] == "0.0.0.0"
        assert get(f"http://127.0.0.1:{srv.port}/healthz")[0] == 200


def test_heartbeat_turns_unhealthy_when_the_loop_stalls():
    """Heartbeat is ok right after beat() and fails once the last beat is older than its limit."""
    hb = Heartbeat(max_age_s=0.2, what="learner loop")
    assert hb()[0]
    hb._last -= 1.0
    ok, detail = hb()
    assert not ok and "learner loop made no progress" in detail
    hb.beat()
    assert hb()[0]


def test_render_refuses_label_count_mismatch():
    """A labelled value with the wrong number of label values is refused, not rendered wrongly."""
    with pytest.raises(ValueError, match="label values"):
        render_metrics({"appo_refused_messages_total": {("a", "b"): 1}})
    with pytest.raises(ValueError, match="no labels"):
        render_metrics({"appo_iterations_total": {"x": 1}})


def test_float_values_use_prometheus_spellings():
    """NaN and infinities are written NaN, +Inf, -Inf; bools as 0/1."""
    text = render_metrics({"g_nan": float("nan"), "g_inf": float("inf"), "g_ninf": float("-inf"), "g_bool": True})
    assert "g_nan NaN\n" in text and "g_inf +Inf\n" in text and "g_ninf -Inf\n" in text and "g_bool 1\n" in text


def test_healthcheck_cli_follows_the_port_env_and_exit_status():
    """`python -m common.status_server /healthz` exits 0 on 200, 1 on 503 or nothing listening.

    It exits 0 when the port is 0 or unset.
    """
    state = {"ok": (True, "fine")}
    with StatusServer(0, host="127.0.0.1", health=lambda: state["ok"]) as srv:
        env = {"APPO_TRAINING__STATUS_PORT": str(srv.port), "PATH": "/usr/bin:/bin"}
        cmd = [sys.executable, "-m", "common.status_server", "/healthz"]
        assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
        state["ok"] = (False, "stalled")
        assert subprocess.run(cmd, env=env, capture_output=True).returncode == 1
        port = srv.port
    env["APPO_TRAINING__STATUS_PORT"] = str(port)
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 1  # nothing listens now
    env["APPO_TRAINING__STATUS_PORT"] = "0"
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    del env["APPO_TRAINING__STATUS_PORT"]
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0  # unset, no --default-port: off


def test_healthcheck_cli_reads_the_collector_port_variable():
    """With --port-env APPO_TRAINING__COLLECTOR_STATUS_PORT the probe follows the collector's key, not the learner's."""
    with StatusServer(0, host="127.0.0.1", ready=lambda: (False, "no weights yet")) as srv:
        env = {"APPO_TRAINING__COLLECTOR_STATUS_PORT": str(srv.port), "APPO_TRAINING__STATUS_PORT": "1",
               "PATH": "/usr/bin:/bin"}
        base = [sys.executable, "-m", "common.status_server", "--port-env", "APPO_TRAINING__COLLECTOR_STATUS_PORT"]
        assert subprocess.run([*base, "/healthz"], env=env, capture_output=True).returncode == 0
        out = subprocess.run([*base, "/readyz"], env=env, capture_output=True, text=True)
        assert out.returncode == 1 and out.stdout.startswith("503 not ready: no weights yet")


def test_parse_metrics_reads_plain_and_labelled_series_and_skips_comments():
    """Prometheus text -> {series: value}: labels kept in the key, # lines and unparsable values left out."""
    from common.status_server import parse_metrics

    text = ('# HELP appo_iterations_total Iterations.\n# TYPE appo_iterations_total counter\n'
            'appo_iterations_total 12\nappo_refused_messages_total{reason="stale_policy"} 3\nbroken nan-ish\n')
    assert parse_metrics(text) == {"appo_iterations_total": 12.0,
                                   'appo_refused_messages_total{reason="stale_policy"}': 3.0}
