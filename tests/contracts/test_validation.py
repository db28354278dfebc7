"""Bad input: one test per defect category of the fuzz campaign, plus a hypothesis fuzz test.

Every public entry point must answer bad input with a ``ValueError`` (or ``TypeError``) raised
by the package itself and naming the argument, never a raw NumPy/JAX/Python error, an unbounded
allocation or a silently wrong result.
"""

import os
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grpo_theory as gt
from grpo_theory import _validation as V
from grpo_theory.core.policies import MAX_SEQUENCES, n_sequences
from grpo_theory.lm import model as lm_model
from grpo_theory.lm.policy import LMPolicy, score_contractions

PKG = os.path.dirname(gt.__file__)

M = np.full((2, 3), 0.5)
L0 = np.zeros((2, 3))


def _raised_by_package(exc: BaseException) -> bool:
    """The exception's innermost frame is in grpo_theory (not NumPy, JAX or Python internals)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(PKG)


def _refused(fn, *names):
    """``fn()`` raises a package ValueError whose message names one of ``names``."""
    with pytest.raises(ValueError) as info:
        fn()
    msg = str(info.value)
    assert any(n in msg for n in names), msg
    assert _raised_by_package(info.value), traceback.format_tb(info.value.__traceback__)[-1]
    return msg


# --- 1. zero prompts / zero responses (was ZeroDivisionError) ---------------------------------
def test_empty_axes_are_refused_naming_the_argument():
    _refused(lambda: gt.SoftmaxBandit(np.zeros((0, 3)), np.zeros((0, 3))), "logits")
    _refused(lambda: gt.SoftmaxBandit(np.zeros((2, 0)), np.zeros((2, 0))), "logits")
    _refused(lambda: gt.LinearSoftmaxBandit(np.zeros((0, 3, 2)), np.zeros(2), np.zeros((0, 3))),
             "features")
    _refused(lambda: gt.LinearSoftmaxBandit(np.zeros((2, 3, 0)), np.zeros(0), M), "features")
    _refused(lambda: gt.SequencePolicy(np.zeros((0, 2, 3, 3)), np.zeros((0, 7)), 2, 2), "params")
    _refused(lambda: gt.SoftmaxBandit.random(0, 0, 3), "n_prompts")
    _refused(lambda: gt.SoftmaxBandit.random(0, 2, 0), "n_responses")
    _refused(lambda: gt.DiscreteProblem(jnp.zeros(0), jnp.zeros((0, 3)), jnp.zeros((0, 3, 1)),
                                        jnp.zeros((0, 3))), "prompt_probs")
    _refused(lambda: gt.SequencePolicy.random(0, 1, 0, 2), "vocab_size")
    _refused(lambda: gt.SequencePolicy.random(0, 1, 2, 0), "horizon")


# --- 2. strings (was NumPy's "could not convert string to float") ------------------------------
def test_strings_and_objects_are_refused():
    _refused(lambda: gt.SoftmaxBandit([["a", "b", "c"]] * 2, M), "logits")
    _refused(lambda: gt.SoftmaxBandit(L0, "0.5"), "reward_means")
    _refused(lambda: gt.SoftmaxBandit(L0, M, prompt_probs=["0.5", "0.5"]), "prompt_probs")
    _refused(lambda: gt.LinearSoftmaxBandit(np.zeros((2, 3, 1)), ["x"], M), "theta")
    _refused(lambda: gt.SequencePolicy(np.full((1, 1, 3, 3), "0"), np.zeros((1, 3)), 2, 1),
             "params")
    # a reward callable that returns strings
    _refused(lambda: gt.SequencePolicy(np.zeros((1, 1, 3, 3)), lambda *a: "high", 2, 1), "reward")
    _refused(lambda: gt.SequencePolicy(np.zeros((1, 1, 3, 3)), np.zeros((1, 3)), "2", 1),
             "vocab_size")
    _refused(lambda: gt.SequencePolicy(np.zeros((1, 1, 3, 3)), np.zeros((1, 3)), 2, 1,
                                       eos="False"), "eos")
    _refused(lambda: gt.DiscreteProblem.create(["1"], [[1.0]], [[[0.0]]], [[0.5]]),
             "prompt_probs")
    _refused(lambda: gt.SoftmaxBandit(np.array([[object(), 1, 2]] * 2), M), "logits")


# --- 3. seeds: non-integer (was a JAX TypeError), huge (was OverflowError) ----------------------
def test_seeds_any_integer_one_reduction_and_non_integers_refused():
    np.testing.assert_array_equal(V.seed_key(5), jax.random.PRNGKey(5))
    for seed in (2**70, -1, -(2**80), np.uint64(2**64 - 1), np.int8(-3), jnp.int32(7)):
        b1 = gt.SoftmaxBandit.random(seed, 2, 3)
        b2 = gt.SoftmaxBandit.random(seed, 2, 3)
        np.testing.assert_array_equal(b1.params, b2.params)  # deterministic
    # distinct huge seeds give distinct keys (the high words are folded in, not dropped)
    assert not np.array_equal(V.seed_key(2**70), V.seed_key(2**70 + 2**40))
    # an integer seed and the key it stands for give the same policy
    np.testing.assert_array_equal(gt.SoftmaxBandit.random(11, 2, 3).params,
                                  gt.SoftmaxBandit.random(jax.random.PRNGKey(11), 2, 3).params)
    np.testing.assert_array_equal(gt.SoftmaxBandit.random(np.int64(11), 2, 3).params,
                                  gt.SoftmaxBandit.random(11, 2, 3).params)
    for bad in (1.5, "7", None, True, np.float32(2.0), [1, 2]):
        _refused(lambda: gt.SoftmaxBandit.random(bad, 2, 3), "key", "seed")
        _refused(lambda: gt.SequencePolicy.random(bad, 1, 2, 2), "key", "seed")
    b = gt.SoftmaxBandit(L0, M)
    _refused(lambda: b.sample_groups(2.5, 2, 3), "key", "seed")
    x, y, z = b.sample_groups(2**70, 2, 3)
    assert y.shape == (2, 3)
    _refused(lambda: gt.mc_mse(b, "grpo", 4, n_reps=8, seed=1.5), "seed")
    # the named example problems reduce seeds the same way
    from grpo_theory import problems

    assert problems.default_bandit(2**70, 2, 3).params.shape == (2, 3)
    for make in (problems.default_bandit, problems.linear_bandit, problems.sequence_policy):
        _refused(lambda: make(1.5), "seed")


# --- 4. unbounded enumeration: count first, refuse before allocating ---------------------------
def test_sequence_policy_size_is_checked_before_enumerating():
    assert n_sequences(50, 10) == sum(50**l for l in range(11))
    t0 = time.perf_counter()
    msg = _refused(lambda: gt.SequencePolicy.random(0, 1, 50, 10), "responses")
    assert f"{n_sequences(50, 10):,}" in msg and f"{MAX_SEQUENCES:,}" in msg
    msg = _refused(lambda: gt.SequencePolicy(np.zeros((1, 10, 51, 51)), np.zeros((1, 1)), 50, 10),
                   "responses")
    assert "vocab_size=50" in msg and "horizon=10" in msg
    # within the response count but not the memory: refused by the memory estimate
    msg = _refused(lambda: gt.SequencePolicy.random(0, 4000, 10, 6), "GiB")
    assert "SequencePolicy enumeration" in msg and "P=4000" in msg
    assert time.perf_counter() - t0 < 5.0  # nothing was enumerated


# --- 5. complex values (were silently cast to their real part) ---------------------------------
def test_complex_inputs_are_refused():
    _refused(lambda: gt.SoftmaxBandit(L0 + 1j, M), "logits")
    _refused(lambda: gt.SoftmaxBandit(L0, M + 0j), "reward_means")
    _refused(lambda: gt.LinearSoftmaxBandit(np.zeros((2, 3, 2)) + 1j, np.zeros(2), M), "features")
    _refused(lambda: gt.SequencePolicy(np.zeros((1, 1, 3, 3)) + 1j, np.zeros((1, 3)), 2, 1),
             "params")
    p = gt.SoftmaxBandit(L0, M).problem()
    _refused(lambda: gt.DiscreteProblem(p.prompt_probs, p.probs, p.scores + 1j, p.reward_means),
             "scores")
    b = gt.SoftmaxBandit(L0, M)
    _refused(lambda: b.with_params(L0 + 1j), "params")
    _refused(lambda: b.log_probs(L0 + 1j), "params")
    _refused(lambda: b.with_params(np.zeros((3, 2))), "params")  # wrong shape


# --- 6. DiscreteProblem: validated when concrete, never on tracers ------------------------------
def test_discrete_problem_validates_concrete_arrays_only():
    p = gt.SoftmaxBandit(np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]]), M).problem()
    f, pi, s, mu = p.prompt_probs, p.probs, p.scores, p.reward_means
    _refused(lambda: gt.DiscreteProblem(f * 0.9, pi, s, mu), "prompt_probs")
    _refused(lambda: gt.DiscreteProblem(f, pi * 1.5, s, mu), "probs")
    _refused(lambda: gt.DiscreteProblem(f, -pi, s, mu), "probs")
    _refused(lambda: gt.DiscreteProblem(f, pi, s, mu + 0.6), "reward_means")
    _refused(lambda: gt.DiscreteProblem(f, pi, s, mu - 0.6), "reward_means")
    _refused(lambda: gt.DiscreteProblem(f, pi, s.at[0, 0, 0].set(jnp.nan), mu), "scores")
    _refused(lambda: gt.DiscreteProblem(f, pi, s[:, :2], mu), "scores")
    _refused(lambda: gt.DiscreteProblem(f[:1], pi, s, mu), "prompt_probs")
    _refused(lambda: gt.DiscreteProblem.create(f, pi, s, np.full((2, 3), 2.0)), "reward_means")
    ok = gt.DiscreteProblem.create(np.asarray(f), np.asarray(pi), np.asarray(s), np.asarray(mu))
    assert ok.objective() == pytest.approx(float(p.objective()), abs=1e-15)
    # JAX rebuilds the pytree with tracers and sentinels: no validation there ...
    assert float(jax.jit(lambda q: q.objective())(p)) == pytest.approx(0.5, abs=1e-15)
    jax.tree_util.tree_map(lambda a: None, p)
    vals = jax.vmap(lambda q: q.objective())(jax.tree_util.tree_map(lambda a: a[None], p))
    assert vals.shape == (1,)
    # ... nor when the user builds one from tracers inside jit (bad sums cannot be checked there)
    out = jax.jit(lambda a: gt.DiscreteProblem(a, pi, s, mu).objective())(f * 0.9)
    assert np.isfinite(float(out))


def test_prompt_baseline_of_the_wrong_length_is_refused_in_monte_carlo():
    b = gt.SoftmaxBandit(L0, M)  # P = 2; JAX indexing used to clamp the third entry away
    est = gt.prompt_baseline([0.1, 0.2, 0.3])
    _refused(lambda: gt.mc_mse(b, est, 2, 2, n_reps=8), "baseline", "n_prompts")
    _refused(lambda: gt.mc_estimates(b, est, 2, 2, n_reps=8), "baseline", "n_prompts")
    _refused(lambda: gt.exact_mse(b, est, 2, 2), "b")


# --- 7. overflowing linear features (were NaN) -------------------------------------------------
def test_linear_bandit_overflow_is_refused():
    feats = np.full((2, 3, 2), 1e200)
    msg = _refused(lambda: gt.LinearSoftmaxBandit(feats, np.full(2, 1e200), M), "features @ theta")
    assert "1e+200" in msg
    f2 = np.zeros((2, 3, 1))
    f2[0, 0, 0], f2[0, 1, 0] = 1e308, -1e308  # finite logits, infinite spread
    _refused(lambda: gt.LinearSoftmaxBandit(f2, np.ones(1), M), "features @ theta")
    _refused(lambda: gt.SoftmaxBandit(np.array([[1e308, -1e308, 0.0], [0, 0, 0]]), M), "logits")
    # large but representable logits are fine and stay exact
    b = gt.LinearSoftmaxBandit(np.full((2, 3, 2), 1e100), np.full(2, 1e-100), M)
    np.testing.assert_allclose(b.probs(), 1 / 3, rtol=1e-14)


# --- 8. rounding at the unit interval: clipped, full-precision messages -------------------------
def test_rewards_within_rounding_are_clipped_and_messages_have_full_precision():
    b = gt.SoftmaxBandit(L0, np.full((2, 3), 1 + 1e-12))
    assert float(b.reward_means.max()) == 1.0
    s = gt.SequencePolicy(np.zeros((1, 1, 3, 3)), np.full((1, 3), -1e-12), 2, 1)
    assert float(s.reward_means.min()) == 0.0
    p = b.problem()
    q = gt.DiscreteProblem(p.prompt_probs, p.probs, p.scores, p.reward_means + 1e-12)
    assert float(q.reward_means.max()) == 1.0
    msg = _refused(lambda: gt.SoftmaxBandit(L0, np.full((2, 3), 1 + 1e-6)), "reward_means")
    assert "1.000001" in msg
    msg = _refused(lambda: gt.SoftmaxBandit(L0, np.full((2, 3), 1 + 1e-8)), "reward_means")
    assert "1.00000001" in msg


# --- 9. NumPy/JAX integers accepted, floats/bools refused --------------------------------------
def test_numpy_and_jax_integers_are_integers():
    b = gt.SoftmaxBandit(np.array([[0.0, 1.0, -1.0], [0.5, 0.0, 0.2]]), M * 1.2)
    want = gt.exact_mse(b, "grpo", 8)
    for g in (jnp.int32(8), np.int64(8), np.uint8(8), jnp.array(8)):
        assert gt.exact_mse(b, "grpo", g) == want
    for g in (8.0, True, "8", jnp.float32(8), np.array([8])):
        _refused(lambda: gt.exact_mse(b, "grpo", g), "group_size")
    x, y, z = b.sample_groups(0, jnp.int32(2), np.int16(3))
    assert y.shape == (2, 3)
    _refused(lambda: b.sample_groups(0, 2, 3.0), "group_size")
    assert gt.SequencePolicy.random(np.int64(1), jnp.int32(1), np.int8(2), jnp.int32(2)).horizon == 2


# --- 10. unused methods removed -----------------------------------------------------------------
def test_unused_policy_methods_are_gone():
    b = gt.SoftmaxBandit(L0, M)
    for name in ("reward_variances", "expected_prompt_value"):
        assert not hasattr(gt.DiscreteProblem, name)
    assert not hasattr(b, "score_norms")


# --- 11. the language-model policy --------------------------------------------------------------
VOCAB = 7


def _bigram_policy(**kw):
    table = jnp.asarray(np.random.default_rng(0).normal(size=(VOCAB, VOCAB)), jnp.float32)
    return LMPolicy({"t": table}, lambda params, tokens, p: params["t"][tokens], **kw)


def test_lm_policy_token_arrays_are_checked():
    pol = _bigram_policy()
    x = np.array([[2, 3], [4, 5]])
    y = np.array([[1, 0, 0], [3, 1, 0]])
    assert pol.log_probs(x, y).shape == (2,)
    _refused(lambda: pol.log_probs(x.astype(float), y), "prompts")
    _refused(lambda: pol.log_probs(x, y.astype(bool)), "responses")
    _refused(lambda: pol.log_probs(x[0], y), "prompts")  # rank 1
    _refused(lambda: pol.log_probs(x, y[:1]), "rows")  # N mismatch
    _refused(lambda: pol.log_probs(x, y + VOCAB), "responses")  # id outside the vocabulary
    _refused(lambda: pol.log_probs(x - 3, y), "prompts")  # negative id
    _refused(lambda: pol.log_probs(x[:, :0], y), "prompts")  # empty prompt
    _refused(lambda: pol.log_probs("ab", y), "prompts")
    _refused(lambda: pol.sample(0, x, 0), "response_len")
    _refused(lambda: pol.sample(1.5, x, 3), "key", "seed")
    _refused(lambda: pol.sample(0, x + VOCAB, 3), "prompts")
    assert pol.sample(2**70, x, 3).shape == (2, 3)
    _refused(lambda: pol.sample_blocked(0, x, 3, max_elems=0), "max_elems")
    _refused(lambda: pol.score_contractions(x, y, np.ones((1, 2)) + 1j), "weights")
    _refused(lambda: pol.score_contractions(x, y, np.ones((1, 3))), "weights")
    _refused(lambda: pol.score_contractions(x, y, np.ones((1, 2)), chunk=0), "chunk")
    _refused(lambda: score_contractions(pol.apply_fn, pol.params, x, y, np.ones((1, 2)),
                                        temperature=0.0), "temperature")
    _refused(lambda: _bigram_policy(temperature=-1.0), "temperature")
    _refused(lambda: LMPolicy({"t": 1}, "not a function"), "apply_fn")
    _refused(lambda: pol.with_params({"u": pol.params["t"]}), "params")
    assert _bigram_policy(vocab_size=VOCAB)._vocab() == pol._vocab() == VOCAB


def test_lm_model_inputs_are_checked():
    cfg = lm_model.ModelConfig(d_model=8, n_layers=1, n_heads=2, vocab_size=6, max_prompt=4,
                               max_response=3)
    _refused(lambda: lm_model.ModelConfig(d_model=0), "d_model")
    _refused(lambda: lm_model.ModelConfig(n_heads=2.0), "n_heads")
    _refused(lambda: lm_model.ModelConfig(vocab_size=1), "vocab_size")
    _refused(lambda: lm_model.init_params(0.5, cfg), "key", "seed")
    _refused(lambda: lm_model.init_params(0, {"d_model": 8}), "cfg")
    params = lm_model.init_params(3, cfg)
    tok = np.array([[2, 3, 4, 5, 1]])
    assert lm_model.apply(params, tok, 3, cfg).shape == (1, 5, 6)
    _refused(lambda: lm_model.apply(params, tok + 6, 3, cfg), "tokens")
    _refused(lambda: lm_model.apply(params, tok, 0, cfg), "prompt_len")
    _refused(lambda: lm_model.apply(params, np.ones((1, 6), int), 5, cfg), "max_prompt")
    _refused(lambda: lm_model.apply(params, np.ones((1, 6), int), 2, cfg), "max_response")
    _refused(lambda: lm_model.sample(params, cfg, 0, tok[:, :3], 4), "max_response")
    _refused(lambda: lm_model.sample(params, cfg, 0, tok[:, :3].astype(float), 2), "prompts")
    _refused(lambda: lm_model.sample(params, cfg, 0, tok[:, :3], 2, temperature=0), "temperature")
    assert lm_model.sample(params, cfg, 2**70, tok[:, :3], 2).shape == (1, 2)


# --- hypothesis: random shapes, dtypes and values at the constructors and entry points ----------
KINDS = ("int", "float", "bool", "complex", "str", "object")
SPECIAL = ("unit", "normal", "nan", "inf", "huge", "negative")


@st.composite
def arrays(draw, shape=None):
    """Arrays of a random (or the given) shape, dtype kind and kind of value; sometimes not an
    array at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([None, "abc", 3, 0.5, [[1, 2], [3]], {"a": 1}]))
    if shape is None or draw(st.booleans()):
        ndim = draw(st.integers(0, 4))
        shape = tuple(draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim)))
    n = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    special = draw(st.sampled_from(SPECIAL))
    v = rng.uniform(0.0, 1.0, n)
    if special == "normal":
        v = rng.normal(size=n) * 3
    elif special in ("nan", "inf") and n:
        v[rng.integers(0, n)] = np.nan if special == "nan" else -np.inf
    elif special == "huge":
        v = v * 1e308
    elif special == "negative":
        v = -v
    kind = draw(st.sampled_from(KINDS))
    if kind == "int":
        v = np.nan_to_num(v, posinf=2**62, neginf=-(2**62)).clip(-(2**62), 2**62).astype(np.int64)
    elif kind == "bool":
        v = v > 0.5
    elif kind == "complex":
        v = v + 1j * rng.normal(size=n)
    elif kind == "str":
        v = v.astype(str)
    elif kind == "object":
        v = v.astype(object)
    return v.reshape(shape)


