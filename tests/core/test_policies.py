"""Policies: exact scores, gradients and enumeration checked against autodiff and by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.problems import default_bandit, linear_bandit, sequence_policy


def test_softmax_scores_are_indicator_minus_probs():
    b = default_bandit()
    p = b.problem()
    P, K = b.params.shape
    pi = np.asarray(p.probs)
    s = np.asarray(p.scores).reshape(P, K, P, K)
    for x in range(P):
        for y in range(K):
            want = np.zeros((P, K))
            want[x] = -pi[x]
            want[x, y] += 1.0
            np.testing.assert_allclose(s[x, y], want, atol=1e-14)


@pytest.mark.parametrize("policy", [default_bandit(), linear_bandit(), sequence_policy()],
                         ids=["softmax", "linear", "sequence"])
def test_exact_gradient_equals_autodiff_of_objective(policy):
    def J(theta):
        lp = policy.log_probs(theta)
        return jnp.dot(policy.prompt_probs, jnp.sum(jnp.exp(lp) * policy.reward_means, axis=1))

    np.testing.assert_allclose(policy.gradient(), jax.grad(J)(policy.params), atol=1e-13)
    p = policy.problem()
    np.testing.assert_allclose(jnp.einsum("pk,pkd->pd", p.probs, p.scores), 0.0, atol=1e-13)
    np.testing.assert_allclose(p.probs.sum(axis=1), 1.0, rtol=1e-13)


def test_softmax_bandit_public_api_shapes():
    b = gt.SoftmaxBandit(np.zeros((2, 3)), np.full((2, 3), 0.5))
    assert gt.exact_gradient(b).shape == (2, 3)
    np.testing.assert_allclose(b.prompt_probs, [0.5, 0.5])
    np.testing.assert_allclose(gt.exact_gradient(b), 0.0, atol=1e-15)  # constant reward
    x, y, z = b.sample_groups(jax.random.PRNGKey(0), 4, 3)
    assert x.shape == (4,) and y.shape == z.shape == (4, 3)


def test_sequence_policy_enumeration():
    pol = sequence_policy(vocab_size=2, horizon=3)
    # responses: EOS at position 1, 2, 3 (1 + 2 + 4) plus 8 full-length sequences
    assert pol.responses.shape == (15, 3)
    assert sorted(set(pol.lengths.tolist())) == [1, 2, 3]
    np.testing.assert_allclose(pol.probs().sum(axis=1), 1.0, rtol=1e-13)
    tl = pol.token_log_probs()
    np.testing.assert_allclose(tl.sum(-1), pol.log_probs(), rtol=1e-13)
    no_eos = gt.SequencePolicy(np.zeros((1, 2, 3, 2)), np.zeros((1, 4)), 2, 2, eos=False)
    assert no_eos.responses.shape == (4, 2)
    np.testing.assert_allclose(no_eos.probs(), 0.25)


def test_with_params_and_linear_bandit_scores():
    b = linear_bandit()
    p = b.problem()
    pi = np.asarray(p.probs)
    f = np.asarray(b.features)
    want = f - np.einsum("pk,pkd->pd", pi, f)[:, None, :]
    np.testing.assert_allclose(p.scores, want, atol=1e-13)
    b2 = b.with_params(jnp.zeros(4))
    np.testing.assert_allclose(b2.probs(), 1 / 5)
    assert not np.allclose(b.probs(), 1 / 5)


def test_optimal_baseline_equals_value_under_assumption2():
    # equal score norms for every response of a prompt: uniform 3-armed softmax
    b = gt.SoftmaxBandit(np.zeros((2, 3)), np.array([[0.1, 0.5, 0.9], [0.3, 0.3, 1.0]]))
    p = b.problem()
    np.testing.assert_allclose(p.optimal_baselines(), p.values(), rtol=1e-13)
    np.testing.assert_allclose(gt.exact_mse(b, "optimal", 4), gt.exact_mse(b, "oracle", 4),
                               rtol=1e-12)


def test_policy_bad_inputs():
    ok_l, ok_m = np.zeros((2, 3)), np.full((2, 3), 0.5)
    with pytest.raises(ValueError, match="logits must be finite"):
        gt.SoftmaxBandit(np.array([[0.0, np.nan, 1.0], [0, 0, 0]]), ok_m)
    with pytest.raises(ValueError, match="logits must be finite"):
        gt.SoftmaxBandit(np.array([[0.0, np.inf, 1.0], [0, 0, 0]]), ok_m)
    with pytest.raises(ValueError, match="reward_means must be finite"):
        gt.SoftmaxBandit(ok_l, np.array([[0.5, np.nan, 0.5], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"reward_means must lie in \[0, 1\]"):
        gt.SoftmaxBandit(ok_l, np.array([[0.5, 1.5, 0.5], [0, 0, 0]]))
    with pytest.raises(ValueError, match="prompt_probs must sum to 1"):
        gt.SoftmaxBandit(ok_l, ok_m, prompt_probs=[0.5, 0.6])
    with pytest.raises(ValueError, match="prompt_probs must be non-negative"):
        gt.SoftmaxBandit(ok_l, ok_m, prompt_probs=[1.5, -0.5])
    with pytest.raises(ValueError, match="prompt_probs must have length 2"):
        gt.SoftmaxBandit(ok_l, ok_m, prompt_probs=[1.0])
    with pytest.raises(ValueError, match=r"reward_means must have shape \(2, 3\)"):
        gt.SoftmaxBandit(ok_l, np.full((2, 4), 0.5))
    with pytest.raises(ValueError, match="logits must be a 2-d array"):
        gt.SoftmaxBandit(np.zeros(3), ok_m)
    with pytest.raises(ValueError, match="theta must have length"):
        gt.LinearSoftmaxBandit(np.zeros((2, 3, 4)), np.zeros(3), ok_m)
    with pytest.raises(ValueError, match="params must have shape"):
        gt.SequencePolicy(np.zeros((1, 2, 3, 3)), np.zeros((1, 7)), 2, 3)
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 1"):
        gt.SequencePolicy(np.zeros((1, 2, 1, 1)), np.zeros((1, 1)), 0, 2)


def _itertools_enumeration(v, T, eos):
    """The reference enumeration (by length, then lexicographic), written with itertools."""
    import itertools

    seqs = []
    for length in range(1, T + 1):
        if eos:
            seqs += [list(b) + [v] for b in itertools.product(range(v), repeat=length - 1)]
        if length == T:
            seqs += [list(b) for b in itertools.product(range(v), repeat=T)]
    tokens = np.full((len(seqs), T), -1)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = s
    return tokens, np.array([len(s) for s in seqs])


@pytest.mark.parametrize("v,T,eos", [(1, 1, True), (1, 3, False), (2, 3, True), (3, 2, False),
                                     (3, 3, True)])
def test_vectorised_enumeration_matches_itertools_order(v, T, eos):
    pol = gt.SequencePolicy(np.zeros((1, T, v + 1, v + int(eos))), lambda p, t, n: 0.5, v, T,
                            eos=eos)
    tokens, lengths = _itertools_enumeration(v, T, eos)
    np.testing.assert_array_equal(pol.responses, tokens)
    np.testing.assert_array_equal(pol.lengths, lengths)
    assert len(lengths) == gt.core.policies.n_sequences(v, T, eos)


def test_discrete_problem_create_equals_policy_problem():
    b = linear_bandit()
    p = b.problem()
    q = gt.DiscreteProblem.create(*(np.asarray(a) for a in (p.prompt_probs, p.probs, p.scores,
                                                             p.reward_means)))
    assert q.scores.dtype == jnp.float64
    np.testing.assert_array_equal(q.gradient(), p.gradient())
    np.testing.assert_array_equal(gt.exact_mse(q, "grpo", 4), gt.exact_mse(p, "grpo", 4))
