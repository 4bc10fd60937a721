"""The run directory: logs/appo/<task>/<run>/ with TensorBoard events, checkpoints and config.yaml."""

from __future__ import annotations

import time
from pathlib import Path

from common.config import AppoConfig


def make_run_dir(cfg: AppoConfig, explicit: str | None = None) -> Path:
    if explicit:
        run_dir = Path(explicit)
    else:
        name = cfg.training.run_name or time.strftime("%Y-%m-%d_%H-%M-%S")
        run_dir = Path(cfg.training.log_dir) / cfg.task / name
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def save_config(cfg: AppoConfig, run_dir: Path) -> Path:
    path = run_dir / "config.yaml"
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(cfg.to_yaml())
    tmp.replace(path)
    return path
