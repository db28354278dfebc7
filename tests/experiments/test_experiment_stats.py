"""The reports' shared statistics (grpo_theory.experiments.stats) against brute force and scipy."""

import itertools

import jax
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from grpo_theory.core.stats import Estimate
from grpo_theory.experiments import stats as st
from grpo_theory.experiments.runner import key_seed


def _exact_argmin_freq(values_by_option):
    """The exact bootstrap distribution of the argmin: every resample of every option
    (n^n equally likely index tuples per option), ties to the smallest option."""
    opts = sorted(values_by_option)
    per = []
    for o in opts:
        x = np.asarray(values_by_option[o], float)
        per.append([x[list(ix)].mean() for ix in itertools.product(range(x.size), repeat=x.size)])
    counts = np.zeros(len(opts))
    for combo in itertools.product(*per):
        counts[int(np.argmin(combo))] += 1
    return counts / counts.sum()


def test_bootstrap_argmin_matches_the_exact_bootstrap_distribution():
    vals = {2: [1.0, 3.0], 8: [2.0, 2.5], 4: [0.5, 4.0]}
    exact = _exact_argmin_freq(vals)  # 4^3 = 64 equally likely resample combinations
    b = st.bootstrap_argmin(vals, n_boot=40_000, seed=3)
    assert b.options == (2, 4, 8)
    assert np.allclose(b.freq, exact, atol=0.01)
    assert b.freq.sum() == pytest.approx(1.0)
    assert b.best == 2  # means 2, 2.25, 2.25
    assert np.allclose(b.means, [2.0, 2.25, 2.25])


def test_bootstrap_argmin_best_is_the_smallest_mean_and_ties_go_to_the_smallest_option():
    b = st.bootstrap_argmin({4: [1.0, 1.0], 2: [1.0, 1.0], 8: [1.0, 1.0]}, n_boot=50)
    assert b.best == 2 and b.freq.tolist() == [1.0, 0.0, 0.0] and (b.lo, b.hi) == (2, 2)
    clear = st.bootstrap_argmin({2: [5.0, 6, 7], 4: [0.0, 0.1, 0.2], 8: [3.0, 3, 3]},
                                n_boot=200)
    assert clear.best == 4 and (clear.lo, clear.hi) == (4, 4) and clear.p_best == 1.0
    assert clear.support == {4: 1.0} and clear.contains(4) and not clear.contains(8)


def test_bootstrap_argmin_interval_is_the_inverted_cdf_percentile():
    rng = np.random.default_rng(0)
    vals = {G: rng.normal(0.0, 1.0, 5) for G in (2, 4, 8, 16)}
    b = st.bootstrap_argmin(vals, n_boot=999, seed=11)
    # rebuild the resampled argmins from the frequencies; numpy's inverted-cdf percentile
    arg = np.repeat(np.arange(4), np.round(b.freq * 999).astype(int))
    lo, hi = np.percentile(arg, [2.5, 97.5], method="inverted_cdf")
    assert (b.lo, b.hi) == (b.options[int(lo)], b.options[int(hi)])


def test_bootstrap_argmin_seed_rules():
    vals = {1: np.arange(6.0), 2: np.arange(6.0) + 0.3}
    a = st.bootstrap_argmin(vals, n_boot=300, seed=5)
    assert np.array_equal(a.freq, st.bootstrap_argmin(vals, n_boot=300, seed=5).freq)
    key = jax.random.PRNGKey(7)
    k = st.bootstrap_argmin(vals, n_boot=300, seed=key)
    assert np.array_equal(k.freq, st.bootstrap_argmin(vals, n_boot=300,
                                                      seed=key_seed(key)).freq)
    with pytest.raises(ValueError, match="values_by_option"):
        st.bootstrap_argmin({}, n_boot=10)
    with pytest.raises(ValueError, match=r"values_by_option\[2\]"):
        st.bootstrap_argmin({1: [1.0], 2: [np.nan]})
    with pytest.raises(ValueError, match="n_boot"):
        st.bootstrap_argmin(vals, n_boot=0)
    with pytest.raises(ValueError, match="level"):
        st.bootstrap_argmin(vals, level=1.0)
    with pytest.raises(TypeError, match="seed"):
        st.bootstrap_argmin(vals, seed="x")


def test_interval_from_freq():
    assert st.interval_from_freq([2, 4, 8], [0.0, 1.0, 0.0]) == (4, 4)
    assert st.interval_from_freq([2, 4, 8], [0.5, 0.0, 0.5]) == (2, 8)
    assert st.interval_from_freq([2, 4, 8], [0.025, 0.95, 0.025]) == (2, 4)  # F(4) = 0.975
    assert st.interval_from_freq([2, 4, 8], [0.02, 0.96, 0.02]) == (4, 4)
    with pytest.raises(ValueError, match="freq"):
        st.interval_from_freq([2, 4], [1.0])


def test_bootstrap_ci_is_the_percentile_interval_of_resampled_means():
    v = np.array([1.0, 2.0, 4.0, 8.0])
    lo, hi = st.bootstrap_ci(v, n_boot=4000, seed=2)
    rng = np.random.default_rng(2)
    m = v[rng.integers(0, 4, (4000, 4))].mean(1)
    assert (lo, hi) == (np.quantile(m, 0.025), np.quantile(m, 0.975))
    assert v.min() <= lo < hi <= v.max()
    assert st.bootstrap_ci([3.0, 3.0], n_boot=10) == (3.0, 3.0)
    assert all(np.isnan(st.bootstrap_ci([], n_boot=10)))
    lo50, hi50 = st.bootstrap_ci(v, n_boot=4000, seed=2, level=0.5)
    assert lo <= lo50 <= hi50 <= hi


