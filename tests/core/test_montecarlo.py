"""Monte Carlo MSE agrees with the exact MSE within its CI (fixed seeds, 4-sigma bands)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.problems import linear_bandit, sequence_policy

Z = 4.0  # many comparisons: a 4-sigma band keeps the fixed-seed suite far from chance failures
BANDITS = {
    "rand-3x4": gt.SoftmaxBandit.random(jax.random.PRNGKey(0), 3, 4),
    "rand-binary-5x3": gt.SoftmaxBandit.random(jax.random.PRNGKey(1), 5, 3, logit_scale=2.0,
                                                binary=True),
    "linear": linear_bandit(),
    "sequence": sequence_policy(),
}
ESTIMATORS = ["vanilla", "oracle", "grpo", "grpo_mean", "optimal", "grpo_std", "grpo_std_trl"]


# every estimator on every bandit; the (G, B) pairs rotate over bandits to bound compile time
SETTINGS = {"rand-3x4": [(2, 1), (8, 3)], "rand-binary-5x3": [(4, 2)], "linear": [(3, 4)],
            "sequence": [(2, 2), (16, 1)]}


@pytest.mark.parametrize("bname", list(BANDITS))
@pytest.mark.parametrize("name", ESTIMATORS)
def test_exact_mse_inside_mc_confidence_interval(bname, name):
    bandit = BANDITS[bname]
    for i, (G, B) in enumerate(SETTINGS[bname]):
        exact = gt.exact_mse(bandit, name, G, B)
        r = gt.mc_mse(bandit, name, G, B, n_reps=20_000, seed=100 + i)
        assert abs(r.mse - exact) <= Z * r.se, (name, G, B, r.mse, exact, r.se)


# the other engine routes (same law, other draws): PRNG implementation, float32 uniforms, and the
# two-uniform sampler of sample_from_uniforms
@pytest.mark.parametrize("kw", [dict(rng="rbg"), dict(rng="unsafe_rbg"), dict(uniforms="float32"),
                                dict(sampler="separate"), dict(rng="rbg", uniforms="float32"),
                                dict(rng="splitmix"), dict(rng="splitmix", uniforms="uint32")])
def test_engine_routes_agree_with_exact(kw):
    b = BANDITS["rand-3x4"]
    for est, G, B in [("grpo", 8, 3), ("grpo_std", 4, 2)]:
        r = gt.mc_mse(b, est, G, B, n_reps=20_000, seed=3, **kw)
        assert abs(r.mse - gt.exact_mse(b, est, G, B)) <= Z * r.se, (kw, est, r.mse, r.se)


def test_streaming_summary_equals_two_pass_on_the_same_draws():
    # one chunk: redraw the engine's uniforms, compute every squared error, summarise in two passes
    from grpo_theory.core.estimators import get_estimator
    from grpo_theory.core.montecarlo import estimate_gradient, summarize_squared_errors
    from grpo_theory.core.sampling import sample_cells_from_uniforms

    b = BANDITS["linear"]
    p = b.problem()
    R, G, B = 3000, 4, 2
    r = gt.mc_mse(b, "grpo_std", G, B, n_reps=R, seed=9, chunk=R, rng="threefry")
    with jax.enable_x64(True):
        u = jax.random.uniform(jax.random.fold_in(jax.random.PRNGKey(9), 0), (R, B, G + 1))
        x, y, z = sample_cells_from_uniforms(p, u[..., 0], u[..., 1:])
        est = jax.vmap(lambda x, y, z: estimate_gradient(p, get_estimator("grpo_std"), x, y, z))(
            x, y, z)
    est = np.asarray(est)
    err2 = np.sum((est - np.asarray(p.gradient())) ** 2, axis=1)
    mse, se, lo, hi = summarize_squared_errors(err2)
    assert abs(r.mse - mse) <= 1e-13 * mse and abs(r.se - se) <= 1e-10 * se
    assert abs(r.ci_low - lo) <= 1e-12 * mse and abs(r.ci_high - hi) <= 1e-12 * mse
    np.testing.assert_allclose(r.mean, est.mean(0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(r.trace_cov, np.sum(est.var(0, ddof=1)), rtol=1e-10)


def test_result_type_levels():
    r = gt.mc_mse(BANDITS["rand-3x4"], "grpo", 4, n_reps=2_000, seed=1)
    e = r.estimate
    assert (e.value, e.se, e.n) == (r.mse, r.se, 2_000)
    assert r.interval() == (r.ci_low, r.ci_high) and r.value == r.mse
    assert r.conf_int().loc["mse"].tolist() == [r.ci_low, r.ci_high]
    lo99, hi99 = r.interval(alpha=0.01)
    assert lo99 < r.ci_low and hi99 > r.ci_high
    assert abs((hi99 - lo99) / (r.ci_high - r.ci_low) - 2.5758293035489004 / 1.959963984540054) \
        < 1e-12
    assert r.contains(r.ci_high) and not r.contains(r.ci_high * (1 + 1e-9))
    assert r.contains(hi99, alpha=0.01)


def test_no_recompile_on_identical_call():
    from grpo_theory.core.montecarlo import _summary_scan

    b = BANDITS["rand-3x4"]
    gt.mc_mse(b, "grpo", 3, 2, n_reps=500, seed=0, chunk=100)
    n = _summary_scan._cache_size()
    gt.mc_mse(b, "grpo", 3, 2, n_reps=500, seed=0, chunk=100)
    gt.mc_mse(b, "grpo", 3, 2, n_reps=450, seed=4, chunk=100)  # same chunks, other R and seed
    assert _summary_scan._cache_size() == n


def test_mc_bias_and_trace_cov_match_exact_for_grpo_mean():
    b = BANDITS["rand-3x4"]
    G = 4
    r = gt.mc_mse(b, "grpo_mean", G, 2, n_reps=40_000, seed=5)
    g = np.asarray(b.problem().gradient())
    # bias of the self-inclusive mean is -g/G exactly; MC within 4 se per coordinate
    est = np.asarray(gt.mc_estimates(b, "grpo_mean", G, 2, n_reps=40_000, seed=5))
    se = est.std(axis=0, ddof=1) / np.sqrt(40_000)
    assert np.all(np.abs(est.mean(axis=0) - g + g / G) <= Z * se + 1e-15)
    assert np.all(np.abs(r.bias + g / G) <= Z * se * 1.5 + 1e-15)  # same law, other draws
    np.testing.assert_allclose(r.mse, r.trace_cov * (1 - 1 / 40_000) + r.bias_sq_norm, rtol=1e-9)


def test_mc_is_deterministic_and_seed_dependent():
    b = BANDITS["linear"]
    r1 = gt.mc_mse(b, "grpo", 4, 2, n_reps=2_000, seed=7)
    r2 = gt.mc_mse(b, "grpo", 4, 2, n_reps=2_000, seed=7)
    r3 = gt.mc_mse(b, "grpo", 4, 2, n_reps=2_000, seed=8)
    assert r1.mse == r2.mse and r1.mse != r3.mse


def test_chunking_and_padding():
    b = BANDITS["rand-3x4"]
    one = gt.mc_mse(b, "grpo", 4, 1, n_reps=1200, seed=0, chunk=1200)
    again = gt.mc_mse(b, "grpo", 4, 1, n_reps=1200, seed=0, chunk=1200)
    assert one.mse == again.mse
    three = gt.mc_mse(b, "grpo", 4, 1, n_reps=1200, seed=0, chunk=400)  # other draws, same law
    pad = gt.mc_mse(b, "grpo", 4, 1, n_reps=1000, seed=0, chunk=300)  # padded last chunk
    assert pad.n_reps == 1000 and np.isfinite(pad.trace_cov)
    exact = gt.exact_mse(b, "grpo", 4)
    for r in (one, three, pad):
        assert abs(r.mse - exact) <= Z * r.se
    direct = gt.mc_estimates(b, "grpo", 4, 1, n_reps=1000, seed=0)
    np.testing.assert_allclose(float(np.sum(np.var(np.asarray(direct), 0, ddof=1))),
                               pad.trace_cov, rtol=0.15)


def test_sample_groups_shapes_and_frequencies():
    b = BANDITS["rand-3x4"]
    p = b.problem()
    x, y, z = gt.sample_groups(jax.random.PRNGKey(0), p, 20_000, 2)
    assert x.shape == (20_000,) and y.shape == z.shape == (20_000, 2)
    freq = np.bincount(np.asarray(x), minlength=3) / 20_000
    se = np.sqrt(np.asarray(p.prompt_probs) * (1 - np.asarray(p.prompt_probs)) / 20_000)
    assert np.all(np.abs(freq - np.asarray(p.prompt_probs)) <= Z * se)
    assert set(np.unique(np.asarray(z))) <= {0.0, 1.0}


def test_mc_integer_kinds_and_seeds():
    b = BANDITS["rand-3x4"]
    ref = gt.mc_mse(b, "grpo", 4, 2, n_reps=400, seed=3)
    for G, B, R, seed in [(np.int64(4), np.int32(2), np.int64(400), np.int64(3)),
                          (jnp.int32(4), jnp.int32(2), jnp.int32(400), np.uint8(3))]:
        r = gt.mc_mse(b, "grpo", G, B, n_reps=R, seed=seed)
        assert r.mse == ref.mse and isinstance(r.group_size, int)
    big = gt.mc_mse(b, "grpo", 4, 2, n_reps=400, seed=2**70 + 3)  # any integer seed
    neg = gt.mc_mse(b, "grpo", 4, 2, n_reps=400, seed=-5)
    assert np.isfinite(big.mse) and np.isfinite(neg.mse) and big.mse != ref.mse
    # explicit keys: raw or typed, of any implementation, for every rng route
    for key in (jax.random.PRNGKey(3), jax.random.key(3), jax.random.key(3, impl="rbg")):
        for rng in ("threefry", "rbg", "unsafe_rbg", "splitmix"):
            a = gt.mc_mse(b, "grpo", 4, 2, n_reps=400, key=key, rng=rng)
            assert a.mse == gt.mc_mse(b, "grpo", 4, 2, n_reps=400, key=key, rng=rng).mse


def test_mc_bad_inputs():
    b = BANDITS["rand-3x4"]
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        gt.mc_mse(b, "grpo", 1)
    with pytest.raises(ValueError, match="n_reps must be an integer >= 2"):
        gt.mc_mse(b, "grpo", 2, n_reps=1)
    with pytest.raises(ValueError, match="batch_size"):
        gt.mc_mse(b, "grpo", 2, batch_size=0)
    with pytest.raises(ValueError, match="bandit must be"):
        gt.mc_mse("not a bandit", "grpo", 2)
    with pytest.raises(ValueError, match="estimator must be one of"):
        gt.mc_mse(b, "nope", 2)
    for chunk in (0, -3, 2.5, "10", True):
        with pytest.raises(ValueError, match="chunk must be an integer >= 1"):
            gt.mc_mse(b, "grpo", 2, n_reps=100, chunk=chunk)
    with pytest.raises(ValueError, match=r"chunk=10000000000 .*use chunk <= \d+"):
        gt.mc_mse(b, "grpo", 2, n_reps=100, chunk=10**10)
    with pytest.raises(ValueError, match="one Monte Carlo replicate .*B=100000, G=100000"):
        gt.mc_mse(b, "grpo", 100_000, batch_size=100_000, n_reps=100)
    for seed in (1.0, "3", None):
        with pytest.raises(ValueError, match="seed must be an integer"):
            gt.mc_mse(b, "grpo", 2, n_reps=100, seed=seed)
    for G in (4.0, "4", jnp.float32(4)):
        with pytest.raises(ValueError, match="group_size must be an integer"):
            gt.mc_mse(b, "grpo", G, n_reps=100)
    with pytest.raises(ValueError, match="rng must be one of"):
        gt.mc_mse(b, "grpo", 2, n_reps=100, rng="mt19937")
    with pytest.raises(ValueError, match="uniforms must be one of"):
        gt.mc_mse(b, "grpo", 2, n_reps=100, uniforms="float16")
    with pytest.raises(ValueError, match="sampler must be one of"):
        gt.mc_mse(b, "grpo", 2, n_reps=100, sampler="alias")


def test_splitmix_is_the_reference_generator_and_uniform():
    """SplitMix64's reference outputs from seed 0 (the generator that seeds xoshiro), and its
    uniforms pass a chi-square test of 1024 equal cells and of the 32 x 32 pairs of consecutive
    draws; the rival, the same Weyl counter without the mixing function, fails the pair test."""
    from scipy.stats import chi2

    from grpo_theory.core.montecarlo import splitmix_bits, splitmix_uniforms

    with jax.enable_x64(True):
        assert [int(v) for v in splitmix_bits(jnp.uint64(0), 3)] == [
            0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
        u = np.asarray(splitmix_uniforms(jax.random.PRNGKey(0), (2**20,)))
        gamma = np.uint64(0x9E3779B97F4A7C15)
        raw = ((np.arange(1, 2**20 + 1, dtype=np.uint64) * gamma) >> np.uint64(11)
               ).astype(np.float64) * 2.0**-53  # the counter without mix64

    def pair_p(v):
        a = np.minimum((v[:-1:2] * 32).astype(int), 31)
        b = np.minimum((v[1::2] * 32).astype(int), 31)
        counts = np.bincount(a * 32 + b, minlength=1024)
        e = counts.sum() / 1024
        return chi2.sf(((counts - e) ** 2 / e).sum(), 1023)

    assert 0.0 <= u.min() and u.max() < 1.0
    counts = np.bincount(np.minimum((u * 1024).astype(int), 1023), minlength=1024)
    e = u.size / 1024
    assert chi2.sf(((counts - e) ** 2 / e).sum(), 1023) > 1e-4
    assert pair_p(u) > 1e-4
    assert pair_p(raw) < 1e-12
