r"""The array form of every enumerable problem: :class:`DiscreteProblem`.

P prompts with probabilities ``f`` (P,), K responses per prompt with probabilities ``pi``
(P, K), flattened scores ``s(x, y) = grad_theta log pi(y|x)`` (P, K, D) and Bernoulli rewards with
means ``mu`` (P, K). From it (the main paper, Algorithm 1):

* ``V(x) = sum_y pi(y|x) mu(x,y)``, ``J = sum_x f(x) V(x)``;
* ``g(x) = E[s Z | x]``, ``g = sum_x f(x) g(x)``;
* ``Sigma_or(x) = Cov[s (Z - V(x)) | x]`` (the oracle's per-sample covariance, Theorem 2).

The policies that produce it (:mod:`grpo_theory.core.policy`, :mod:`grpo_theory.core.policies`), the
samplers and the score structures all build on this module, which imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .._precision import float64


def pass_k_targets(values, prompt_gradients, k: int = 1):
    """``k (1 - V(x))^(k-1) g(x)`` (P, D): each prompt's gradient of ``pass@k = 1 - (1 - V)^k``
    for binary rewards, the target of an estimator with ``pass_k = k``; ``g(x)`` for k = 1."""
    if k == 1:
        return prompt_gradients
    return (k * (1.0 - values) ** (k - 1))[:, None] * prompt_gradients


@runtime_checkable
class RewardTable(Protocol):
    """The reward contract of the core: an enumerable problem's Bernoulli reward means.

    ``reward_means[x, y] = E[Z | x, y]`` in [0, 1], shape (P, K) for P prompts and K responses;
    :class:`DiscreteProblem` and every enumerable policy of :mod:`.policies` satisfy it.
    """

    reward_means: object


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class DiscreteProblem:
    """Arrays that define a policy's gradient problem exactly (see module docstring).

    Constructing one from concrete arrays validates them (:meth:`create` does the same and
    converts to float64 JAX arrays): ``prompt_probs`` (P,) and every row of ``probs`` (P, K) are
    probability vectors (to ``1e-6``), ``scores`` (P, K, D) are finite, ``reward_means`` (P, K)
    lie in [0, 1] (values within 1e-9 outside are clipped). Nothing is checked when a field is a
    JAX tracer, and JAX's own rebuilding of the pytree (``tree_unflatten``) never validates.
    """

    prompt_probs: jnp.ndarray  # (P,)
    probs: jnp.ndarray  # (P, K); rows sum to one (zero-probability padding allowed)
    scores: jnp.ndarray  # (P, K, D)
    reward_means: jnp.ndarray  # (P, K) Bernoulli means

    @float64
    def __post_init__(self):
        fields = (self.prompt_probs, self.probs, self.scores, self.reward_means)
        if all(_is_concrete_array(a) for a in fields):
            checked = _check_discrete_problem(*fields)
            for name, old, new in zip(_DP_FIELDS, fields, checked):
                if new is not None:
                    object.__setattr__(self, name, new)

    @classmethod
    @float64
    def create(cls, prompt_probs, probs, scores, reward_means) -> "DiscreteProblem":
        """A validated problem with float64 JAX arrays (``ValueError`` naming a bad argument).

        Args:
            prompt_probs: (P,) prompt distribution f.
            probs: (P, K) response probabilities pi(y|x), each row summing to one.
            scores: (P, K, D) scores s(x, y).
            reward_means: (P, K) Bernoulli reward means in [0, 1].

        Returns:
            The :class:`DiscreteProblem`.
        """
        arrs = [V.real_array(n, a) for n, a in zip(_DP_FIELDS, (prompt_probs, probs, scores,
                                                                reward_means))]
        return cls(*(jnp.asarray(a, dtype=jnp.float64) for a in arrs))

    def tree_flatten(self):
        return (self.prompt_probs, self.probs, self.scores, self.reward_means), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)  # no validation: JAX rebuilds pytrees with tracers/sentinels
        for name, value in zip(_DP_FIELDS, children):
            object.__setattr__(obj, name, value)
        return obj

    @property
    def n_prompts(self) -> int:
        return self.probs.shape[0]

    @property
    def n_responses(self) -> int:
        return self.probs.shape[1]

    @property
    def dim(self) -> int:
        return self.scores.shape[2]

    # --- exact per-prompt quantities --------------------------------------------------------
    @float64
    def values(self) -> jnp.ndarray:
        """V(x), shape (P,)."""
        return jnp.sum(self.probs * self.reward_means, axis=1)

    @float64
    def objective(self) -> jnp.ndarray:
        """J(theta) = E_X V(X)."""
        return jnp.dot(self.prompt_probs, self.values())

    @float64
    def prompt_gradients(self) -> jnp.ndarray:
        """g(x) = E[s Z | x], shape (P, D)."""
        return jnp.einsum("pk,pkd->pd", self.probs * self.reward_means, self.scores)

    @float64
    def gradient(self) -> jnp.ndarray:
        """grad J = E_X g(X), shape (D,)."""
        return self.prompt_probs @ self.prompt_gradients()

    @float64
    def pass_k_prompt_gradients(self, k: int = 1) -> jnp.ndarray:
        """Each prompt's gradient of pass@k (:func:`pass_k_targets`)."""
        return pass_k_targets(self.values(), self.prompt_gradients(), k)

    @float64
    def pass_k_gradient(self, k: int = 1) -> jnp.ndarray:
        """``grad pass@k = E_X[k (1 - V(X))^(k-1) g(X)]``, shape (D,); ``grad J`` for k = 1."""
        return self.prompt_probs @ self.pass_k_prompt_gradients(k)

    @float64
    def score_sq_norms(self) -> jnp.ndarray:
        """||s(x, y)||^2, shape (P, K)."""
        return jnp.sum(self.scores**2, axis=-1)

    @float64
    def mean_score_sq_norm(self) -> jnp.ndarray:
        """E[||s||^2 | x], shape (P,)."""
        return jnp.sum(self.probs * self.score_sq_norms(), axis=1)

    @float64
    def optimal_baselines(self) -> jnp.ndarray:
        """MSE-optimal constant baseline b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x] (Greensmith)."""
        num = jnp.sum(self.probs * self.score_sq_norms() * self.reward_means, axis=1)
        den = self.mean_score_sq_norm()
        return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), self.values())

    @float64
    def oracle_covariances(self) -> jnp.ndarray:
        """Sigma_or(x) = Cov[s (Z - V(x)) | x], shape (P, D, D)."""
        v = self.values()[:, None]
        m2 = self.reward_means - 2 * self.reward_means * v + v**2  # E[(Z - V)^2 | x, y]
        second = jnp.einsum("pk,pkd,pke->pde", self.probs * m2, self.scores, self.scores)
        g = self.prompt_gradients()
        return second - jnp.einsum("pd,pe->pde", g, g)


