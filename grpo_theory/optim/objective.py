"""The exact objective ``J(theta)`` of an enumerable policy and its supremum ``sup J``.

``sup J`` per policy type is described in :mod:`grpo_theory.optim.train`'s docstring: a closed
form for tabular policies, L-BFGS from several starts (:func:`maximise`) for shared parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._precision import float64
from ..core.policies import LinearSoftmaxBandit, SequencePolicy, SoftmaxBandit

__all__ = ["exact_objective", "maximise", "max_objective"]


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


def _is_enumerable(problem) -> bool:
    return hasattr(problem, "params") and callable(getattr(problem, "problem", None))


def _is_generic(problem) -> bool:
    return (hasattr(problem, "params") and callable(getattr(problem, "objective", None))
            and callable(getattr(problem, "sample_gradient", None)))


@float64
def max_objective(policy) -> float:
    """sup_theta J(theta) (see the module docstring for how it is obtained per policy type).

    Args:
        policy: a SoftmaxBandit, SequencePolicy, LinearSoftmaxBandit, another enumerable policy
            (best-response value ``E_X max_y mu``) or a problem with ``max_objective()``.
    Returns:
        The supremum as a float.
    """
    if isinstance(policy, (SoftmaxBandit, SequencePolicy)):
        mu = np.asarray(policy.reward_means)
        return float(np.asarray(policy.prompt_probs) @ mu.max(axis=1))
    if isinstance(policy, LinearSoftmaxBandit):
        _, val = maximise(lambda th: exact_objective(policy, th), policy.params, n_starts=6,
                          scale=2.0)
        return val
    inner = getattr(policy, "policy", None)  # a wrapper with hooks (companion modules)
    if inner is not None and _is_enumerable(inner):
        return max_objective(inner)
    if callable(getattr(policy, "max_objective", None)):
        return float(policy.max_objective())
    if _is_enumerable(policy) and hasattr(policy, "reward_means"):
        mu = np.asarray(policy.reward_means)
        return float(np.asarray(policy.prompt_probs) @ mu.max(axis=1))
    raise ValueError(
        "policy must be a SoftmaxBandit, LinearSoftmaxBandit or SequencePolicy (or a problem "
        f"with max_objective()), got {type(policy).__name__}")
