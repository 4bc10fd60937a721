"""plot_compare reads each run's mean return against wall time and refuses malformed run arguments."""

import argparse

import pytest
from torch.utils.tensorboard import SummaryWriter

from tools.plot_compare import main, parse_run, reward_vs_time


def _run(path, values):
    w = SummaryWriter(log_dir=str(path))
    for i, v in enumerate(values, start=1):
        w.add_scalar("Train/mean_reward", v, i)
    w.close()
    return path


def test_reads_values_in_order_and_plots(tmp_path):
    """The series comes back in step order, starting at minute 0; a PNG is written for two runs."""
    a = _run(tmp_path / "a", [1.0, 2.0, 3.0])
    b = _run(tmp_path / "b", [5.0])
    minutes, values = reward_vs_time(a)
    assert values == [1.0, 2.0, 3.0] and minutes[0] == 0.0 and minutes == sorted(minutes)
    out = tmp_path / "cmp.png"
    assert main([f"ours={a}", f"other={b}", "--out", str(out), "--target", "4"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_malformed_run_argument_is_refused():
    """A run argument without LABEL= is refused with the text quoted."""
    with pytest.raises(argparse.ArgumentTypeError, match="LABEL=RUN_DIR"):
        parse_run("logs/run")


def test_run_without_the_tag_is_refused(tmp_path):
    """A directory with no mean-return scalar names itself in the error."""
    w = SummaryWriter(log_dir=str(tmp_path / "x"))
    w.add_scalar("other", 1.0, 1)
    w.close()
    with pytest.raises(SystemExit, match="Train/mean_reward"):
        reward_vs_time(tmp_path / "x")
