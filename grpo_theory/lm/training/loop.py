r"""The small transformer's one training loop: GRPO steps in a jitted ``lax.scan`` whose variant
(estimator, group or rollout rule, clipping, what is recorded) is one static value.

Each step draws B prompts, generates their responses, scores them with the exact-answer reward
and takes one optimiser step (or ``epochs`` clipped ones) along

.. math:: \hat g = \sum_{b,g} w_{bg} \nabla\log\pi(y_{bg}|x_b).

* **A fixed group** (``LMVariant(group=G)``, Algorithm 1): ``G`` responses to each of ``B``
  prompts drawn uniformly from the pool, ``w_bg = A_bg / (BG)`` with ``A`` the estimator's
  advantages of the whole batch (so an estimator that pools across prompts, weights responses by
  their squared score norms or carries a state across steps trains as any other).
* **A rollout rule** (``LMVariant(rule=...)``): the rule draws and keeps
  (:meth:`~grpo_theory.core.rollout_rules.RolloutRule.step` with
  :class:`~grpo_theory.lm.training.allocation.LMSampler`), ``w_bg = m_bg A_bg / (n_b |K|)``
  with ``A`` the estimator's masked advantages (the mean over kept prompts of each prompt's
  estimate on its kept responses, :func:`~grpo_theory.core.rollout_rules.kept_weights`).

The two front ends, :func:`~grpo_theory.lm.training.grpo.train_grpo` (a fixed group, a budget
``N = BG``) and :func:`~grpo_theory.lm.training.allocation.train_with_rule` (a rule, a rollout
budget), run this loop. What the estimator reads besides the rewards comes from the loop
(:data:`SUPPLIED`): the prompt's pool index, its exact pass rate ``V(x) = pi(y*|x)`` by teacher
forcing, each response's squared score norm (per-sample gradients) and the estimator's carried
state (over the pool's prompts, updated after every step with the step's prompts and rewards).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import optax

from ...allocation import unique_answer_constants
from ...core import (Draw, Estimator, PromptContext, RolloutRule, Sampler, get_estimator,
                     kept_weights)
from ...optim import clipped_surrogate, multi_epoch_update
from ..policy import seq_log_probs, token_log_probs
from ..task import EOS, response_mask, reward_exact_tokens

#: the :class:`~grpo_theory.core.PromptContext` fields the loop supplies to an estimator
SUPPLIED = ("prompt", "value", "score_sq", "state")


@dataclass(frozen=True)
class LMVariant:
    """What one run trains: hashable, a static argument of the jitted loop (one compilation per
    value and shape).

    Attributes:
        estimator: a registered estimator's name or an :class:`~grpo_theory.core.Estimator`.
        group: G responses to every prompt (Algorithm 1); exactly one of ``group`` and ``rule``.
        rule: a :class:`~grpo_theory.core.rollout_rules.RolloutRule` deciding each step's
            responses (its sampler is the transformer's).
        epochs: optimiser steps on each batch (> 1: the clipped multi-epoch variant).
        clip_eps: the ratio clip (``None``: no clip).
        track: record the exact held-out accuracy after every step.
    """

    estimator: object = "grpo"
    group: int | None = None
    rule: RolloutRule | None = None
    epochs: int = 1
    clip_eps: float | None = None
    track: bool = False

    def __post_init__(self):
        if (self.group is None) == (self.rule is None):
            raise ValueError("give exactly one of group (a fixed G) and rule (a rollout rule)")
        if isinstance(self.epochs, bool) or int(self.epochs) != self.epochs or self.epochs < 1:
            raise ValueError(f"epochs must be an integer >= 1, got {self.epochs!r}")
        object.__setattr__(self, "epochs", int(self.epochs))  # one static value per count
        if self.clip_eps is not None and not 0.0 < self.clip_eps < 1.0:
            raise ValueError(f"clip_eps must be None or lie in (0, 1), got {self.clip_eps!r}")
        est = get_estimator(self.estimator)
        missing = [n for n in est.needs if n not in SUPPLIED]
        if missing:
            raise ValueError(f"estimator {est.name!r} reads {missing}, which the transformer's "
                             f"training loop does not supply (it supplies {list(SUPPLIED)})")
        if self.rule is not None and est.masked is None:
            est.masked_advantage(None, None)  # raises, naming the missing masked form
        if self.rule is not None and est.stateful:
            raise ValueError(f"estimator {est.name!r} carries a state across steps: under a "
                             "rollout rule train with a fixed group instead (group=G)")

    @property
    def est(self) -> Estimator:
        return get_estimator(self.estimator)

    @property
    def clipped(self) -> bool:
        return self.clip_eps is not None or self.epochs > 1


def sq_norms(apply_fn, params, x, y, temperature, eos):
    """``||grad log pi(y_i | x_i)||^2`` of each row (per-sample gradients, vmapped)."""
    def one(xi, yi):
        g = jax.grad(lambda q: seq_log_probs(apply_fn, q, xi[None], yi[None], temperature,
                                             eos)[0])(params)
        return sum(jnp.sum(leaf.astype(jnp.float32) ** 2) for leaf in jax.tree_util.tree_leaves(g))

    return jax.lax.stop_gradient(jax.vmap(one)(x, y))


def draw_responses(sample_fn, params, key, xb, cb, width, temperature):
    """``width`` responses to each prompt of ``xb`` and their rewards ``(B, width)``."""
    x = jnp.repeat(xb, width, axis=0)
    y = jax.lax.stop_gradient(sample_fn(params, key, x, cb.shape[1], temperature))
    z = reward_exact_tokens(y, jnp.repeat(cb, width, axis=0)).astype(jnp.float32)
    return x, y, z.reshape(xb.shape[0], width)


class LMSampler(Sampler):
    """The transformer's :class:`~grpo_theory.allocation.Sampler`: prompts uniform over the
    training pool, responses from the policy, the exact-answer reward.

    ``pass_rates`` are the exact ``V(x) = pi(y*|x)`` by teacher forcing (the pass-rate rules as
    they would run with perfect predictions); ``mse_constants`` are those of a prompt whose one
    correct response is ``y*`` (:func:`~grpo_theory.allocation.unique_answer_constants`) with
    ``E||s||^2`` replaced by the state: the previous step's mean over its prompts of the first
    response's ``||s||^2`` (:meth:`observe`). A draw's ``y`` is ``(prompts, responses)``, each
    ``(n, W, L)``.
    """

    def __init__(self, apply_fn, sample_fn, params, pool_x, pool_c, temperature, eos):
        self.apply_fn, self.sample_fn, self.params = apply_fn, sample_fn, params
        self.pool_x, self.pool_c, self.temperature, self.eos = pool_x, pool_c, temperature, eos

    def draw(self, key, n, width):
        kx, ky = jax.random.split(key)
        idx = jax.random.randint(kx, (n,), 0, self.pool_x.shape[0])
        x, y, z = draw_responses(self.sample_fn, self.params, ky, self.pool_x[idx],
                                 self.pool_c[idx], width, self.temperature)
        yy = y.reshape(n, width, -1)
        return Draw(idx, (x.reshape(n, width, -1), yy), z, jnp.all(yy == yy[:, :1], axis=-1))

    def _teacher_forced(self, idx):
        return jax.lax.stop_gradient(jnp.exp(seq_log_probs(
            self.apply_fn, self.params, self.pool_x[idx], self.pool_c[idx], self.temperature,
            self.eos)))

    def pass_rates(self, idx, state):
        return self._teacher_forced(idx)

    def mse_constants(self, idx, state):
        sq = sq_norms(self.apply_fn, self.params, self.pool_x[idx], self.pool_c[idx],
                       self.temperature, self.eos)
        return unique_answer_constants(self._teacher_forced(idx), sq, state)

    def observe(self, state, draw, mask):
        first = draw.y[1][:, 0]
        return jnp.mean(sq_norms(self.apply_fn, self.params, self.pool_x[draw.x], first,
                                  self.temperature, self.eos))


def _context(est, apply_fn, params, pool_x, pool_c, idx, x, y, state, temperature, eos, shape):
    """The :class:`PromptContext` with the fields ``est`` reads (empty when it reads none)."""
    if not est.needs:
        return PromptContext()
    value = sq = None
    if "value" in est.needs:
        value = jax.lax.stop_gradient(jnp.exp(seq_log_probs(
            apply_fn, params, pool_x[idx], pool_c[idx], temperature, eos)))
    if "score_sq" in est.needs:
        sq = sq_norms(apply_fn, params, x, y, temperature, eos).reshape(shape)
    return PromptContext(prompt=idx, value=value, score_sq=sq, state=state)


def clipped_objective(tok_lp, old_tok_lp, adv, mask, clip_eps):
    r"""The clipped surrogate to *maximise*, averaged over the N responses:

    .. math:: \frac1N\sum_n\sum_t m_{nt}\min\big(r_{nt}A_n,\ \mathrm{clip}(r_{nt}, 1-\epsilon,
              1+\epsilon)A_n\big),\qquad r_{nt} = \exp(\log\pi_{nt} - \log\pi^{old}_{nt}).

    At ``pi = pi_old`` (all ratios 1) its gradient is ``(1/N) sum_n A_n grad log pi(y_n|x_n)``,
    Algorithm 1's estimator; a token whose ratio has left ``[1 - eps, 1 + eps]`` in the direction
    that its advantage favours contributes no gradient
    (:func:`grpo_theory.optim.clipped.clipped_surrogate`, shared with the bandit loop).
    """
    r = jnp.exp(tok_lp - old_tok_lp)
    obj = clipped_surrogate(r, adv[:, None], clip_eps)
    return jnp.sum(obj * mask) / tok_lp.shape[0]


def _step_update(variant, apply_fn, opt, params, opt_state, x, y, w, temperature, eos, mean):
    """One optimiser step along ``sum_n w_n grad log pi(y_n|x_n)`` (``mean``: the weights are
    ``BG`` times that and the surrogate is their mean, Algorithm 1's form), or ``epochs`` steps
    on the clipped surrogate."""
    if not variant.clipped:
        def surrogate(p):
            lp = seq_log_probs(apply_fn, p, x, y, temperature, eos)
            return -jnp.mean(w * lp) if mean else -jnp.sum(w * lp)

        upd, opt_state = opt.update(jax.grad(surrogate)(params), opt_state, params)
        return optax.apply_updates(params, upd), opt_state
    old = jax.lax.stop_gradient(token_log_probs(apply_fn, params, x, y, temperature, eos))
    mask = response_mask(y, eos)
    eps = jnp.inf if variant.clip_eps is None else variant.clip_eps

    def objective(q):
        tok = token_log_probs(apply_fn, q, x, y, temperature, eos)
        if mean:
            return clipped_objective(tok, old, w, mask, eps)
        return jnp.sum(clipped_surrogate(jnp.exp(tok - old), w[:, None], eps) * mask)

    return multi_epoch_update(opt, params, opt_state, objective, variant.epochs)


@partial(jax.jit, static_argnames=("apply_fn", "sample_fn", "opt", "variant", "batch", "n_steps",
                                   "eos"))
def train_chunk(apply_fn, sample_fn, opt, variant: LMVariant, params, opt_state, state, key,
                pool_x, pool_c, eval_x, eval_c, batch, n_steps, temperature=1.0, eos=(EOS,)):
    """``n_steps`` steps of ``variant`` from ``params``.

    Args:
        apply_fn, sample_fn: the policy's model and jit-able sampler.
        opt: the optax transformation (static: reuse one object, e.g.
            :func:`~grpo_theory.lm.training.grpo.cached_optimizer`).
        variant: the :class:`LMVariant`.
        params, opt_state: where the chunk starts.
        state: the carried state: the estimator's (fixed group; ``None`` when stateless) or the
            rule's sampler's (rule).
        key: the chunk's key (one split per step).
        pool_x, pool_c: the training prompts and their canonical responses.
        eval_x, eval_c: the held-out prompts and canonical responses (read when tracking).
        batch: B prompts a step; n_steps: steps.

    Returns:
        ``(params, opt_state, state, out)``; ``out`` per step: ``reward`` (the mean reward of the
        kept responses), with a rule also ``rollouts`` (responses generated) and ``kept``
        (prompts kept), and ``accuracy`` (the exact held-out accuracy after the step) when
        ``variant.track`` or under a rule.
    """
    est = variant.est

    def accuracy(params):
        return jnp.mean(jnp.exp(seq_log_probs(apply_fn, params, eval_x, eval_c, temperature,
                                              eos)))

    def fixed_step(carry, k):
        params, opt_state, state = carry
        group = variant.group
        kx, ky = jax.random.split(k)
        idx = jax.random.randint(kx, (batch,), 0, pool_x.shape[0])
        x = jnp.repeat(pool_x[idx], group, axis=0)
        canon = jnp.repeat(pool_c[idx], group, axis=0)
        y = jax.lax.stop_gradient(sample_fn(params, ky, x, pool_c.shape[1], temperature))
        # float64 under jax_enable_x64, else float32 (no truncation warning on accelerators)
        z = reward_exact_tokens(y, canon).astype(float).reshape(batch, group)
        ctx = _context(est, apply_fn, params, pool_x, pool_c, idx, x, y, state, temperature, eos,
                       (batch, group))
        adv = est.advantage(z, ctx).reshape(-1).astype(jnp.float32)
        state = est.next_state(state, idx, z, ctx)
        params, opt_state = _step_update(variant, apply_fn, opt, params, opt_state, x, y, adv,
                                         temperature, eos, mean=True)
        out = dict(reward=jnp.mean(z))
        if variant.track:
            out["accuracy"] = accuracy(params)
        return (params, opt_state, state), out

    def rule_step(carry, k):
        params, opt_state, s2 = carry
        sampler = LMSampler(apply_fn, sample_fn, params, pool_x, pool_c, temperature, eos)
        st = variant.rule.step(k, sampler, batch, s2)
        x, y = (a.reshape(-1, a.shape[-1]) for a in st.draw.y)
        z, mask = st.draw.z, st.mask
        ctx = _context(est, apply_fn, params, pool_x, pool_c, st.draw.x, x, y, None,
                       temperature, eos, z.shape)
        w, kept = kept_weights(est.masked_advantage(z, mask, ctx), mask)
        params, opt_state = _step_update(variant, apply_fn, opt, params, opt_state, x, y,
                                         w.reshape(-1), temperature, eos, mean=False)
        gen = jnp.sum(mask * z) / jnp.maximum(jnp.sum(mask), 1)
        return (params, opt_state, st.state), dict(accuracy=accuracy(params),
                                                   rollouts=st.rollouts, kept=kept, reward=gen)

    step = fixed_step if variant.rule is None else rule_step
    (params, opt_state, state), out = jax.lax.scan(step, (params, opt_state, state),
                                                   jax.random.split(key, n_steps))
    return params, opt_state, state, out
