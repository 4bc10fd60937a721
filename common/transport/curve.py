"""CurveZMQ keys: `appo-keys DIR` writes them; transports load them from a directory.

Layout (also what a Kubernetes Secret mounted as a directory looks like):
  learner.key, learner.key_secret             the learner's pair
  <name>.key, <name>.key_secret               one pair per collector name (default "collector")
The learner accepts exactly the collectors whose <name>.key sits in the directory.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

LEARNER = "learner"


class CurveError(RuntimeError):
    """A CURVE key file that is missing, unreadable or would be overwritten."""


@dataclass(frozen=True)
class ServerKeys:
    """The learner's key pair and the directory of public keys it admits."""

    public: bytes
    secret: bytes
    authorized_dir: Path  # the public keys in here may connect


@dataclass(frozen=True)
class ClientKeys:
    """A collector's key pair and the learner's public key it expects."""

    public: bytes
    secret: bytes
    server_public: bytes


def _load_pair(directory: Path, name: str) -> tuple[bytes, bytes]:
    path = directory / f"{name}.key_secret"
    if not path.is_file():
        raise CurveError(f"CURVE key file {path} is missing (create keys with: appo-keys {directory})")
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (ValueError, OSError) as exc:
        raise CurveError(f"CURVE key file {path} is unreadable: {exc}") from None
    if not secret:
        raise CurveError(f"{path} holds no secret key")
    return public, secret


def server_keys(curve_dir: str) -> ServerKeys:
    d = Path(curve_dir)
    public, secret = _load_pair(d, LEARNER)
    return ServerKeys(public, secret, d)


def client_keys(curve_dir: str, name: str) -> ClientKeys:
    d = Path(curve_dir)
    public, secret = _load_pair(d, name)
    server_file = d / f"{LEARNER}.key"
    if not server_file.is_file():
        raise CurveError(f"the learner's public key {server_file} is missing")
    server_public, _ = zmq.auth.load_certificate(str(server_file))
    return ClientKeys(public, secret, server_public)


def write_keys(directory: Path, collector_names: list[str]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in [LEARNER, *collector_names]:
        if (directory / f"{name}.key_secret").exists():
            raise CurveError(f"{directory / (name + '.key_secret')} exists; refusing to overwrite keys")
        public, secret = zmq.auth.create_certificates(str(directory), name)
        Path(secret).chmod(0o600)
        written += [Path(public), Path(secret)]
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="appo-keys",
                                description="Write CurveZMQ key pairs for a learner and its collectors.")
    p.add_argument("dir", help="directory to write the keys into (created if missing)")
    p.add_argument("--collectors", nargs="+", default=["collector"], metavar="NAME",
                   help="collector key pair names (default: one shared pair named 'collector')")
    args = p.parse_args(argv)
    if not zmq.has("curve"):
        print("error: this libzmq was built without CURVE support", file=sys.stderr)
        return 2
    try:
        for path in write_keys(Path(args.dir), args.collectors):
            print(path)
    except CurveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
