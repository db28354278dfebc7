"""Repeated calls with an equal configuration reuse the compiled loop (the cache does not grow).

Regression tests of a leak: the length-weighting loop hashed its policy wrapper by identity and
the credit loop jitted a fresh closure per call, so every identical call compiled (and kept) a
new executable; the LM loop had the same leak once.
"""

import jax
import jax.numpy as jnp
import numpy as np

from grpo_theory import problems
from grpo_theory.companions import credit as C
from grpo_theory.companions import length_weighting as LW
from grpo_theory.optim import theory as opt
from grpo_theory.optim import train as T


def _sizes(*fns):
    return [f._cache_size() for f in fns]


def test_make_train_equal_configs_share_one_compilation():
    bandit = problems.default_bandit()

    def cfg(lr):
        return T.TrainConfig(batch_size=2, group_size=4, n_steps=6, lr=lr, log_every=3)

    T.make_train(bandit, "grpo", cfg(0.5))(0)
    n = T._run._cache_size()
    assert n >= 1
    for seed, lr in ((1, 0.5), (2, 0.5), (3, 0.1)):  # equal configs; a new step size is traced
        T.make_train(bandit, "grpo", cfg(lr))(seed)
        T.make_train(problems.default_bandit(), "grpo", cfg(lr))(seed)  # an equal, new policy
    assert T._run._cache_size() == n
    T.make_train(bandit, "grpo", T.TrainConfig(batch_size=2, group_size=4, n_steps=7))(0)
    assert T._run._cache_size() == n + 1  # a different shape compiles (the check can fail)


def test_vmap_over_keys_does_not_recompile():
    bandit = problems.default_bandit()
    train = T.make_train(bandit, "oracle",
                         T.TrainConfig(batch_size=2, group_size=3, n_steps=4, log_every=2))
    keys = jnp.stack([jax.random.PRNGKey(s) for s in range(3)])
    jax.vmap(train)(keys)
    n = T._run._cache_size()
    for _ in range(2):
        jax.vmap(train)(keys)
    assert T._run._cache_size() == n


def test_legacy_wrappers_reuse_the_batched_loop():
    bandit = problems.default_bandit()
    P = problems.default_gaussian_bandit()
    T.train(bandit, "grpo", 2, 2, 4, eta=0.5, seeds=[0, 1])
    opt.train(P, "oracle", 2, 1, 0.1, "constant", 4, 3)
    n = T._run_batch._cache_size()
    T.train(bandit, "grpo", 2, 2, 4, eta=0.3, seeds=[5, 6])
    opt.train(P, "oracle", 2, 1, 0.2, "constant", 4, 3, seed=9)
    assert T._run_batch._cache_size() == n


def test_length_weighting_loops_do_not_recompile():
    """``_Static`` was hashed by identity: the cache grew 1, 2, 3 on identical calls."""
    for _ in range(2):
        LW.train_length_weighted(problems.stop_or_run_policy(), 0.0, 3, 2, 4, 1.0, [0, 1])
        LW.expected_flow(problems.stop_or_run_policy(), 0.0, 3, 4, 1.0)
    n = _sizes(T._run_batch, LW._flow)
    for _ in range(3):
        LW.train_length_weighted(problems.stop_or_run_policy(), 0.0, 3, 2, 4, 1.0, [2, 3])
        LW.expected_flow(problems.stop_or_run_policy(), 0.0, 3, 4, 1.0)
        assert _sizes(T._run_batch, LW._flow) == n


def test_credit_loop_does_not_recompile():
    """``train_grpo_records`` jitted a fresh closure on every call."""
    pol = C.MLPSequencePolicy(lambda p, t, L: float(L == 1), 2, 2, 2, hidden=3)
    C.train_grpo_records(pol, 3, 2, 2, 0.1, [0])
    n = T._run_batch._cache_size()
    for s in (1, 2):
        C.train_grpo_records(pol, 3, 2, 2, 0.1, [s])
        assert T._run_batch._cache_size() == n


def test_lm_loop_does_not_recompile():
    from grpo_theory.lm import model, policy, task
    from grpo_theory.lm.training import grpo, loop

    cfg = model.ModelConfig(d_model=16, n_layers=1, n_heads=2)
    params = model.init_params(jax.random.PRNGKey(0), cfg)
    pol = policy.LMPolicy(params, model.make_apply(cfg), model.make_sampler(cfg))
    q = task.eval_set().subset(np.arange(8))
    grpo.train_grpo(pol, q, q, 8, 4, 2, (1,), 1e-3, seed=0)
    n = loop.train_chunk._cache_size()
    for seed in (1, 2):
        grpo.train_grpo(pol, q, q, 8, 4, 2, (1,), 1e-3, seed=seed)
        assert loop.train_chunk._cache_size() == n
    # NumPy/JAX integers are the same static sizes (no new compilation)
    grpo.train_grpo(pol, q, q, np.int64(8), jnp.int32(4), np.int32(2), (1,), 1e-3, seed=3)
    assert loop.train_chunk._cache_size() == n
