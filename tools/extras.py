"""The optional `tools` extra (plots, video): a clear error when a command needs it and it is not installed."""

from __future__ import annotations

import sys

TOOLS_MODULES = {"matplotlib", "imageio", "imageio_ffmpeg", "viser", "trimesh"}


def missing_extra(exc: ModuleNotFoundError) -> int:
    """Exit status 2 after naming the missing module of the tools extra; re-raise any other missing module."""
    if (exc.name or "").split(".")[0] not in TOOLS_MODULES:
        raise exc
    print(f"error: {exc.name} is missing; install the tools extra: pip install 'appo[tools]'", file=sys.stderr)
    return 2
