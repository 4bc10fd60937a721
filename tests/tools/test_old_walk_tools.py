"""appo-eval, appo-export and appo-motion record on an old g1_walk_flat checkpoint (mjlab's walker, by its actor
width): it runs as g1_velocity_flat; `--task g1_walk_flat` with it is refused naming g1_velocity_flat."""

import onnx
import pytest
import torch
from old_walk_checkpoints import NEW, OLD, write_old_run

from collector.envs.g1.motion import load_clip
from tools import eval as appo_eval
from tools import motion as appo_motion
from tools.export import FILE_NAMES
from tools.export import main as export_main

SHORT_EVAL = ["--episodes", "1", "--threads", "1", "--max-episode-steps", "5"]


@pytest.fixture
def old_run(tmp_path):
    """logs/g1_walk_flat/run1/model_3.pt as the learner wrote it before the rename; (log root, checkpoint)."""
    return tmp_path / "logs", write_old_run(tmp_path / "logs")


def ways_to_name(log_root, ckpt):
    """The checkpoint as a file, as its run directory, and as the newest run of <log root>/g1_walk_flat/."""
    return {"file": [str(ckpt)], "run directory": [str(ckpt.parent)], "index": ["-1", "--log-root", str(log_root)]}


def run_main(main, argv):
    """A tool's exit status, argparse's refusals included; main() sets the process's threads, put back here."""
    threads = torch.get_num_threads()
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("way", ["file", "run directory", "index"])
def test_eval_refuses_the_old_name_naming_g1_velocity_flat(old_run, capsys, way):
    """appo-eval --task g1_walk_flat on the old checkpoint (a file, its run directory, or -1 of the old task's runs)
    exits 2 naming g1_velocity_flat and its old name, never a shape error."""
    load_run = ways_to_name(*old_run)[way]
    assert run_main(appo_eval.main, ["--task", OLD, "--load-run", *load_run, *SHORT_EVAL]) == 2
    err = capsys.readouterr().err
    assert f"is a {NEW} policy ({NEW} was called {OLD}" in err and f"give --task {NEW}" in err


@pytest.mark.parametrize("task", [None, NEW])
def test_eval_runs_the_old_checkpoint_as_g1_velocity_flat(old_run, task):
    """appo-eval on the old file, without --task or with --task g1_velocity_flat, evaluates g1_velocity_flat."""
    _, ckpt = old_run
    argv = ["--load-run", str(ckpt), *SHORT_EVAL, *(["--task", task] if task else [])]
    out = appo_eval.evaluate(appo_eval.parse_args(argv))
    assert out["task"] == NEW and out["episodes"] == 1 and out["iteration"] == 3 and max(out["lengths"]) <= 5


@pytest.mark.parametrize("way", ["file", "run directory", "index"])
def test_export_refuses_the_old_name_naming_g1_velocity_flat(old_run, tmp_path, capsys, way):
    """appo-export --task g1_walk_flat on the old checkpoint exits 2 naming g1_velocity_flat, writing nothing."""
    load_run = ways_to_name(*old_run)[way]
    assert run_main(export_main, ["--task", OLD, "--load-run", *load_run, "--out", str(tmp_path / "x")]) == 2
    assert f"is a {NEW} policy ({NEW} was called {OLD}" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_export_of_the_old_checkpoint_says_g1_velocity_flat(old_run, tmp_path):
    """appo-export on the old run directory without --task writes models whose metadata task is g1_velocity_flat."""
    _, ckpt = old_run
    assert run_main(export_main, ["--load-run", str(ckpt.parent), "--out", str(tmp_path / "x")]) == 0
    meta = {p.key: p.value for p in onnx.load(str(tmp_path / "x" / FILE_NAMES["onnx"])).metadata_props}
    assert (meta["task"], meta["obs_dim"], meta["act_dim"]) == (NEW, "99", "29")


@pytest.mark.parametrize("way", ["file", "run directory", "index"])
def test_record_refuses_the_old_name_naming_g1_velocity_flat(old_run, tmp_path, capsys, way):
    """appo-motion record --task g1_walk_flat on the old checkpoint exits 2 naming g1_velocity_flat; no clip."""
    out = tmp_path / "walk.npz"
    argv = ["record", "--task", OLD, "--load-run", *ways_to_name(*old_run)[way], "--seconds", "0.1",
            "--command", "0.5", "0", "0", "--out", str(out)]
    assert run_main(appo_motion.main, argv) == 2
    err = capsys.readouterr().err
    assert f"record rolls out {NEW} policies only ({NEW} was called {OLD}" in err and not out.exists()


def test_record_rolls_out_the_old_checkpoint(old_run, tmp_path):
    """appo-motion record on the old file without --task rolls it out as g1_velocity_flat and writes the clip."""
    _, ckpt = old_run
    out = tmp_path / "walk.npz"
    argv = ["record", "--load-run", str(ckpt), "--seconds", "0.1", "--command", "0.5", "0", "0", "--out", str(out)]
    assert run_main(appo_motion.main, argv) == 0
    assert load_clip(out).num_frames == 5
