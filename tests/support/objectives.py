"""Objectives computed by hand, shared by the companions' training tests."""

import jax.numpy as jnp


def one_step_objective(policy, estimator, baseline, weights=None, B=3, G=4, lr=1.0, seed=5):
    """J(theta_1) after one hand-computed step of the training loop (its keys: fold_in(key, 1))."""
    import jax

    from grpo_theory._validation import seed_key
    from grpo_theory.core.sampling import sample_groups
    from grpo_theory.core.objective import exact_objective

    dp = policy.problem()
    x, y, z = sample_groups(jax.random.fold_in(seed_key(seed), 1), dp, B, G)
    adv = z - baseline(dp)[x][:, None]
    w = 1.0 if weights is None else weights[y]
    ghat = jnp.einsum("bg,bgd->d", w * adv, dp.scores[x[:, None], y]) / (B * G)
    return float(exact_objective(policy, policy.params + lr * ghat.reshape(policy.params.shape)))
