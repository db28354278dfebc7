r"""What a training loop and a rollout rule say to each other: the rule contract, the sampler
contract, and the weights of the kept responses.

A rollout rule decides, at every training step, which responses are generated and which enter
the estimate (fixed G, DAPO's filter-and-refill, conformal stopping, the pass-rate and
MSE-optimal allocations: :mod:`grpo_theory.allocation`). A training loop hands the rule its own
:class:`Sampler` and gets a :class:`Step` back:

.. code-block:: python

    step = rule.step(key, sampler, batch_size, state)  # -> Step(draw, mask, rollouts, state)
    adv = estimator.masked_advantage(step.draw.z, step.mask, ctx)
    w, kept = kept_weights(adv, step.mask)              # ghat = sum_bg w_bg s(x_b, y_bg)

The weights are the mean over the kept prompts K of each prompt's estimate on its ``n_b`` kept
responses, ``w_bg = m_bg A_bg / (n_b |K|)``. The contract lives in the core so that every loop
(the bandit families' :func:`grpo_theory.optim.make_train`, the small transformer's, TRL's) and
every rule meet on it without importing one another; :class:`ProblemSampler` is the enumerable
problems' sampler.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .estimators import masked_leave_one_out
from .gram import ExplicitScores
from .ustat import prompt_moments


class Draw(NamedTuple):
    """``n`` prompts with ``W`` responses each (what :meth:`Sampler.draw` returns).

    Attributes:
        x: (n,) prompt indices (into the caller's prompt set).
        y: the responses, any array or pytree with leading axes ``(n, W)`` (gathered by rows).
        z: (n, W) rewards in {0, 1} (the caller's float dtype).
        same: (n, W) bool, whether response g is the same answer as response 0 (conformal
            stopping on answers reads it).
    """

    x: jnp.ndarray
    y: object
    z: jnp.ndarray
    same: jnp.ndarray

    def rows(self, sel) -> "Draw":
        """The draw restricted to the rows ``sel``."""
        return Draw(self.x[sel], jax.tree_util.tree_map(lambda a: a[sel], self.y), self.z[sel],
                    self.same[sel])


class Step(NamedTuple):
    """One step of a rule: ``draw`` (B rows), ``mask`` (B, W) of the responses that enter the
    estimate (the caller's dtype), ``rollouts`` generated (every response drawn in the rounds
    used) and the sampler's ``state`` after the step."""

    draw: Draw
    mask: jnp.ndarray
    rollouts: jnp.ndarray
    state: object


class Sampler:
    """What a training loop gives a rule: its draws and, for the rules that read them, the
    per-prompt quantities decided before sampling. Subclass and implement :meth:`draw`; the
    other methods have defaults (the two readers refuse, naming themselves)."""

    def draw(self, key, n: int, width: int) -> Draw:  # pragma: no cover - abstract
        """``n`` prompts from the loop's prompt law, ``width`` responses each, with rewards."""
        raise NotImplementedError

    def init_state(self):
        """The state before the first step (default: none)."""
        return None

    def pass_rates(self, x, state) -> jnp.ndarray:
        """(n,) pass rates of the prompts ``x`` before sampling (Knapsack RL, VIP, sGPO)."""
        raise ValueError(f"{type(self).__name__} has no pass_rates: this rule allocates by "
                         "pass rate, implement Sampler.pass_rates")

    def mse_constants(self, x, state):
        """``(a, b)`` (n,) of the leave-one-out variance ``a/G + b/(G(G-1))`` of the prompts
        ``x`` before sampling (the MSE-optimal allocation)."""
        raise ValueError(f"{type(self).__name__} has no mse_constants: the MSE-optimal rule "
                         "needs them, implement Sampler.mse_constants")

    def observe(self, state, draw: Draw, mask):
        """The state after a step of a rule that reads it (default: unchanged)."""
        return state


class RolloutRule:
    """The training loops' view of a rollout rule (:class:`grpo_theory.allocation.Rule`
    subclasses it): a frozen, hashable value (a static argument of ``jax.jit``) with a jit-able
    :meth:`step`."""

    def training_rounds(self) -> int:
        """Rounds of B prompts one training step draws (1; a refilling rule's cap)."""
        return 1

    def step(self, key, sampler: Sampler, batch_size: int, state) -> Step:
        """One training step: draw with the caller's ``sampler``, decide, report the spend."""
        raise NotImplementedError(f"{type(self).__name__} has no training step: implement "
                                  "RolloutRule.step(key, sampler, batch_size, state)")


# --- the kept responses' weights ---------------------------------------------------------------


def mask_from_sizes(n, width: int, dtype) -> jnp.ndarray:
    """(B, W) mask of the first ``n_b`` responses of each row."""
    return (jnp.arange(width)[None, :] < n[:, None]).astype(dtype)


def kept_weights(adv, mask):
    """``(w (B, W), kept)``: ``w_bg = m_bg A_bg / (n_b |K|)`` with ``|K|`` the prompts with a
    kept response (the mean over kept prompts of each prompt's mean term)."""
    n = jnp.sum(mask, axis=1)
    kept = jnp.sum(n > 0)
    return mask * adv / jnp.maximum(n, 1)[:, None] / jnp.maximum(kept, 1), kept


def loo_weights(z, mask):
    r"""Per-response weights ``w (B, W)`` with ``ghat = sum_bg w_bg s(x_b, y_bg)``: the mean
    over the kept prompts K of each prompt's leave-one-out estimate on its ``n_b`` kept
    responses, ``w_bg = m_bg (z_bg - \sum_{h \ne g} m_bh z_bh / (n_b - 1)) / (n_b |K|)``.

    Args:
        z: (B, W) rewards; mask: (B, W) the kept responses (0/1).

    Returns:
        ``(w (B, W), kept)`` with ``kept = |K|`` the prompts with a kept response.

    >>> import numpy as np
    >>> w, kept = loo_weights(jnp.array([[1.0, 0.0, 1.0]]), jnp.array([[1.0, 1.0, 0.0]]))
    >>> np.asarray(w).tolist(), int(kept)
    ([[0.5, -0.5, 0.0]], 1)
    """
    return kept_weights(masked_leave_one_out(z, mask), mask)


# --- the enumerable problems' sampler ----------------------------------------------------------


class ProblemSampler(Sampler):
    """A :class:`~grpo_theory.core.problem.DiscreteProblem`'s sampler: prompts ~ f, responses
    ~ pi, Bernoulli rewards; an answer is the response itself.

    ``mse_constants`` are the leave-one-out constants ``a_x = tr Sigma_or(x)``, ``b_x = E||s||^2
    Var(Z|x) + ||g(x)||^2`` (:func:`grpo_theory.core.prompt_moments`) of the current policy with
    the reward means estimated from the earlier steps' rewards only (the state: Laplace counts
    ``(trials, wins)`` over (prompt, response), updated with the generated responses).
    """

    def __init__(self, dp):
        self.dp = dp

    def draw(self, key, n, width):
        dp = self.dp
        kx, ky, kz = jax.random.split(key, 3)
        x = jax.random.categorical(kx, jnp.log(dp.prompt_probs), shape=(n,))
        y = jax.random.categorical(ky, jnp.log(dp.probs)[x][..., None, :], axis=-1,
                                   shape=(n, width))
        z = (jax.random.uniform(kz, (n, width)) < dp.reward_means[x[..., None], y]
             ).astype(jnp.float64)
        return Draw(x, y, z, y == y[:, :1])

    def init_state(self):
        return (jnp.zeros(self.dp.probs.shape), jnp.zeros(self.dp.probs.shape))

    def mse_constants(self, x, state):
        dp = self.dp
        mu_hat = (state[1] + 1.0) / (state[0] + 2.0)
        mo = prompt_moments(ExplicitScores(dp.prompt_probs, dp.probs, mu_hat, dp.scores))
        return mo.tr_sigma_oracle[x], (mo.score_sq * mo.sigma2 + mo.grad_sq)[x]

    def observe(self, state, draw, mask):
        P, K = self.dp.probs.shape
        cell = (draw.x[:, None] * K + draw.y).reshape(-1)
        trials = state[0].reshape(-1).at[cell].add(mask.reshape(-1))
        wins = state[1].reshape(-1).at[cell].add((mask * draw.z).reshape(-1))
        return trials.reshape(P, K), wins.reshape(P, K)
