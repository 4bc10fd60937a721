"""Several hosts on one machine: Linux network namespaces joined by veth pairs to a bridge (the lab).

Each host gets its own namespace, interface and address in 10.231.0.0/24; the
bridge lives in a namespace of its own, so nothing touches the machine's real
network.  Everything is deleted on close, processes first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

SUBNET = "10.231.0"


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def netns_available() -> tuple[bool, str]:
    name = f"apchk{uuid.uuid4().hex[:6]}"
    try:
        _run("ip", "netns", "add", name)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return False, f"'ip netns add' is not permitted here: {detail.strip()}"
    _run("ip", "netns", "del", name)
    return True, ""


class NetLab:
    """Hosts in network namespaces on a private bridge, the processes started on them, and their links."""

    def __init__(self):
        self.tag = f"ap{uuid.uuid4().hex[:5]}"
        self.switch = f"{self.tag}sw"
        self.hosts: dict[str, str] = {}  # name -> namespace
        self.addresses: dict[str, str] = {}
        self.procs: list[subprocess.Popen] = []
        _run("ip", "netns", "add", self.switch)
        self._in(self.switch, "ip", "link", "add", "br0", "type", "bridge")
        self._in(self.switch, "ip", "link", "set", "br0", "up")

    def _in(self, ns: str, *cmd: str) -> None:
        _run("ip", "netns", "exec", ns, *cmd)

    def add_host(self, name: str) -> str:
        """A new host on the bridge; returns its address."""
        ns = f"{self.tag}{name}"
        addr = f"{SUBNET}.{len(self.hosts) + 1}"
        host_if, switch_if = f"{self.tag}{name}h", f"{self.tag}{name}s"
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", switch_if)
        _run("ip", "link", "set", host_if, "netns", ns)
        _run("ip", "link", "set", switch_if, "netns", self.switch)
        self._in(ns, "ip", "link", "set", "lo", "up")
        self._in(ns, "ip", "addr", "add", f"{addr}/24", "dev", host_if)
        self._in(ns, "ip", "link", "set", host_if, "up")
        self._in(self.switch, "ip", "link", "set", switch_if, "master", "br0")
        self._in(self.switch, "ip", "link", "set", switch_if, "up")
        self.hosts[name] = ns
        self.addresses[name] = addr
        return addr

    def set_link(self, host: str, up: bool) -> None:
        """Cut `host` off the network (its interface down) or heal it: a partition, as a pulled cable."""
        self._in(self.hosts[host], "ip", "link", "set", f"{self.tag}{host}h", "up" if up else "down")

    def drop(self, host: str, probability: float) -> None:
        """Lose this share of the packets `host` receives and sends, at random (iptables' statistic match)."""
        for chain in ("INPUT", "OUTPUT"):
            self._in(self.hosts[host], "iptables", "-A", chain, "-m", "statistic", "--mode", "random",
                     "--probability", str(probability), "-j", "DROP")

    def rate_limit(self, host: str, mbit: float) -> None:
        """Cap what `host` sends at `mbit` Mbit/s (a token bucket on its interface); the switch side caps what
        it receives."""
        host_if, switch_if = f"{self.tag}{host}h", f"{self.tag}{host}s"
        for ns, dev in ((self.hosts[host], host_if), (self.switch, switch_if)):
            self._in(ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                     "burst", "32kbit", "latency", "400ms")

    def clear_faults(self, host: str) -> None:
        """Undo drop() and rate_limit() on `host`."""
        self._in(self.hosts[host], "iptables", "-F")
        for ns, dev in ((self.hosts[host], f"{self.tag}{host}h"), (self.switch, f"{self.tag}{host}s")):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)

    def delay_proxy(self, host: str, ports: list[int], target: str, delay_ms: float, jitter_ms: float,
                    log_path, start_on: bool = True) -> subprocess.Popen:
        """On `host`, 127.0.0.1:PORT for each port forwards to target:PORT with delay_ms +- jitter_ms added to
        every chunk each way (this kernel has no netem); SIGUSR1 to the process switches the delay off and on."""
        argv = [sys.executable, "-m", "benchmarks.delay_proxy", "--target", target,
                "--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms), *map(str, ports)]
        if not start_on:
            argv.insert(-len(ports), "--start-off")
        with open(log_path, "a") as log:
            return self.popen(host, argv, stdout=subprocess.DEVNULL, stderr=log)

    def popen(self, host: str, args: list[str], **kw) -> subprocess.Popen:
        """Start a process on `host` (ip netns exec replaces itself with the command: same pid)."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[host], *args], **kw)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
        for ns in [*self.hosts.values(), self.switch]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        # veth ends vanish with their namespaces; confirm none of ours is left in the root namespace
        leftover = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert self.tag not in leftover, f"veth interfaces left behind: {self.tag}"
        assert not any(ns in os.listdir("/run/netns") for ns in [*self.hosts.values(), self.switch]) \
            if os.path.isdir("/run/netns") else True
