r"""Score structures: the exact routines through inner products of scores, never a (P, K, D) tensor.

Every exact quantity of the package (Theorem 2, Proposition 3, Theorem 7 and the binary-reward
conditioning of :mod:`grpo_theory.core.exact`) is a weighted sum of scores or an inner product of
such sums. For a prompt x with scores ``S_x = [s(x, 1) .. s(x, K)]`` they need only

* ``project(W)``: the weighted score sums ``S_x^T w_x`` for a weight array ``W`` (P, K), returned
  as *block vectors* (P, D_b) in the coordinates of the parameters the prompt's scores live in;
* ``sq_norms()``: ``||s(x, y)||^2`` (P, K) (the diagonal of ``Gram_x[y, y'] = <s(x,y), s(x,y')>``);
* how block vectors of different prompts meet: **disjoint** blocks (tabular policies: prompt x's
  scores live in its own parameters, so ``<g(x), g(x')> = 0`` for x != x' and the global vector
  ``sum_x f(x) u_x`` is the concatenation of the blocks ``f(x) u_x``) or **shared** (one
  parameter vector for all prompts, D_b = D).

Two implementations:

* :class:`TabularScores` (disjoint, O(P K T) time and memory): a tabular softmax per context
  ("row" r = a (position, previous token) pair of the prompt, one row for a bandit). With
  ``s(x, y) = sum_t e_{r_t} (e_{y_t} - pi(.|x, r_t))^T`` (distinct rows per position t):
  ``S_x^T w = A_x - rowsum(A_x) pi_x`` with ``A_x`` the scatter-add of ``w`` over the (row,
  token) cells of the responses, and
  ``||s(x, y)||^2 = sum_t (1 - 2 pi(y_t|r_t) + ||pi(.|r_t)||^2)``.
  For a :class:`~grpo_theory.SoftmaxBandit` (one row, T = 1) this is ``S_x^T w = w - pi_x (1.w)``
  and ``||s(x,y)||^2 = 1 - 2 pi_y + ||pi_x||^2``.
* :class:`ExplicitScores` (explicit (P, K, D_b) scores, disjoint or shared): the linear softmax
  bandit's scores ``F_x - 1 (pi_x^T F_x)`` (O(P K d)) and the generic fallback from a dense
  :class:`~grpo_theory.DiscreteProblem` (shared, D_b = D) so every existing caller works.

:func:`as_structure` accepts a structure, an enumerable policy (its ``score_structure()``) or a
:class:`~grpo_theory.DiscreteProblem`.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from .. import _validation as V
from .problem import DiscreteProblem, ProblemSource, pass_k_targets
from .._precision import float64


class ScoreStructure:
    """Common interface (see the module docstring). Subclasses are JAX pytrees.

    Attributes shared by all: ``prompt_probs`` (P,), ``probs`` (P, K), ``reward_means`` (P, K),
    ``disjoint`` (bool) and ``param_shape`` (the policy's parameter shape, or ``None``).
    """

    prompt_probs: jnp.ndarray
    probs: jnp.ndarray
    reward_means: jnp.ndarray
    disjoint: bool
    param_shape: tuple | None

    # --- the two primitives ---------------------------------------------------------------------
    @float64
    def project(self, weights) -> jnp.ndarray:  # pragma: no cover - abstract
        """Block vectors ``u_x = sum_y W[x, y] s(x, y)``, shape (P, D_b)."""
        raise NotImplementedError

    @float64
    def sq_norms(self) -> jnp.ndarray:  # pragma: no cover - abstract
        """``||s(x, y)||^2``, shape (P, K)."""
        raise NotImplementedError

    # --- sizes --------------------------------------------------------------------------------
    @property
    @float64
    def n_prompts(self) -> int:
        return self.probs.shape[0]

    @property
    @float64
    def n_responses(self) -> int:
        return self.probs.shape[1]

    @property
    @float64
    def block_dim(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    @float64
    def dim(self) -> int:
        """D, the number of parameters (P D_b for disjoint blocks)."""
        return self.n_prompts * self.block_dim if self.disjoint else self.block_dim

    # --- exact per-prompt quantities (block vectors) -------------------------------------------
    @float64
    def values(self) -> jnp.ndarray:
        """V(x) = sum_y pi(y|x) mu(x, y), shape (P,)."""
        return jnp.sum(self.probs * self.reward_means, axis=1)

    @float64
    def prompt_gradients(self) -> jnp.ndarray:
        """g(x) = E[s Z | x] as block vectors (P, D_b)."""
        return self.project(self.probs * self.reward_means)

    @float64
    def pass_k_prompt_gradients(self, k: int = 1) -> jnp.ndarray:
        """Each prompt's gradient of pass@k (:func:`pass_k_targets`)."""
        return pass_k_targets(self.values(), self.prompt_gradients(), k)

    @float64
    def mean_scores(self) -> jnp.ndarray:
        """E[s | x] as block vectors (P, D_b) (zero up to rounding for exact scores)."""
        return self.project(self.probs)

    @float64
    def optimal_baselines(self) -> jnp.ndarray:
        """b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x] (V(x) where E||s||^2 = 0)."""
        ssq = self.sq_norms()
        num = jnp.sum(self.probs * ssq * self.reward_means, axis=1)
        den = jnp.sum(self.probs * ssq, axis=1)
        return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), self.values())

    # --- how prompts' block vectors combine -----------------------------------------------------
    @float64
    def combine(self, weights, blocks) -> jnp.ndarray:
        """The global vector ``sum_x w_x u_x``, flat (D,)."""
        if self.disjoint:
            return (weights[:, None] * blocks).reshape(-1)
        return weights @ blocks

    @float64
    def mean_sq(self, weights, blocks) -> jnp.ndarray:
        """``||sum_x w_x u_x||^2`` without forming the global vector for disjoint blocks."""
        if self.disjoint:
            return jnp.sum(weights**2 * jnp.sum(blocks**2, axis=1))
        return jnp.sum((weights @ blocks) ** 2)

    @float64
    def spread(self, weights, blocks) -> jnp.ndarray:
        """``sum_x w_x ||u_x - ubar||^2`` with ``ubar = sum_x w_x u_x`` (weights sum to one)."""
        if self.disjoint:
            n = jnp.sum(blocks**2, axis=1)
            total = jnp.sum(weights**2 * n)  # ||ubar||^2
            # ||u_x - ubar||^2 = (1 - w_x)^2 n_x + (||ubar||^2 - w_x^2 n_x)
            return jnp.sum(weights * ((1 - weights) ** 2 * n + (total - weights**2 * n)))
        ubar = weights @ blocks
        return weights @ jnp.sum((blocks - ubar) ** 2, axis=1)

    @float64
    def gradient(self) -> jnp.ndarray:
        """grad J = sum_x f(x) g(x), flat (D,); reshape with ``param_shape``."""
        return self.combine(self.prompt_probs, self.prompt_gradients())

    @float64
    def check_embed(self) -> None:
        """``ValueError`` (naming the sizes) when :meth:`embed`'s (P, D) array would not fit."""
        if self.disjoint:
            P, Db = self.n_prompts, self.block_dim
            V.check_memory(f"embedding ({P}, {Db}) block vectors as a ({P}, {P * Db}) array",
                           8.0 * P * P * Db * 2, "use the per-prompt block vectors "
                           "(grpo_theory.core.gram) or exact_prompt_mse / exact_mse")

    @float64
    def embed(self, blocks) -> jnp.ndarray:
        """Block vectors as full parameter vectors (P, D) (zero outside a prompt's block).

        Raises ``ValueError`` when the (P, D) array would not fit (disjoint blocks: P^2 D_b).
        """
        if not self.disjoint:
            return blocks
        self.check_embed()
        P, Db = blocks.shape
        eye = jnp.eye(P, dtype=blocks.dtype)
        return (eye[:, :, None] * blocks[None, :, :]).reshape(P, P * Db)


