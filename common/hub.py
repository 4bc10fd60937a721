"""Where a task's reference motion comes from: a file on disk, the asset folder, or the seed's Hugging Face dataset.

The seed (UniLab) names its clips relative to its asset tree (`motions/g1/dance1_subject2_part.npz` is
g1_motion_tracking's default) and downloads a missing one from the Hugging Face dataset
`unilabsim/unilab-motions`.  The same name works here: a path that exists is used as given; a relative
one is looked up under the asset folder (`task_options.assets_dir`, default ~/.cache/appo/assets) and,
when absent, downloaded there once with huggingface_hub (which honours HF_ENDPOINT for a mirror and
HF_HUB_OFFLINE, and writes the file only when complete).  Every process resolves for itself, so a
collector on another host fetches its own copy; appo-train resolves once before it starts any.
"""

from __future__ import annotations

import os
from pathlib import Path

MOTIONS_REPO = "unilabsim/unilab-motions"
# The seed's g1_motion_tracking clip (its conf/*/task/g1_motion_tracking: motion_file).
SEED_MOTION_FILE = "motions/g1/dance1_subject2_part.npz"
DEFAULT_ENDPOINT = "https://huggingface.co"


class HubError(ValueError):
    """A clip that is neither on disk nor downloadable; the message names the file, where it looked and why."""


def default_assets_dir() -> Path:
    """The asset folder when task_options.assets_dir is empty: $XDG_CACHE_HOME/appo/assets or ~/.cache/appo/assets."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "appo" / "assets"


def motion_clip(cfg) -> str | None:
    """The local path of the run's reference clip (downloaded on first use), or None for a task without one."""
    from common.config import MOTION_TASKS  # config imports this module's names

    if cfg.task not in MOTION_TASKS:
        return None
    folder = Path(cfg.task_options.assets_dir).expanduser() if cfg.task_options.assets_dir else default_assets_dir()
    return str(resolve_motion_file(cfg.task_options.motion_file, folder))


def resolve_motion_file(name: str, assets_dir: Path) -> Path:
    """`name` as a file on disk, else under `assets_dir`, else downloaded there from MOTIONS_REPO; HubError if none."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    if path.is_absolute():
        raise HubError(f"task_options.motion_file: {name}: no such file")
    local = assets_dir / path
    if local.is_file():
        return local
    return _download(path.as_posix(), assets_dir)


def _download(relative: str, assets_dir: Path) -> Path:
    """Fetch `relative` of MOTIONS_REPO into assets_dir (huggingface_hub keeps partial files aside until done)."""
    where = (f"task_options.motion_file: {relative} is not a file here nor under {assets_dir}, and downloading it "
             f"from the Hugging Face dataset {MOTIONS_REPO} ({os.environ.get('HF_ENDPOINT') or DEFAULT_ENDPOINT}) "
             "failed")
    hint = "; give a local clip with task_options.motion_file=PATH.npz"
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, OfflineModeIsEnabled
    except ImportError:
        raise HubError(f"{where}: huggingface_hub is not installed (pip install huggingface_hub){hint}") from None
    try:
        assets_dir.mkdir(parents=True, exist_ok=True)
        got = hf_hub_download(repo_id=MOTIONS_REPO, filename=relative, repo_type="dataset", local_dir=assets_dir,
                              endpoint=os.environ.get("HF_ENDPOINT") or None)  # read now, not at import
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as exc:  # no connection, or HF_HUB_OFFLINE set
        raise HubError(f"{where}: the hub cannot be reached ({_first_line(exc)}){hint}") from None
    except EntryNotFoundError:
        raise HubError(f"{where}: the dataset has no file {relative}{hint}") from None
    except OSError as exc:  # HTTP errors (HfHubHTTPError is an OSError), a folder that cannot be written
        raise HubError(f"{where}: {_first_line(exc)}{hint}") from None
    return Path(got)


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (huggingface_hub's run over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
