r"""The exact objective of an enumerable policy and a multi-start maximiser of smooth objectives.

``J(theta) = sum_x f(x) sum_y pi_theta(y|x) mu(x, y)`` (:func:`exact_objective`, traceable) and
:func:`maximise` (L-BFGS from several starts), which
:meth:`~grpo_theory.core.policies.LinearSoftmaxBandit.max_objective` uses for ``sup J`` of a
shared-parameter policy; both are on the face, ``from grpo_theory.core import maximise``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._precision import float64


@float64
def exact_objective(policy, params=None) -> jnp.ndarray:
    """J(theta) = sum_x f(x) sum_y pi_theta(y|x) mu(x, y), exactly (traceable).

    Args:
        policy: an enumerable policy (``probs``, ``prompt_probs``, ``reward_means``).
        params: parameters (default: the policy's own).
    Returns:
        The scalar ``J(theta)``.
    """
    theta = policy.params if params is None else params
    probs = policy.probs(theta)
    return jnp.dot(jnp.asarray(policy.prompt_probs),
                   jnp.sum(probs * jnp.asarray(policy.reward_means), axis=1))


@float64
def maximise(fn, theta0, n_starts: int = 4, scale: float = 1.0, seed: int = 0):
    """Maximise a smooth scalar ``fn(theta)`` (jax-traceable) with L-BFGS from several starts.

    Starts at ``theta0`` and ``n_starts - 1`` Gaussian perturbations of it (std ``scale``).
    Used for the exact maximisers of objectives on shared-parameter bandits (e.g.
    Proposition 13's E[2 arcsin sqrt V]).

    Returns:
        ``(theta_max, fn(theta_max))`` as a NumPy array and a float.
    """
    from scipy.optimize import minimize

    theta0 = np.asarray(theta0, dtype=np.float64)
    shape = theta0.shape
    val_grad = jax.jit(jax.value_and_grad(lambda th: -fn(th.reshape(shape))))

    def f(th):
        v, g = val_grad(jnp.asarray(th))
        return float(v), np.asarray(g, dtype=np.float64)

    rng = np.random.default_rng(seed)
    starts = [theta0.ravel()] + [theta0.ravel() + scale * rng.standard_normal(theta0.size)
                                 for _ in range(max(0, n_starts - 1))]
    best = None
    for s in starts:
        res = minimize(f, s, jac=True, method="L-BFGS-B", options=dict(maxiter=2000, gtol=1e-12))
        if best is None or res.fun < best.fun:
            best = res
    return best.x.reshape(shape), float(-best.fun)
