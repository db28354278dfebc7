r"""The jit-able training step of every rollout rule, written once for every training loop.

A training loop (the bandit families', the small transformer's) hands a rule its own sampler;
the rule draws, decides which responses enter the estimate and reports what it spent (the
contract, :class:`~grpo_theory.core.rollout_rules.Sampler`, ``Draw``, ``Step`` and the kept
responses' weights, lives in :mod:`grpo_theory.core.rollout_rules`, where every loop meets it):

.. code-block:: python

    step = rule.step(key, sampler, batch_size, state)   # -> Step(draw, mask, rollouts, state)
    w, kept = loo_weights(step.draw.z, step.mask)        # ghat = sum_bg w_bg s(x_b, y_bg)

* A rule decided by the reward counts (:meth:`~grpo_theory.allocation.rules.Rule.decide`: fixed
  G, per-prompt G_x, DAPO's filter-and-refill, PODS, Reinforce-Ada, conformal stopping on
  rewards) needs no code here: :func:`count_step` derives its step from ``decide`` (the same
  decisions the exact audit reads), so a new count rule reaches every loop by itself.
* Rules that read more override :meth:`~grpo_theory.allocation.rules.Rule.step`: conformal
  stopping on answers (:func:`conformal_answer_sizes`), the pass-rate allocations (Knapsack RL,
  VIP, sGPO: :class:`~grpo_theory.allocation.rules.PassRateRule`) and the MSE-optimal allocation
  (:class:`~grpo_theory.allocation.optimal.OptimalAllocation`), which ask the sampler for what
  they read (:meth:`Sampler.pass_rates`, :meth:`Sampler.mse_constants`).

The caller supplies the sampler (so this package never imports a model): :meth:`Sampler.draw`
returns ``n`` prompts with ``W`` responses each as a :class:`Draw`. Every step returns ``B``
rows: a refilling rule (DAPO) draws ``max_rounds`` rounds of ``B`` prompts and keeps the first
``B`` groups that are not dropped, in sampling order (then filler rows with an empty mask); every
response of the rounds used counts as spent.
"""

from __future__ import annotations

from functools import lru_cache

import jax.numpy as jnp
import numpy as np

from ..core import Sampler, Step, mask_from_sizes
from .greedy import knapsack_value, mse_gains, sizes_from_gains


