"""appo-export: a checkpoint's actor as ONNX and TorchScript, for deployment without this project.

    appo-export --task go2_joystick_flat --load-run -1 --out exported/
    appo-export --load-run logs/appo/hopper/<run>/model_300.pt --out exported/ --formats onnx

Each file maps observations `obs` [batch, obs_dim] (float32, raw, as the
environment gives them) to the policy's mean action `actions` [batch, act_dim]:
the observation normalisation saved in the checkpoint is inside, sampling noise
is not.  The actions are not clipped; clip them to the actuator ranges as the
environment does.  The run's task, dims and iteration travel as metadata (ONNX
metadata_props, TorchScript extra file appo.json).  Needs the `tools` extra
(onnx, onnxscript; onnxruntime for the parity check run after writing).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from common.checkpoint_io import (
    CheckpointError,
    LoadedPolicy,
    add_checkpoint_args,
    check_not_old_name,
    policy_from_args,
)

FORMATS = ("onnx", "torchscript")
FILE_NAMES = {"onnx": "policy.onnx", "torchscript": "policy_torchscript.pt"}
TOLERANCE = 1e-5  # max abs difference to the eager actor that the check accepts


class DeterministicActor(nn.Module):
    """obs -> mean action: the normaliser and actor MLP of an ActorCritic, nothing else."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.obs_normalizer = copy.deepcopy(policy.obs_normalizer)
        self.actor = copy.deepcopy(policy.actor)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self.obs_normalizer(obs))


def metadata(policy: LoadedPolicy) -> dict[str, str]:
    return {
        "task": policy.task,
        "obs_dim": str(policy.obs_dim),
        "act_dim": str(policy.act_dim),
        "iteration": str(policy.iteration),
        "checkpoint": str(policy.path),
        "input": "obs [batch, obs_dim] float32, raw observations (normalised inside)",
        "output": "actions [batch, act_dim] float32, mean action, unclipped",
    }


def export_onnx(actor: DeterministicActor, obs_dim: int, path: Path, meta: dict[str, str]) -> Path:
    import onnx

    example = torch.zeros(2, obs_dim)
    batch = torch.export.Dim("batch")
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "torchvision is not installed" and similar notes about unrelated ops
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # exporter internals' deprecation chatter, not about this model
            program = torch.onnx.export(actor.eval(), (example,), dynamo=True, input_names=["obs"],
                                        output_names=["actions"], dynamic_shapes=({0: batch},), verbose=False)
    finally:
        quiet.setLevel(level)
    proto = program.model_proto
    for key, value in meta.items():
        proto.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))  # one self-contained file: the weights are small
    return path


def export_torchscript(actor: DeterministicActor, obs_dim: int, path: Path, meta: dict[str, str]) -> Path:
    with warnings.catch_warnings():
        # torch marks torch.jit deprecated, yet TorchScript is still what libtorch (C++) loads.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        scripted = torch.jit.trace(actor.eval(), torch.zeros(2, obs_dim))
        torch.jit.save(scripted, str(path), _extra_files={"appo.json": json.dumps(meta)})
    return path


def sample_observations(actor: DeterministicActor, obs_dim: int, count: int = 256, seed: int = 0) -> torch.Tensor:
    """Observations spread around the normaliser's statistics (both sides of its clip)."""
    g = torch.Generator().manual_seed(seed)
    norm = actor.obs_normalizer
    # The statistics' first obs_dim columns are the raw ones (an angle column's are its sine's: any value will do).
    spread = torch.sqrt(norm.var[:obs_dim] + norm.eps) if norm.enabled else torch.ones(obs_dim)
    center = norm.mean[:obs_dim] if norm.enabled else torch.zeros(obs_dim)
    return center + 4.0 * spread * torch.randn(count, obs_dim, generator=g)


def onnx_max_abs_diff(actor: DeterministicActor, path: Path, obs: torch.Tensor) -> float:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["actions"], {"obs": obs.numpy().astype(np.float32)})
    with torch.no_grad():
        want = actor(obs).numpy()
    return float(np.abs(got - want).max())


def load_torchscript(path: Path) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)  # see export_torchscript
        return torch.jit.load(str(path))


def torchscript_max_abs_diff(actor: DeterministicActor, path: Path, obs: torch.Tensor) -> float:
    loaded = load_torchscript(path)
    with torch.no_grad():
        return float((loaded(obs) - actor(obs)).abs().max())


def export(policy: LoadedPolicy, out_dir: Path, formats: tuple[str, ...] = FORMATS) -> dict[str, Path]:
    """Write the requested formats into out_dir; format -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    actor = DeterministicActor(policy.model).eval()
    meta = metadata(policy)
    writers = {"onnx": export_onnx, "torchscript": export_torchscript}
    return {fmt: writers[fmt](actor, policy.obs_dim, out_dir / FILE_NAMES[fmt], meta) for fmt in formats}


def check_parity(policy: LoadedPolicy, written: dict[str, Path]) -> dict[str, float]:
    """Max abs difference of each written file to the eager actor on random observations."""
    actor = DeterministicActor(policy.model).eval()
    obs = sample_observations(actor, policy.obs_dim)
    checks = {"onnx": onnx_max_abs_diff, "torchscript": torchscript_max_abs_diff}
    return {fmt: checks[fmt](actor, path, obs) for fmt, path in written.items()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_args(p)
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the exported files")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated subset of {', '.join(FORMATS)}")
    args = p.parse_args(argv)
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    if not formats or set(formats) - set(FORMATS):
        p.error(f"--formats {args.formats!r}: give a comma-separated subset of {', '.join(FORMATS)}")
    args.formats = formats
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        policy = policy_from_args(args)
        check_not_old_name(args.task, policy.task, policy.path)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        written = export(policy, Path(args.out), args.formats)
        diffs = check_parity(policy, written)
    except ImportError as exc:
        missing = exc.name or exc
        print(f"error: {missing} is missing; install the tools extra: pip install 'appo[tools]'", file=sys.stderr)
        return 2
    for fmt, path in written.items():
        print(f"{fmt}: {path}  (max abs diff to the checkpoint's actor: {diffs[fmt]:.2e})")
    bad = {fmt: d for fmt, d in diffs.items() if not d <= TOLERANCE}
    if bad:
        print(f"error: exported actor disagrees with the checkpoint beyond {TOLERANCE}: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