def _pytree(cls, children: tuple, static: tuple):
    def flatten(obj):
        return tuple(getattr(obj, c) for c in children), tuple(getattr(obj, s) for s in static)

    def unflatten(aux, kids):
        return cls(**dict(zip(children, kids)), **dict(zip(static, aux)))

    jax.tree_util.register_pytree_node(cls, flatten, unflatten)
    return cls


@dataclass(frozen=True)
class TabularScores(ScoreStructure):
    """Tabular softmax rows per prompt: disjoint blocks of D_b = R n parameters (module doc).

    ``cell_probs`` (P, R, n): pi(. | x, r) for each row r; ``rows``, ``tokens``, ``mask`` (K, T):
    the row and the token of response y at position t (mask 0 after the end of the response).
    """

    prompt_probs: jnp.ndarray
    probs: jnp.ndarray
    reward_means: jnp.ndarray
    cell_probs: jnp.ndarray
    rows: jnp.ndarray
    tokens: jnp.ndarray
    mask: jnp.ndarray
    param_shape: tuple | None = None
    identity: bool = False  # one row and response y = token y (the softmax bandit)
    disjoint = True

    @property
    @float64
    def block_dim(self) -> int:
        return self.cell_probs.shape[1] * self.cell_probs.shape[2]

    @float64
    def project(self, weights):
        weights = jnp.asarray(weights)
        P, R, n = self.cell_probs.shape
        if self.identity:  # S_x^T w = w - pi_x (1.w)
            pi = self.cell_probs[:, 0, :]
            return weights - pi * jnp.sum(weights, axis=1, keepdims=True)
        cells = (self.rows * n + self.tokens).reshape(-1)  # (K T,)
        wt = (weights[:, :, None] * self.mask[None]).reshape(P, -1)  # (P, K T)
        a = jnp.zeros((P, R * n), weights.dtype).at[:, cells].add(wt).reshape(P, R, n)
        return (a - jnp.sum(a, axis=2, keepdims=True) * self.cell_probs).reshape(P, R * n)

    @float64
    def sq_norms(self):
        pi = self.cell_probs
        if self.identity:
            return 1.0 - 2.0 * pi[:, 0, :] + jnp.sum(pi[:, 0, :] ** 2, axis=1, keepdims=True)
        row_sq = jnp.sum(pi**2, axis=2)  # (P, R)
        p_tok = pi[:, self.rows, self.tokens]  # (P, K, T)
        per_t = 1.0 - 2.0 * p_tok + row_sq[:, self.rows]
        return jnp.sum(per_t * self.mask[None], axis=2)

    @classmethod
    @float64
    def softmax_bandit(cls, logits, reward_means, prompt_probs):
        """s(x, y) = e_x (e_y - pi_x)^T for logits (P, K): one row per prompt, T = 1."""
        logits = jnp.asarray(logits)
        P, K = logits.shape
        pi = jax.nn.softmax(logits, axis=-1)
        idx = jnp.arange(K)[:, None]
        return cls(jnp.asarray(prompt_probs), pi, jnp.asarray(reward_means), pi[:, None, :],
                   jnp.zeros_like(idx), idx, jnp.ones((K, 1), pi.dtype), (P, K), True)

    @classmethod
    @float64
    def sequence(cls, params, probs, reward_means, prompt_probs, positions, prev, tokens, mask):
        """Tabular autoregressive policy: params (P, T, C, n), row of (t, prev) = t C + prev."""
        params = jnp.asarray(params)
        P, T, C, n = params.shape
        pi = jax.nn.softmax(params, axis=-1).reshape(P, T * C, n)
        rows = jnp.asarray(positions) * C + jnp.asarray(prev)
        return cls(jnp.asarray(prompt_probs), jnp.asarray(probs), jnp.asarray(reward_means), pi,
                   rows, jnp.asarray(tokens), jnp.asarray(mask), (P, T, C, n), False)


