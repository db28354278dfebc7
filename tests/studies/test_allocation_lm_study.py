"""The small-transformer allocation study: a tiny run writes its tables, resumes, and the analysis
says what its intervals show (a rule better or worse than fixed G* by construction is called so)."""

import json

import jax
import numpy as np
import pandas as pd
import pytest

from grpo_theory.lm import model, policy
from grpo_theory.studies.allocation_lm import analysis, study

CFG = model.ModelConfig(d_model=32, n_layers=1, n_heads=2)
ARMS = ("fixed", "conformal_stopping", "optimal", "fixed-8", "scheduled-8")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("alloc_lm")
    pol = policy.LMPolicy(model.init_params(jax.random.PRNGKey(0), CFG), model.make_apply(CFG),
                          model.make_sampler(CFG))
    cfg = study.StudyConfig(seeds=2, batch=6, steps=4, n_pool=40, n_eval=16, gstar=4,
                            grid=(2, 4), fractions=(0.5, 1.0), every=2, sched_questions=8,
                            sched_samples=3)
    runs = study.run_study(cfg, out, rules=ARMS, policy=pol,
                           progress=False)
    return cfg, out, pol, runs


def test_tiny_run_writes_tables_and_resumes(tiny_run):
    cfg, out, pol, runs = tiny_run
    for f in ("runs.csv", "summary.csv", "gstar.json", "REPORT.md", "accuracy.png"):
        assert (out / f).is_file(), f
    budget = cfg.batch * 4 * cfg.steps
    assert set(runs.rule) == set(ARMS)
    for (_, _), d in runs.groupby(["rule", "seed"]):
        assert d.rollouts.iloc[-1] >= budget and d.rollouts.iloc[0] == 0
    # every run starts from the same policy: the same exact accuracy at step 0
    assert runs[runs.step == 0].accuracy.nunique() == 1
    fixed = runs[runs.rule == "fixed"]
    assert np.all(np.diff(fixed[fixed.seed == 0].rollouts) == cfg.batch * 4)
    # fixed-8 spends the same N = B G* = 24 a step as 3 prompts x 8
    f8 = runs[(runs.rule == "fixed-8") & (runs.step > 0)]
    assert set(f8.G) == {8.0} and set(f8.B) == {3.0}
    assert np.all(np.diff(runs[(runs.rule == "fixed-8") & (runs.seed == 0)].rollouts) == 24)
    sc = runs[(runs.rule == "scheduled-8") & (runs.step > 0)]
    assert np.all(sc.G * sc.B == 24) and set(sc.G) <= {3.0, 4.0, 6.0, 8.0}
    assert np.all(sc[sc.step <= 2].G == 8.0)  # the first estimate comes after step 2
    sm = pd.read_csv(out / "summary.csv")
    assert len(sm) == len(ARMS) * 2 and set(sm.seeds) == {2}
    assert set(sm[sm.rule == "scheduled-8"].reference) == {"fixed-8"}
    assert "G* = 4 (given)" in (out / "REPORT.md").read_text()
    # resume: the cells are read back, not rerun
    stamp = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    again = study.run_study(cfg, out, rules=ARMS, policy=pol,
                            progress=False)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()} == stamp
    pd.testing.assert_frame_equal(again.reset_index(drop=True), runs.reset_index(drop=True),
                                  check_dtype=False)


def _synthetic(shift: float, n_seeds: int = 16) -> pd.DataFrame:
    """Two rules whose accuracy curves differ by ``shift`` (plus seed noise)."""
    rng = np.random.default_rng(0)
    cfg = json.dumps(dict(batch=4))
    rows = []
    for rule, dz in (("fixed", 0.0), ("knapsack", shift)):
        for s in range(n_seeds):
            noise = rng.normal(0, 0.01)
            for t in range(11):
                rows.append(dict(rule=rule, seed=s, step=t, rollouts=8.0 * t,
                                 accuracy=0.3 + 0.02 * t + (dz + noise) * (t > 0), budget=80.0,
                                 B=4.0 if t else np.nan, config=cfg, version="x"))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("shift,word", [(0.05, "higher"), (-0.05, "lower"),
                                        (0.0, "not distinguishable")])
def test_the_verdicts_follow_the_intervals(shift, word):
    sm = analysis.summarise(_synthetic(shift), (0.5, 1.0), n_boot=2000)
    r = sm[(sm.rule == "knapsack") & (sm.fraction == 1.0)].iloc[0]
    assert r.delta == pytest.approx(shift, abs=0.01)
    assert analysis._verdict(r).startswith(word)
    f = sm[(sm.rule == "fixed") & (sm.fraction == 0.5)].iloc[0]
    assert f.accuracy == pytest.approx(0.3 + 0.1, abs=0.01)  # step 5 at 40 of 80 responses


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="warmup"):
        study.StudyConfig(warmup="medium")
    with pytest.raises(ValueError, match="seeds"):
        study.StudyConfig(seeds=0)
    with pytest.raises(ValueError, match="fractions"):
        study.StudyConfig(fractions=(0.0, 1.0))
    with pytest.raises(ValueError, match="including 'fixed'"):
        study.run_study(study.StudyConfig(), tmp_path, rules=("knapsack",), policy=object())