class ProblemSource:
    """The root of :class:`~grpo_theory.core.policy.EnumerablePolicy`.

    The converters below the policy module (:func:`as_problem` here,
    :func:`~grpo_theory.core.gram.as_structure`) dispatch on it: the policy module builds on
    this one, so they cannot name the public class itself. Not to be subclassed directly.
    """

    __slots__ = ()


_DP_FIELDS = ("prompt_probs", "probs", "scores", "reward_means")
#: tolerance on the sums of ``prompt_probs`` and of each row of ``probs`` in a DiscreteProblem
PROB_TOL = 1e-6


def _is_concrete_array(a) -> bool:
    return isinstance(a, (np.ndarray, jax.Array, list, tuple)) and V.is_concrete(a)


def _check_discrete_problem(prompt_probs, probs, scores, reward_means):
    """Validate a DiscreteProblem's concrete fields; returns replacements (or None to keep)."""
    f = V.real_array("prompt_probs", prompt_probs, ndim=1)
    pi = V.real_array("probs", probs, ndim=2)
    s = V.real_array("scores", scores, ndim=3)
    mu = V.real_array("reward_means", reward_means, ndim=2)
    P, K = pi.shape
    V.same_shape("prompt_probs", f, (P,), "probs (P, K)")
    V.same_shape("scores", s, (P, K, s.shape[2]), "probs (P, K)")
    V.same_shape("reward_means", mu, (P, K), "probs (P, K)")
    if np.any(f < 0) or abs(f.sum() - 1.0) > PROB_TOL:
        raise ValueError(f"prompt_probs must be non-negative and sum to 1 (to {PROB_TOL:g}), "
                         f"got min {float(f.min())!r}, sum {float(f.sum())!r}")
    rows = pi.sum(axis=1)
    bad = np.abs(rows - 1.0) > PROB_TOL
    if np.any(pi < 0) or np.any(bad):
        raise ValueError(f"probs must be non-negative with rows summing to 1 (to {PROB_TOL:g}), "
                         f"got min {float(pi.min())!r}, row sums in "
                         f"[{float(rows.min())!r}, {float(rows.max())!r}]")
    clipped = V.unit_interval("reward_means", mu)
    out = [None if isinstance(a, (np.ndarray, jax.Array)) else jnp.asarray(b)
           for a, b in zip((prompt_probs, probs, scores, reward_means), (f, pi, s, mu))]
    if np.any(clipped != mu):
        out[3] = jnp.asarray(clipped)
    return out


@float64
def as_problem(policy_or_problem) -> DiscreteProblem:
    """Accept an enumerable policy or a :class:`DiscreteProblem`.

    Args:
        policy_or_problem: an :class:`~grpo_theory.core.policy.EnumerablePolicy` (its
            ``problem()``) or a :class:`DiscreteProblem`.

    Returns:
        The :class:`DiscreteProblem` (``ValueError`` for anything else).
    """
    if isinstance(policy_or_problem, DiscreteProblem):
        return policy_or_problem
    if isinstance(policy_or_problem, ProblemSource):
        return policy_or_problem.problem()
    raise ValueError(
        "bandit must be an enumerable policy (an EnumerablePolicy: SoftmaxBandit, "
        "LinearSoftmaxBandit, SequencePolicy, ...) or a DiscreteProblem, got "
        f"{type(policy_or_problem).__name__}"
    )