_pytree(TabularScores, ("prompt_probs", "probs", "reward_means", "cell_probs", "rows", "tokens",
                        "mask"), ("param_shape", "identity"))


@dataclass(frozen=True)
class ExplicitScores(ScoreStructure):
    """Explicit scores ``scores`` (P, K, D_b): shared parameters (D_b = D) or disjoint blocks."""

    prompt_probs: jnp.ndarray
    probs: jnp.ndarray
    reward_means: jnp.ndarray
    scores: jnp.ndarray
    disjoint: bool = False
    param_shape: tuple | None = None

    @property
    @float64
    def block_dim(self) -> int:
        return self.scores.shape[2]

    @float64
    def project(self, weights):
        return jnp.einsum("pk,pkd->pd", jnp.asarray(weights), self.scores)

    @float64
    def sq_norms(self):
        return jnp.sum(self.scores**2, axis=-1)

    @classmethod
    @float64
    def linear_softmax(cls, features, theta, reward_means, prompt_probs):
        """Linear softmax bandit: s(x, y) = F[x, y] - sum_y' pi(y'|x) F[x, y'] (shared, d)."""
        feats = jnp.asarray(features)
        theta = jnp.asarray(theta)
        pi = jax.nn.softmax(feats @ theta, axis=-1)
        centred = feats - jnp.einsum("pk,pkd->pd", pi, feats)[:, None, :]
        return cls(jnp.asarray(prompt_probs), pi, jnp.asarray(reward_means), centred, False,
                   tuple(theta.shape))

    @classmethod
    @float64
    def from_problem(cls, problem):
        """The generic fallback: a dense DiscreteProblem's (P, K, D) scores, shared parameters."""
        return cls(problem.prompt_probs, problem.probs, problem.reward_means, problem.scores,
                   False, None)


_pytree(ExplicitScores, ("prompt_probs", "probs", "reward_means", "scores"),
        ("disjoint", "param_shape"))


@float64
def as_structure(obj, params=None) -> ScoreStructure:
    """A :class:`ScoreStructure` for a structure, a policy or a :class:`DiscreteProblem`.

    Args:
        obj: a score structure (returned as is), an
            :class:`~grpo_theory.core.policy.EnumerablePolicy` (its ``score_structure()``:
            tabular blocks for ``SoftmaxBandit`` and ``SequencePolicy``, the dense fallback by
            default) or a ``DiscreteProblem`` (dense fallback).
        params: the policy's parameters (default: its current ones); ignored for the others.

    Returns:
        The score structure.
    """
    if isinstance(obj, ScoreStructure):
        return obj
    if isinstance(obj, DiscreteProblem):
        return ExplicitScores.from_problem(obj)
    if isinstance(obj, ProblemSource):
        return obj.score_structure(params)
    raise ValueError(
        "bandit must be an enumerable policy (an EnumerablePolicy: SoftmaxBandit, "
        "LinearSoftmaxBandit, SequencePolicy, ...), a DiscreteProblem or a ScoreStructure, got "
        f"{type(obj).__name__}"
    )