def refill(valid, batch_size: int, rounds: int):
    """DAPO's refill over ``rounds`` rounds of B groups: ``(sel (B,), kept (B,), used)``.

    ``sel`` lists the first B valid groups in sampling order, then filler rows (``kept`` False);
    ``used`` is the number of rounds spent: the round of the B-th valid group, or all of them
    when fewer than B are valid (verl raises an error there; the step keeps what it has).
    """
    B = batch_size
    rank = jnp.cumsum(valid)
    keep = valid & (rank <= B)
    used = jnp.where(jnp.sum(valid) >= B, jnp.argmax(rank >= B) // B + 1, rounds)
    sel = jnp.argsort(jnp.where(keep, rank, B + 1 + jnp.arange(rounds * B)), stable=True)[:B]
    return sel, keep[sel], used


@lru_cache(maxsize=256)
def _count_tables(rule):
    """``decide`` for t = 1..H as (rows, H, H + 1) tables of stop, m1, m0 (numpy, static)."""
    H = rule.horizon()
    outs = [[np.asarray(a) for a in rule.decide(t, np.arange(t + 1))] for t in range(1, H + 1)]
    rows = max(a.shape[0] if a.ndim == 2 else 1 for out in outs for a in out)
    stop = np.zeros((rows, H, H + 1), bool)
    m1 = np.zeros((rows, H, H + 1), np.int32)
    m0 = np.zeros((rows, H, H + 1), np.int32)
    for t, (s, k1, k0) in enumerate(outs, start=1):
        for tab, a in ((stop, s), (m1, k1), (m0, k0)):
            tab[:, t - 1, :t + 1] = np.broadcast_to(a, (rows, t + 1))
    # every row reaches a t at which every count stops (at the latest its horizon)
    full = np.array([[stop[r, t - 1, :t + 1].all() for t in range(1, H + 1)] for r in range(rows)])
    if not full.any(axis=1).all():
        raise ValueError(f"rule {rule.name!r} does not stop by its horizon {H}")
    return stop, m1, m0


def count_step(rule, key, sampler: Sampler, batch_size: int, state) -> Step:
    """The step of a rule decided by the reward counts, derived from its ``decide``.

    After ``t`` responses with ``n1`` correct the rule stops or continues, and on stopping keeps
    the first ``m1`` correct and ``m0`` incorrect responses (:mod:`grpo_theory.allocation.rules`);
    the step walks those decisions along each row's sampled rewards. A refilling rule draws
    :meth:`~grpo_theory.allocation.rules.Rule.training_rounds` rounds and keeps the first B
    groups it does not drop (:func:`refill`).
    """
    B = batch_size
    H = rule.horizon()
    R = rule.training_rounds()
    d = sampler.draw(key, R * B, H)
    stop, t1, t0 = (jnp.asarray(a) for a in _count_tables(rule))
    rows = d.x if stop.shape[0] > 1 else jnp.zeros_like(d.x)
    zi = d.z.astype(jnp.int32)
    c1 = jnp.cumsum(zi, axis=1)  # correct among the first t
    t = jnp.arange(H)[None, :]
    first = jnp.argmax(stop[rows[:, None], t, c1], axis=1)  # t - 1 at the first stop
    n1 = jnp.take_along_axis(c1, first[:, None], axis=1)[:, 0]
    k1, k0 = t1[rows, first, n1], t0[rows, first, n1]
    keep = jnp.where(zi == 1, c1 <= k1[:, None], jnp.cumsum(1 - zi, axis=1) <= k0[:, None])
    keep &= t <= first[:, None]
    mask = keep.astype(d.z.dtype)
    sampled = first + 1
    if not rule.refills:
        return Step(d, mask, jnp.sum(sampled), state)
    sel, kept, used = refill(jnp.sum(keep, axis=1) > 0, B, R)
    spent = jnp.sum(jnp.where(jnp.arange(R * B) < used * B, sampled, 0))
    return Step(d.rows(sel), mask[sel] * kept[:, None].astype(mask.dtype), spent, state)


def sizes_step(sizes_fn, key, sampler: Sampler, batch_size: int, width: int, state) -> Step:
    """The step of a rule that decides each row's size ``n_b`` from the draw (the first
    ``n_b`` responses enter): ``sizes_fn(draw, state) -> (n (B,), state)``."""
    d = sampler.draw(key, batch_size, width)
    n, state = sizes_fn(d, state)
    return Step(d, mask_from_sizes(n, width, d.z.dtype), jnp.sum(n), state)


def conformal_answer_sizes(same, grid) -> jnp.ndarray:
    """C-GRPO on answers with ``qhat = 1``: the first grid size whose responses are all one
    answer, else the last grid size (``same``: (B, W) response g equals response 0)."""
    grid = jnp.asarray(grid)
    prefix = jnp.cumprod(same, axis=1)  # responses 0..g all one answer
    agree = prefix[:, grid - 1] > 0
    return jnp.where(jnp.any(agree, axis=1), grid[jnp.argmax(agree, axis=1)], grid[-1])


def knapsack_sizes(pass_rates, total: int, width: int, min_size: int = 2):
    """Knapsack RL's sizes ``(B,)`` in ``[min_size, width]`` summing to ``total`` (jit-able).

    The value ``v(G, p) = (1 - p^G - (1 - p)^G) p (1 - p)^2``
    (:func:`~grpo_theory.allocation.greedy.knapsack_value`) is concave in G, so the largest
    marginal gains ``v(G + 1) - v(G)`` give the optimum (a stable sort breaks ties by prompt,
    then by G).

    >>> import numpy as np
    >>> np.asarray(knapsack_sizes(jnp.array([0.5, 0.95]), 8, 6)).tolist()
    [6, 2]
    """
    p = jnp.asarray(pass_rates)
    if width <= min_size:
        return jnp.full(p.shape[0], min_size, jnp.int32)
    G = jnp.arange(min_size, width, dtype=p.dtype)[None, :]
    q = p[:, None]
    return sizes_from_gains(knapsack_value(G + 1, q, jnp) - knapsack_value(G, q, jnp), total,
                            min_size)


def remainder_sizes(share, total: int, min_size: int, max_size: int | None = None):
    """Integers ``>= min_size`` summing to ``total`` in proportion to ``share`` (largest
    remainders; ties to the earlier prompt), capped at ``max_size`` (the excess is not
    redistributed): the jit-able form of VIP's and sGPO's rounding."""
    share = jnp.asarray(share)
    share = jnp.where(jnp.any(share > 0), share, jnp.ones_like(share))
    spare = total - min_size * share.shape[0]
    raw = spare * share / jnp.sum(share)
    base = jnp.floor(raw).astype(jnp.int32)
    order = jnp.argsort(-(raw - base), stable=True)
    extra = jnp.zeros_like(base).at[order].set(
        (jnp.arange(base.size) < spare - jnp.sum(base)).astype(jnp.int32))
    sizes = base + extra + min_size
    return sizes if max_size is None else jnp.minimum(sizes, max_size)


def optimal_sizes(a, b, total: int, width: int):
    """The MSE-optimal sizes in ``[2, width]`` summing to ``total`` (greedy on the convex
    marginals of ``a/G + b/(G(G-1))``, :mod:`grpo_theory.allocation.optimal`)."""
    return sizes_from_gains(mse_gains(a, b, width), total)