def _accept_result_or_package_error(fn):
    """Run ``fn``: a result is fine; ValueError/TypeError must come from the package."""
    try:
        return fn()
    except (ValueError, TypeError) as exc:
        assert _raised_by_package(exc), "".join(traceback.format_exception(exc))[-3000:]
        return None


def _finite_probs(pol):
    pi = np.asarray(pol.probs())
    assert np.all(np.isfinite(pi)) and np.allclose(pi.sum(axis=1), 1.0, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fuzz_constructors(data):
    which = data.draw(st.sampled_from(["softmax", "linear", "sequence", "problem", "create"]))
    shape2 = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    P, K = shape2
    if which == "softmax":
        pol = _accept_result_or_package_error(lambda: gt.SoftmaxBandit(
            data.draw(arrays(shape2)), data.draw(arrays(shape2)),
            data.draw(st.one_of(st.none(), arrays((P,))))))
        if pol is not None:
            _finite_probs(pol)
    elif which == "linear":
        d = data.draw(st.integers(1, 2))
        pol = _accept_result_or_package_error(lambda: gt.LinearSoftmaxBandit(
            data.draw(arrays(shape2 + (d,))), data.draw(arrays((d,))), data.draw(arrays(shape2))))
        if pol is not None:
            _finite_probs(pol)
    elif which == "sequence":
        v = data.draw(st.sampled_from([1, 2, 0, -1, 2.0, "2", np.int8(2), 10**9]))
        T = data.draw(st.sampled_from([1, 2, 0, jnp.int32(2), None, 10**6]))
        eos = data.draw(st.sampled_from([True, False, 1, 0, "yes", None, np.bool_(True)]))
        try:
            shape = (P, int(T), int(v) + 1, int(v) + int(bool(eos)))
            shape = shape if max(shape) < 8 else None
            k = n_sequences(int(v), int(T), bool(eos)) if shape else 3
        except Exception:
            shape, k = None, 3
        pol = _accept_result_or_package_error(lambda: gt.SequencePolicy(
            data.draw(arrays(shape)), data.draw(arrays((P, k))), v, T, eos=eos))
        if pol is not None:
            _finite_probs(pol)
    else:
        D = data.draw(st.integers(1, 2))
        args = [data.draw(arrays(s)) for s in ((P,), shape2, shape2 + (D,), shape2)]
        if data.draw(st.booleans()):  # make the probabilities valid, fuzz the rest
            args[0], args[1] = np.full(P, 1 / P), np.full(shape2, 1 / K)
        build = gt.DiscreteProblem.create if which == "create" else gt.DiscreteProblem
        prob = _accept_result_or_package_error(lambda: build(*args))
        if prob is not None and which == "create":
            assert np.isfinite(float(prob.objective()))


_B = gt.SoftmaxBandit(np.array([[0.0, 1.0, -1.0], [0.5, 0.0, 0.2]]), np.array(
    [[0.1, 0.9, 0.4], [1.0, 0.0, 0.3]]))
BANDITS = [
    _B, _B.problem(),
    gt.LinearSoftmaxBandit(np.arange(12.0).reshape(2, 3, 2) / 10, np.ones(2), M * 1.5),
    gt.SequencePolicy(np.zeros((1, 2, 3, 3)), np.linspace(0, 1, 7)[None], 2, 2),
    gt.SoftmaxBandit(L0, M),  # constant rewards: c1 = c3 = 0
    gt.SoftmaxBandit(np.array([[700.0, -700.0, 0.0], [0.0, 0.0, 0.0]]), M * 1.9),  # underflow
    None, "bandit", 3, np.zeros((2, 3)),
]
ESTIMATORS = ["vanilla", "oracle", "grpo", "rloo", "grpo_std", "optimal", "nope", None, 3, ""]
SIZES = [1, 2, 4, 0, -1, 2.0, "4", None, True, jnp.int32(3), np.int64(2), 3000]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fuzz_entry_points(data):
    which = data.draw(st.sampled_from(["exact_mse", "mc_mse", "scaling_constants",
                                       "optimal_group_size", "get_estimator", "prompt_baseline"]))
    bandit = data.draw(st.sampled_from(BANDITS))
    est = data.draw(st.sampled_from(ESTIMATORS))
    G, B = data.draw(st.sampled_from(SIZES)), data.draw(st.sampled_from(SIZES[:8]))
    if which == "exact_mse":
        out = _accept_result_or_package_error(lambda: gt.exact_mse(bandit, est, G, B))
        if out is not None:
            assert np.isfinite(out) and out >= -1e-12
    elif which == "mc_mse":
        n_reps = data.draw(st.sampled_from([1, 2, 8, 0, -3, 2.5, "8"]))
        seed = data.draw(st.sampled_from([0, -1, 2**70, 1.5, "s", np.uint64(2**64 - 1),
                                          jnp.int32(3), None]))
        if isinstance(G, int) and G > 64:
            G = 64
        chunk = data.draw(st.sampled_from([None, None, 1, 3, 0, -1, 2.5]))
        out = _accept_result_or_package_error(
            lambda: gt.mc_mse(bandit, est, G, B, n_reps=n_reps, seed=seed, chunk=chunk))
        if out is not None:
            assert np.isfinite(out.mse) and out.mse >= 0
    elif which == "scaling_constants":
        out = _accept_result_or_package_error(lambda: gt.scaling_constants(bandit))
        if out is not None:
            assert all(np.isfinite(float(c)) for c in (out.c1, out.c2, out.c3))
    elif which == "optimal_group_size":
        out = _accept_result_or_package_error(lambda: gt.optimal_group_size(bandit))
        if out is not None:
            assert out is not None
    elif which == "get_estimator":
        name = data.draw(st.one_of(st.sampled_from(ESTIMATORS), st.text(max_size=5),
                                   st.integers(), st.none()))
        out = _accept_result_or_package_error(lambda: gt.get_estimator(name))
        if out is not None:
            assert out.name in gt.available_estimators() or out.name == name
    else:
        b = data.draw(arrays((2,)))
        est = _accept_result_or_package_error(lambda: gt.prompt_baseline(b))
        if est is not None:
            out = _accept_result_or_package_error(
                lambda: gt.mc_mse(data.draw(st.sampled_from(BANDITS[:4])), est, 2, 2, n_reps=4))
            if out is not None:  # a baseline near 1e308 overflows honestly to inf, never NaN
                assert not np.isnan(out.mse)
                assert np.isfinite(out.mse) or np.max(np.abs(np.asarray(b, float))) > 1e150


@st.composite
def token_arrays(draw, n_rows):
    """Mostly valid-looking token arrays (ids around the vocabulary), else anything."""
    if draw(st.integers(0, 3)) == 0:
        return draw(arrays((n_rows, 2)))
    shape = (draw(st.sampled_from([n_rows, n_rows, 0, 1])), draw(st.integers(0, 3)))
    if draw(st.integers(0, 5)) == 0:
        shape = shape[:1]
    lo, hi = draw(st.sampled_from([(0, VOCAB), (0, VOCAB), (-2, VOCAB), (0, VOCAB + 3)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dtype = draw(st.sampled_from([np.int32, np.int64, np.uint8, np.float32]))
    return rng.integers(max(lo, 0) if dtype == np.uint8 else lo, hi, shape).astype(dtype)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fuzz_lm_policy(data):
    pol = _bigram_policy()
    n = data.draw(st.integers(1, 3))
    x, y = data.draw(token_arrays(n)), data.draw(token_arrays(n))
    which = data.draw(st.sampled_from(["log_probs", "sample", "score_contractions"]))
    if which == "log_probs":
        out = _accept_result_or_package_error(lambda: pol.log_probs(x, y))
        if out is not None:
            assert out.shape == (n,) and np.all(np.asarray(out) <= 0)
    elif which == "sample":
        r = data.draw(st.sampled_from([1, 2, 0, -1, 2.0, jnp.int32(2)]))
        key = data.draw(st.sampled_from([0, 2**70, -5, 1.5, None, jax.random.PRNGKey(1)]))
        out = _accept_result_or_package_error(lambda: pol.sample(key, x, r))
        if out is not None:
            assert np.all((np.asarray(out) >= 0) & (np.asarray(out) < VOCAB))
    else:
        w = data.draw(arrays((1, n)))
        out = _accept_result_or_package_error(
            lambda: pol.score_contractions(x, y, w, chunk=data.draw(st.sampled_from([1, 2, 0]))))
        if out is not None:
            assert np.all(np.isfinite(out[0])) and np.all(np.isfinite(out[1]))


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_fuzz_more_entry_points(data):
    """compute_advantages, sample_groups, budget_mse, leading_order_mse, exact_gradient."""
    which = data.draw(st.sampled_from(["compute_advantages", "sample_groups", "budget_mse",
                                       "leading_order_mse", "exact_gradient"]))
    bandit = data.draw(st.sampled_from(BANDITS))
    est = data.draw(st.sampled_from(ESTIMATORS))
    G, B = data.draw(st.sampled_from(SIZES)), data.draw(st.sampled_from(SIZES[:8]))
    if which == "compute_advantages":
        z = data.draw(arrays((2, 3)))
        out = _accept_result_or_package_error(lambda: gt.compute_advantages(est, z))
        if out is not None:
            assert not np.any(np.isnan(np.asarray(out)))
    elif which == "sample_groups":
        key = data.draw(st.sampled_from([0, 2**70, -1, 1.5, None, jax.random.PRNGKey(0)]))
        prob = bandit.problem() if hasattr(bandit, "problem") else bandit
        out = _accept_result_or_package_error(lambda: gt.sample_groups(key, prob, B, G))
        if out is not None:
            assert out[1].shape == (int(B), int(G))
    elif which == "budget_mse":
        c = gt.scaling_constants(_B)
        budget = data.draw(st.sampled_from([1.0, 64, 0, -1.0, np.inf, "8", None]))
        out = _accept_result_or_package_error(lambda: gt.budget_mse(c, G, budget))
        if out is not None:
            assert np.all(np.asarray(out) >= 0)
    elif which == "leading_order_mse":
        out = _accept_result_or_package_error(lambda: gt.leading_order_mse(bandit, est, G, B))
        if out is not None:
            assert np.isfinite(out)
    else:
        out = _accept_result_or_package_error(lambda: gt.exact_gradient(bandit))
        if out is not None:
            assert np.all(np.isfinite(np.asarray(out)))
