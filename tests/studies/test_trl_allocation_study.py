"""The TRL allocation A/B study: one real tiny run per arm, resume, and the analysis's verdicts
(a difference that is there is seen, none where there is none)."""

import json

import numpy as np
import pandas as pd
import pytest

from grpo_theory.studies.trl_scheduler import allocation as study

SMALL = study.AllocationConfig(seeds=1, steps=4, budget=32, prompts_per_step=8, width=8,
                               n_prompts=16, eval_samples=2)


def test_config_is_checked():
    with pytest.raises(ValueError, match="budget 36 must be a multiple of 8"):
        study.AllocationConfig(budget=36, prompts_per_step=12)
    with pytest.raises(ValueError, match=r"within \[2, width \(4\)\]"):
        study.AllocationConfig(budget=96, prompts_per_step=16, width=4)
    with pytest.raises(ValueError, match="fewer than one step's prompts"):
        study.AllocationConfig(n_prompts=8)
    with pytest.raises(ValueError, match="arm must be one of"):
        study.run_cell(SMALL, "thompson", 0)


def test_a_real_study_runs_resumes_and_reports(tmp_path):
    runs = study.run_study(SMALL, tmp_path, progress=False)
    assert len(runs) == len(study.ARMS) * SMALL.steps
    assert set(runs.columns) >= {"arm", "seed", "step", "completions", "reward", "trl_reward",
                                 "G", "G_min", "G_max", "prompts", "eval_reward", "config",
                                 "version", "wall_s"}
    assert list(runs[runs.arm == "uniform"].completions) == [32, 64, 96, 128]
    for arm, d in runs.groupby("arm"):
        assert (d.G * d.prompts == 32).all(), arm  # equal completions in every arm
        assert d.reward.between(0, 1).all() and d.eval_reward.between(0, 1).all()
    uni, knap = runs[runs.arm == "uniform"], runs[runs.arm == "knapsack"]
    assert (uni.G_min == 4).all() and (uni.G_max == 4).all()
    assert (runs[runs.arm == "trl-default"].prompts == 4).all()
    # with nothing masked the prompt-weighted reward is TRL's own
    np.testing.assert_allclose(uni.reward, uni.trl_reward, atol=1e-6)
    assert knap.G_min.min() >= 2 and knap.G_max.max() <= 8
    assert json.loads(runs.config.iloc[0])["budget"] == 32
    for f in ("runs.csv", "summary.csv", "REPORT.md", "reward.png"):
        assert (tmp_path / f).is_file()
    again = study.run_study(SMALL, tmp_path, progress=False)  # resume: cells read back
    pd.testing.assert_frame_equal(again, runs)


def _synthetic(shift, seed=0):
    from support.paired_runs import paired_runs

    return paired_runs(("uniform", "knapsack"), shift, dict(G_min=4, G_max=4, version="x"), seed=seed,
                       eval_reward=True)


@pytest.mark.parametrize("metric", ["mean_reward", "eval_reward"])
def test_the_analysis_sees_a_difference_and_no_difference(metric):
    def diff(df):
        return study.summarise(df).query(
            f"kind == 'difference' and metric == '{metric}'").iloc[0]

    up = diff(_synthetic(0.08))
    assert up.ci_low > 0 and up["name"] == "knapsack - uniform"
    down = diff(_synthetic(-0.08))
    assert down.ci_high < 0
    null = [diff(_synthetic(0.0, seed=k)) for k in range(40)]
    assert np.mean([r.ci_low <= 0 <= r.ci_high for r in null]) >= 0.85
