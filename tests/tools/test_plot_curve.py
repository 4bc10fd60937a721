"""plot_curve aligns scalars to iterations, picks the largest reward terms, draws only the panels a run has."""

import pytest
from torch.utils.tensorboard import SummaryWriter

from tools.plot_curve import main, main_terms, panels, read_series


def _run(path, tracking=False, iterations=8):
    w = SummaryWriter(log_dir=str(path))
    for i in range(1, iterations + 1):
        w.add_scalar("perf/total_env_steps", 1000 * i, i)
        w.add_scalar("Train/mean_reward", float(i), i)
        w.add_scalar("Train/mean_episode_length", 10.0 * i, i)
        w.add_scalar("Episode/timeout_rate", 0.1 * i, i)
        w.add_scalar("Episode/reward_big", 5.0, i)
        w.add_scalar("Episode/reward_penalty", -3.0, i)
        w.add_scalar("Episode/reward_small", 0.01, i)
        if i % 2 == 0:  # logged every other iteration: the gaps must stay NaN, not shift the series
            w.add_scalar("Episode/reward_sparse", 1.0, i)
        if tracking:
            w.add_scalar("Episode/tracking_error_xy", 0.5, i)
            w.add_scalar("Episode/tracking_error_yaw", 0.3, i)
    w.close()
    return path


def test_scalars_align_to_iterations(tmp_path):
    """A tag logged on some iterations only is NaN on the others, in iteration order."""
    s = read_series(_run(tmp_path / "r"))
    assert list(s["env_steps"]) == [1000 * i for i in range(1, 9)]
    sparse = s["Episode/reward_sparse"]
    assert all((v == 1.0) if i % 2 == 0 else (v != v) for i, v in zip(s["iteration"], sparse, strict=True))


def test_main_terms_by_magnitude(tmp_path):
    """The largest terms by magnitude come first, penalties counted by their size."""
    s = read_series(_run(tmp_path / "r"))
    assert main_terms(s, 2) == ["Episode/reward_big", "Episode/reward_penalty"]


def test_panels_follow_the_run(tmp_path):
    """Episode length in seconds with a control step; termination is 1 - timeout rate; tracking only when logged."""
    s = read_series(_run(tmp_path / "r"))
    rows = dict(panels(s, 3, control_dt=0.02))
    assert rows["mean episode length (s)"][""][0] == pytest.approx(0.2)
    assert rows["terminated (not timed out)"][""][-1] == pytest.approx(0.2)
    assert "RMS tracking error" not in rows
    tracked = dict(panels(read_series(_run(tmp_path / "t", tracking=True)), 3, None))
    assert "RMS tracking error" in tracked and "mean episode length (steps)" in tracked


def test_writes_a_png_and_refuses_bad_arguments(tmp_path, capsys):
    """The PNG is written; a missing run directory and a non-positive control step are refused by name."""
    out = tmp_path / "c.png"
    assert main([str(_run(tmp_path / "r")), "--out", str(out), "--control-dt", "0.02"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing"), "--out", str(out)])
    assert "run directory not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "r"), "--out", str(out), "--control-dt", "0"])
    assert "--control-dt must be positive" in capsys.readouterr().err
