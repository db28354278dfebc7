"""scaling-family's noise-limited LM training (``lm_noise``): cells, best G with its bootstrap
CI on synthetic tables with a known answer, the summaries' rows, and the runs' determinism on a
tiny transformer."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from grpo_theory.lm import model, policy
from grpo_theory.lm.training.grpo import train_grpo
from grpo_theory.experiments.lm_support.mixture import pass_rates
from grpo_theory.lm.task import EOS, VOCAB, VOCAB_SIZE, eval_set
from grpo_theory.lm.warmup import WarmupConfig
from grpo_theory.studies import scaling_family as sf
from grpo_theory.studies.scaling_family.lm_noise import (LMNoisePart, noise_cells, noise_points,
                                                         noise_report, noise_runs)


def _table(peaks, noise=1e-4, seeds=12, grid=(2, 4, 8, 16, 32), g_pred=(3.6, 20.0)):
    """Synthetic ``lm_noise`` rows: at each p the mean gain peaks at ``peaks[p]`` (falling by
    0.01 per factor 2 away from it), seed noise of sd ``noise``."""
    rng = np.random.default_rng(0)
    rows = []
    for (p, best), gp in zip(peaks.items(), g_pred):
        c1, c3 = 1.0, (gp - 1) ** 2  # so that 1 + sqrt(c3/c1) = gp
        for g in grid:
            for r in range(seeds):
                gain = 0.05 - 0.01 * abs(np.log2(g / best)) + noise * rng.standard_normal()
                rows.append(dict(p=p, G=g, B=64 // g, N=64, run_seed=r, steps=20, lr=1e-4,
                                 optimizer="sgd", J0=0.3, J=0.3 + gain, gain=gain,
                                 V_fixed0=0.5, V_fixed=0.6,
                                 acc_rest=0.3, p_exact=p, c1=c1, c2=1.0, c3=c3, G_pred=gp,
                                 fixed="2*5", run_seconds=1.0))
    return pd.DataFrame(rows)


def test_best_g_and_ci_on_a_known_answer():
    t = _table({0.0: 4, 0.99: 16})
    pts = noise_points(t, n_boot=300)
    assert list(pts.p) == [0.0, 0.99]
    assert list(pts.best_G) == [4, 16] and list(pts.ci_low) == [4, 16]
    assert list(pts.ci_high) == [4, 16] and list(pts.G_grid) == [4, 16]
    assert pts.mean_by_G.iloc[0][4] == pytest.approx(0.05, abs=1e-3)
    text = "\n".join(noise_report(t, n_boot=300))
    assert "4, 16 (non-decreasing: follows" in text and "p = 0 vs 0.99" in text


def test_reversed_order_and_overlapping_cis_are_reported():
    text = "\n".join(noise_report(_table({0.0: 16, 0.99: 4}), n_boot=300))
    assert "does not follow" in text and "p = 0 vs 0.99" in text
    # seed noise far above the between-G differences: wide CIs that overlap
    noisy = noise_points(_table({0.0: 4, 0.99: 16}, noise=0.5), n_boot=300)
    assert (noisy.ci_high - noisy.ci_low).min() > 0
    assert "Pairs of settings whose best-G CIs do not overlap: none" in "\n".join(
        noise_report(_table({0.0: 4, 0.99: 16}, noise=0.5), n_boot=300))


def test_noise_rows_enter_the_summaries():
    empty = {k: pd.DataFrame(columns=list(v)) for k, v in sf.SCHEMA.items()}
    pts = sf.summaries(dict(empty, lm_noise=_table({0.0: 4, 0.99: 16})), n_boot=200)["points"]
    e = pts[pts.source == "lm:noise"]
    assert list(e.label) == ["p=0", "p=0.99"] and list(e.best_G) == [4, 16]
    assert e.in_ci.all()


def test_cells_and_bad_grid():
    m = LMNoisePart(warmup=WarmupConfig(), ps=(0.0, 0.9), grid=(2, 8), N=16, seeds=3)
    cells = noise_cells(m)
    assert [c.id for c in cells] == ["lm_noise_p0.0_G2", "lm_noise_p0.0_G8", "lm_noise_p0.9_G2",
                                     "lm_noise_p0.9_G8"]
    assert {c.kind for c in cells} == {"lm_noise"} and cells[0].config["part"] == "lm_noise"
    assert noise_cells(None) == []
    with pytest.raises(ValueError, match="grid"):
        noise_cells(dataclasses.replace(m, grid=(2, 3)))
    assert sf.SETTINGS["full"].lm_noise is not None
    full = noise_cells(sf.SETTINGS["full"].lm_noise)
    assert all(c.config["N"] % c.config["G"] == 0 for c in full)


def _two_token_policy(digit: int):
    """A tiny transformer whose every position samples ``digit`` or EOS (about 1/2 each):
    single-digit answer ``digit`` has pass rate about 1/4, so groups see both rewards."""
    cfg = model.ModelConfig(d_model=8, n_layers=1, n_heads=2)
    p = model.init_params(jax.random.PRNGKey(0), cfg)
    out = np.zeros((8, VOCAB_SIZE), np.float32)
    out[:, [VOCAB.index(str(digit)), EOS]] = 5.0 / 8
    p = dict(p, out=jnp.asarray(out), ln_f={"g": jnp.zeros(8), "b": jnp.ones(8)})
    return policy.LMPolicy(p, model.make_apply(cfg), model.make_sampler(cfg))


@pytest.mark.slow  # about 26 s alone on one core (compiling a tiny GRPO chunk, pass rates)
def test_runs_are_deterministic_given_the_seed():
    """The same seeds give the same J_p, another seed another; J_p(0) is the starting one."""
    q = eval_set(n=400, seed=3)
    one = np.flatnonzero((q.answer >= 0) & (q.answer <= 9))
    d = int(q.answer[one[0]])
    same = one[q.answer[one] == d]
    fixed, rest = q.subset(same[:1]), q.subset(same[1:4])
    pol = _two_token_policy(d)
    args = (pol, fixed, rest, q.subset(same[:4]), 0.25, 8, 4, 2, 0.1)
    a, b, c = noise_runs(*args, (1, 2)), noise_runs(*args, (1, 2)), noise_runs(*args, (3,))
    assert noise_runs(*args, (1,), "adam")[0]["J"] != a[0]["J"]  # the optimiser is used
    assert 0.1 < a[0]["V_fixed0"] < 0.4  # both rewards occur
    assert a == [dict(r, run_seconds=x["run_seconds"]) for r, x in zip(b, a)]
    assert set(a[0]) == {"run_seed", "J0", "J", "gain", "V_fixed0", "V_fixed", "acc_rest",
                         "run_seconds"}
    assert a[0]["J0"] == a[1]["J0"] == c[0]["J0"] and a[0]["J"] != c[0]["J"]
    assert a[0]["gain"] == pytest.approx(a[0]["J"] - a[0]["J0"]) and a[0]["gain"] != 0
    assert a[0]["J0"] == pytest.approx(0.25 * a[0]["V_fixed0"] + 0.75 * np.mean(
        [float(v) for v in pass_rates(pol, rest)]))
    assert set(a[0]) | {"p", "G", "B", "N", "steps", "lr", "optimizer", "p_exact", "c1", "c2", "c3",
                        "G_pred", "fixed"} == set(sf.SCHEMA["lm_noise"])
    with pytest.raises(ValueError, match="p_exact"):
        noise_runs(pol, fixed, rest, q, 1.0, 8, 4, 2, 0.1, (1,))


def test_train_grpo_rejects_an_unknown_optimizer():
    with pytest.raises(ValueError, match="optimizer"):
        train_grpo(_two_token_policy(3), eval_set(n=4), eval_set(n=4), 8, 4, 2, (2,), 0.1,
                   seed=0, optimizer="rmsprop")