def test_bootstrap_ratio_ci_resamples_each_sample_within_itself():
    f, p = np.array([2.0, 3.0, 5.0]), np.array([1.0, 1.5, 2.0, 2.5])
    lo, hi = st.bootstrap_ratio_ci(f, p, n_boot=3000, seed=4)
    rng = np.random.default_rng(4)
    b = f[rng.integers(0, 3, (3000, 3))].mean(1) / p[rng.integers(0, 4, (3000, 4))].mean(1)
    assert np.allclose((lo, hi), (np.quantile(b, 0.025), np.quantile(b, 0.975)), rtol=1e-12)
    assert lo < f.mean() / p.mean() < hi
    assert st.bootstrap_ratio_ci([4.0], [2.0], n_boot=10) == (2.0, 2.0)
    with pytest.raises(ValueError, match="non-empty"):
        st.bootstrap_ratio_ci([], [1.0])


def test_spearman_against_scipy_and_ranks():
    rng = np.random.default_rng(1)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    y[3] = y[5]  # a tie: average ranks
    r = st.spearman(x, y)
    ref = sps.spearmanr(x, y)
    assert r.rho == pytest.approx(ref.statistic) and r.pvalue == pytest.approx(ref.pvalue)
    brute = np.corrcoef(pd.Series(x).rank(), pd.Series(y).rank())[0, 1]
    assert r.rho == pytest.approx(brute) and r.n == 12
    assert st.spearman([1, 2, 3, 4], [10, 20, 30, 40]).rho == pytest.approx(1.0)
    assert st.spearman([1, 2, 3, 4], [4, 3, 2, 1]).rho == pytest.approx(-1.0)
    assert np.isnan(st.spearman([1, 2], [1, 2]).rho)
    assert np.isnan(st.spearman([1, 2, 3], [5, 5, 5]).pvalue)
    with pytest.raises(ValueError, match="x and y"):
        st.spearman([1, 2, 3], [1, 2])


def test_ratio_ci_delta_method_against_simulation():
    num, den = Estimate(2.0, 0.02, 100), Estimate(4.0, 0.08, 100)
    r, lo, hi = st.ratio_ci(num, den)
    se = np.sqrt(0.02**2 + 0.25 * 0.08**2) / 4.0
    assert r == 0.5 and (hi - lo) / 2 == pytest.approx(1.959963984540054 * se)
    rng = np.random.default_rng(0)
    sim = rng.normal(2.0, 0.02, 400_000) / rng.normal(4.0, 0.08, 400_000)
    assert np.std(sim) == pytest.approx(se, rel=0.02)  # small relative errors: delta holds
    r0, lo0, hi0 = st.ratio_ci(Estimate(0.0, 0.1, 10), Estimate(2.0, 0.1, 10), alpha=0.1)
    assert r0 == 0.0 and hi0 == pytest.approx(1.6448536269514722 * 0.05)
    with pytest.raises(ValueError, match="den.value"):
        st.ratio_ci(num, Estimate(0.0, 0.1, 10))
    with pytest.raises(TypeError, match="num"):
        st.ratio_ci(2.0, den)


def test_markdown_table():
    df = pd.DataFrame({"G": [2, 8], "mse": [0.123456, 12.0], "ok": [True, False],
                       "name": ["a", "b"]})
    assert st.markdown_table(df) == ("| G | mse | ok | name |\n|---|---|---|---|\n"
                                     "| 2 | 0.1235 | True | a |\n| 8 | 12 | False | b |")
    t = st.markdown_table(df, floatfmt={"mse": ".2f", "ok": lambda v: "PASS" if v else "FAIL"})
    assert t.splitlines()[2] == "| 2 | 0.12 | PASS | a |"
    assert st.markdown_table(df.set_index("G"), index=True).splitlines()[0].startswith("| G |")
    with pytest.raises(ValueError, match="floatfmt"):
        st.markdown_table(df, floatfmt={"nope": ".2f"})
    with pytest.raises(TypeError, match="df"):
        st.markdown_table([[1, 2]])


def test_integer_ticks_label_a_log_axis_at_the_group_sizes():
    from grpo_theory.plotting import integer_ticks, plt

    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.plot([2, 32], [1, 2])
    assert integer_ticks(ax.xaxis, [32, 2, 8.0, 8]) == [2, 8, 32]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "8", "32"]
    assert list(ax.xaxis.get_minorticklocs()) == []
    plt.close(fig)


def test_minimum_detectable_effect_has_the_stated_power():
    """A true difference of one MDE is detected by the two-sided 5% test in 80% of draws (normal
    estimate with known se); the rival rule 1.96 se (no power term) detects it half the time."""
    from scipy import stats as st

    from grpo_theory.experiments import minimum_detectable_effect

    rng = np.random.default_rng(0)
    mde = minimum_detectable_effect(1.0)
    est = rng.normal(mde, 1.0, 40_000)
    assert abs(np.mean(np.abs(est) > st.norm.ppf(0.975)) - 0.8) < 0.01
    est = rng.normal(st.norm.ppf(0.975), 1.0, 40_000)
    assert abs(np.mean(np.abs(est) > st.norm.ppf(0.975)) - 0.5) < 0.01
    # paired t with 8 seeds: simulated t statistics of differences one MDE away
    se_true, n = 0.1, 8
    d = rng.normal(minimum_detectable_effect(se_true, df=n - 1), se_true * np.sqrt(n),
                   (20_000, n))
    t = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(n))
    assert abs(np.mean(np.abs(t) > st.t.ppf(0.975, n - 1)) - 0.8) < 0.03
    assert np.isnan(minimum_detectable_effect(float("nan")))
    assert np.isnan(minimum_detectable_effect(1.0, df=0))
    with pytest.raises(ValueError, match="power"):
        minimum_detectable_effect(1.0, power=1.5)
