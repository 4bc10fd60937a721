"""The benchmark commands refuse bad numbers before measuring anything, naming the flag."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import appo_bench, ingest, physics, update
from common.cli import at_least, duration


def test_at_least_and_duration_parse_and_refuse():
    """Integers below the minimum, non-integers, and negative, zero (unless allowed), infinite or NaN durations
    are refused."""
    assert at_least(0)("0") == 0 and at_least(1)("7") == 7
    assert duration()("0.5") == 0.5 and duration(allow_zero=True)("0") == 0.0
    for parse, text in ((at_least(1), "0"), (at_least(0), "-1"), (at_least(0), "2.5"), (duration(), "0"),
                        (duration(allow_zero=True), "-3"), (duration(), "inf"), (duration(), "nan"),
                        (duration(), "x")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


@pytest.mark.parametrize(("main", "argv", "flag"), [
    (physics.main, ["--threads", "-1"], "--threads"),
    (physics.main, ["--rounds", "0"], "--rounds"),
    (physics.main, ["--seconds", "0"], "--seconds"),
    (update.main, ["--num-envs", "-4"], "--num-envs"),
    (appo_bench.main, ["--iterations", "0"], "--iterations"),
    (ingest.main, ["--senders", "zero"], "--senders"),
])
def test_bench_commands_exit_2_naming_the_bad_flag(main, argv, flag, capsys):
    """A bad value stops the command with argparse's status 2 and a message naming the flag."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err
