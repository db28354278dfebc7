"""Progress and timing of a multi-experiment run: each experiment on its own clock (elapsed and
ETA from its first cell), one bar at a time on a terminal, its own seconds in ``run.json``."""

import io
import json
import re

from support import toy_experiment as toy

from grpo_theory.experiments.progress import CellProgress
from grpo_theory.experiments.runner import run_experiments


class _Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_elapsed_and_eta_start_with_the_experiments_first_cell():
    """Made at t=0 (when a long run starts), first cell in at t=1000 after 4 s: elapsed 4 s,
    ETA 4 s per cell x 3 left = 12 s (rival: the clock from construction, elapsed 1000 s and
    ETA 3000 s)."""
    clock, buf = _Clock(0.0), io.StringIO()
    bar = CellProgress("toy", total=4, stream=buf, clock=clock)
    assert buf.getvalue() == ""  # nothing until the experiment starts
    clock.t = 1000.0
    bar.update("c0", 4.0)
    assert "1/4 c0 (4.0s) elapsed 4s eta 12s" in buf.getvalue()
    clock.t = 1006.0
    bar.update("c1", 6.0)
    assert "2/4 c1 (6.0s) elapsed 10s eta 10s" in buf.getvalue()
    assert bar.elapsed == 10.0
    clock.t = 1020.0
    bar.update("c2", 1.0)
    bar.update("c3", 1.0)  # the last cell closes the display itself
    assert bar.closed and bar.elapsed == 24.0  # from 996 (the first cell's start) to 1020
    assert "4/4 cells on disk after 24.0s" in buf.getvalue()
    bar.close()  # idempotent
    assert buf.getvalue().count("cells on disk") == 1


def test_tqdm_clock_starts_with_the_first_cell():
    clock, buf = _Clock(0.0), _Terminal()
    bar = CellProgress("toy", total=3, stream=buf, clock=clock)
    clock.t = 500.0
    bar.update("c0", 5.0)
    assert bar.bar.start_t == 495.0  # rival: tqdm's own clock from the bar's creation
    bar.close()


def test_one_bar_at_a_time_on_a_terminal():
    """Two experiments queued: the second's bar appears only after the first's closed (rival:
    every bar drawn when the run starts)."""
    buf = _Terminal()
    a = CellProgress("alpha", total=2, stream=buf)
    b = CellProgress("beta", total=2, stream=buf)
    assert buf.getvalue() == ""
    a.update("a0", 0.1)
    assert "beta" not in buf.getvalue()
    a.update("a1", 0.1)
    assert a.closed and "beta" not in buf.getvalue()
    b.update("b0", 0.1)
    b.update("b1", 0.1)
    text = buf.getvalue()
    assert text.rindex("alpha") < text.index("beta")


def test_headers_and_run_json_seconds_are_each_experiments_own(tmp_path, capsys):
    """toy-slow (2 cells of 0.5 s) then toy (2 fast cells): toy's run.json seconds is its own,
    its cells' time and the little between them (rival: the whole run's clock, which adds
    toy-slow's 1 s), toy-slow's at least its cells' time; toy's header comes after toy-slow's
    last line."""
    s = toy.Settings(n_cells=2, sleep=0.5)
    res = run_experiments([toy.SLOW_EXPERIMENT, toy.EXPERIMENT], tmp_path, s, figures=False)
    err = capsys.readouterr().err
    seconds = {n: json.loads((tmp_path / n / "run.json").read_text())["seconds"]
               for n in ("toy", "toy-slow")}
    m = json.loads((tmp_path / "toy" / "run.json").read_text())
    assert seconds["toy-slow"] >= 1.0
    assert 0 < m["compute_seconds"] <= seconds["toy"] + 1e-3
    assert seconds["toy"] < m["compute_seconds"] + 0.5  # the rival: at least + 1.0
    assert abs(res["toy"].seconds - seconds["toy"]) < 1e-3
    assert err.index("[toy-slow] 2/2 cells on disk") < err.index("== toy (")
    assert re.search(r"\[toy\] 2/2 c1 \(\d+\.\ds\) elapsed 0s", err)
    # a second run reuses every cell: no cell computed, 0 s of its own
    run_experiments([toy.EXPERIMENT], tmp_path, s, figures=False, progress=False)
    assert json.loads((tmp_path / "toy" / "run.json").read_text())["seconds"] == 0.0
