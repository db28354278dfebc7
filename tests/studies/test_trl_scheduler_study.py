"""The scheduler A/B study: one real tiny run per kind of arm, resume, and the analysis's
verdicts (it must see a difference that is there and no difference where there is none)."""

import json

import numpy as np
import pandas as pd
import pytest

from grpo_theory.studies.trl_scheduler import analysis, study, tiny

SMALL = study.StudyConfig(seeds=1, steps=3, budget=48, n_prompts=16, every=1)


def test_first_letter_reward():
    p = [[{"role": "user", "content": "q b c"}]] * 3
    c = [[{"content": "x q y"}], [{"content": "qq"}], [{"content": ""}]]
    assert tiny.first_letter_reward(p, c) == [1.0, 0.0, 0.0]
    assert tiny.prompts(4) == tiny.prompts(4) and len(set(tiny.prompts(64))) > 50


def test_config_is_checked():
    with pytest.raises(ValueError, match="budget 50 must be a multiple of 3 and 8"):
        study.StudyConfig(budget=50)
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        study.StudyConfig(steps=0)
    with pytest.raises(ValueError, match="arm must be one of"):
        study.run_cell(SMALL, "fixed-5", 0)


def test_a_real_study_runs_resumes_and_reports(tmp_path):
    runs = study.run_study(SMALL, tmp_path, arms=("fixed-8", "scheduled-3"), progress=False)
    assert len(runs) == 2 * SMALL.steps
    assert set(runs.columns) >= {"arm", "seed", "step", "completions", "G", "reward", "c1",
                                 "config", "version", "wall_s"}
    fixed = runs[runs.arm == "fixed-8"]
    assert (fixed.G == 8).all() and (fixed.changes == 0).all()
    assert list(fixed.completions) == [48, 96, 144]
    assert np.isfinite(runs.c1).all()  # every = 1: an estimate at every step
    assert runs.reward.between(0, 1).all()
    sched = runs[runs.arm == "scheduled-3"]
    assert sched.G.iloc[0] == 3 and set(sched.G) <= {3, 4, 6, 8, 12, 16}
    assert json.loads(runs.config.iloc[0])["budget"] == 48
    for f in ("runs.csv", "summary.csv", "REPORT.md", "reward.png"):
        assert (tmp_path / f).is_file()
    # resume: the cells are read back, not rerun (their wall time is the saved one)
    again = study.run_study(SMALL, tmp_path, arms=("fixed-8", "scheduled-3"), progress=False)
    pd.testing.assert_frame_equal(again, runs)


def _synthetic(shift, seed=0):
    from support.paired_runs import paired_runs

    return paired_runs(("fixed-8", "scheduled-8"), shift, dict(G=8, changes=0, version="x"), seed=seed,
                       eval_reward=False)


def test_the_analysis_sees_a_difference_and_no_difference():
    diff = lambda df: analysis.summarise(df).query(  # noqa: E731
        "kind == 'difference' and metric == 'mean_reward'").iloc[0]
    up = diff(_synthetic(0.05))
    assert up.ci_low > 0 and analysis._verdict(up).startswith("higher")
    down = diff(_synthetic(-0.05))
    assert down.ci_high < 0 and analysis._verdict(down).startswith("lower")
    null = [diff(_synthetic(0.0, seed=k)) for k in range(40)]
    covered = np.mean([r.ci_low <= 0 <= r.ci_high for r in null])
    assert covered >= 0.85  # a 95% interval: about 38 of 40 contain the true 0
