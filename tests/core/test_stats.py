"""core.stats: one Estimate type, z quantiles from scipy, streaming moments (Chan merge)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from grpo_theory.core.stats import (Estimate, estimate_mean, moments_estimate, moments_init,
                                    moments_update, z_value)


def test_z_value_is_scipy_quantile():
    assert z_value() == norm.ppf(0.975)
    assert abs(z_value(0.05) - 1.959963984540054) < 1e-15
    assert abs(z_value(0.10) - 1.6448536269514722) < 1e-15
    assert z_value(0.01) == norm.ppf(0.995)


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5, "0.05", None, True])
def test_z_value_rejects_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        z_value(alpha)


def test_estimate_interval_and_contains():
    e = Estimate(2.0, 0.5, 100)
    lo, hi = e.interval()
    assert lo == 2.0 - z_value(0.05) * 0.5 and hi == 2.0 + z_value(0.05) * 0.5
    ci = e.conf_int()  # the table of the Result interface holds the same numbers
    assert list(ci.index) == ["value"] and list(ci.columns) == ["lower", "upper"]
    assert (ci.loc["value", "lower"], ci.loc["value", "upper"]) == (lo, hi)
    lo90, hi90 = e.interval(alpha=0.10)
    assert lo < lo90 < hi90 < hi
    assert e.contains(2.9) and not e.contains(3.0)
    assert e.zscore(1.0) == 2.0 and float(e) == 2.0
    assert Estimate(1.0, 0.0, 5).zscore(1.0) == 0.0


def test_estimate_mean_matches_numpy():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=1000)
    e = estimate_mean(x)
    assert e.n == 1000 and e.value == x.mean()
    assert abs(e.se - x.std(ddof=1) / np.sqrt(1000)) < 1e-15
    with pytest.raises(ValueError, match="at least 2"):
        estimate_mean([1.0])


def test_moments_merge_equals_two_pass_with_mask_and_vectors():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1000, 3)) * [1.0, 10.0, 0.1] + [5.0, -2.0, 0.0]
    st = moments_init((3,))
    for start in range(0, 1000, 300):  # uneven chunks; the last one padded and masked
        blk = np.zeros((300, 3))
        n = min(300, 1000 - start)
        blk[:n] = x[start:start + n]
        blk[n:] = 1e6  # padding must not leak
        st = moments_update(st, blk, (np.arange(300) < n).astype(float))
    assert float(st.count) == 1000
    np.testing.assert_allclose(np.asarray(st.mean), x.mean(0), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(np.asarray(st.m2) / 999, x.var(0, ddof=1), rtol=1e-12)


def test_moments_stable_where_raw_sums_cancel():
    # mean 1e9, sd 1e-3: sum x^2 - n mean^2 loses every digit in float64; the merge does not
    x = 1e9 + np.random.default_rng(2).normal(0.0, 1e-3, size=4000)
    st = moments_init(())
    for blk in np.split(x, 8):
        st = moments_update(st, blk)
    e = moments_estimate(st)
    ref = np.var(x - 1e9, ddof=1)
    naive = (np.sum(x**2) - 4000 * np.mean(x) ** 2) / 3999  # what raw running sums would give
    assert abs(naive - ref) > 1.0 * ref
    assert abs(float(st.m2) / 3999 - ref) <= 1e-5 * ref
    assert abs(e.se - np.sqrt(ref / 4000)) <= 1e-5 * np.sqrt(ref / 4000)


def test_moments_inside_lax_scan():
    x = jnp.asarray(np.random.default_rng(3).exponential(size=(10, 50)))

    @jax.jit
    def run(x):
        return jax.lax.scan(lambda s, b: (moments_update(s, b), None), moments_init(()), x)[0]

    e = moments_estimate(run(x))
    ref = estimate_mean(np.asarray(x).ravel())
    assert e.n == 500 and abs(e.value - ref.value) < 1e-13 and abs(e.se - ref.se) < 1e-14
