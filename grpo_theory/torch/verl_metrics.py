r"""A grouped, unbiased gradient-noise metric for verl batches (beside ``variance_proxy/*``).

verl's ``compute_variance_proxy_metrics`` treats the N responses of a mini-batch as independent
and subtracts a parameter-space norm from a logit-space one; on groups its ``proxy3`` sees a
fraction of the variance (:func:`grpo_theory.core.verl_proxy_audit`). This module computes, from
what a verl batch holds, quantities that are unbiased in one space, **logit space**: every
context (the prompt and the response's tokens before position t) has its own logit vector, and
a response's score is

.. math:: s_i = \sum_t (e_{y_{it}} - \pi_{it}) \text{ at context } c_{it},

whose squared norm is verl's ``W = sum_t (1 - 2 pi_t(y_t) + sum pi^2)``. Two responses of one
prompt share the contexts of their common prefix, so, at each shared position,

.. math:: (e_a - \pi)\cdot(e_b - \pi) = [a = b] - \pi_a - \pi_b + \textstyle\sum \pi^2,

computable from the tokens, ``old_log_probs`` and ``sum_pi_squared``. Different prompts have no
context in common, so their coordinates are disjoint.

With ``X_i = sum_t A_it s_it`` (the advantages of the batch), the step is
``ghat = (1/N) sum_i X_i`` (verl's proxy scale: the sequence-sum aggregation, Dr. GRPO's), and,
conditional on the batch's prompts (each ``uid`` one prompt), the target is the gradient of their
mean reward, ``g = (1/N) sum_x G_x grad J_x`` with ``grad J_x = E[R s]`` (``E s = 0``):

* ``grad_sq = ||ghat||^2`` exactly;
* ``signal``: unbiased for ``||g||^2``, from each group's U-statistic
  ``U_x = sum_{i != j} R_i R_j s_i.s_j / (G_x (G_x - 1))`` (``E[R_i s_i . R_j s_j] =
  ||grad J_x||^2`` for independent responses);
* ``noise = grad_sq - signal``: unbiased for ``E||ghat||^2 - ||g||^2``, which is the step's MSE
  (= ``tr Cov(ghat)``) whenever the advantages are unbiased (leave-one-out, no baseline, JSPO's
  baseline, any baseline independent of the response); for a biased advantage (verl's ``grpo``
  with its standard-deviation division) it is that difference, not the MSE;
* ``iid_noise``: verl's ``proxy3`` formula, ``(mean_i ||X_i||^2 - ||ghat||^2)/(N - 1)``, computed
  in the same logit space: the number a user would get if responses were independent.

Intervals: a Student t interval (groups - 1 degrees of freedom) over the groups' independent
contributions (their sample variance, which also counts the spread between prompts); the terms
are skewed, so with few prompts it covers less than its level (the tests measure at least 90%
for a nominal 95% at 64 prompts of 4 responses). Groups of one response cannot estimate
their signal and are left out of ``signal`` and ``noise`` (counted in ``groups_skipped``).
Assumptions: on-policy responses (a batch with ``rollout_is_weights`` is refused), distinct
prompts per ``uid``, advantages as the loss uses them.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import t as student_t

#: the prefix of every metric name (they sit beside verl's ``variance_proxy/*``)
PREFIX = "grouped_variance/"
#: what :func:`grouped_variance_metrics` reads from ``DataProto.batch``
FIELDS = ("responses", "response_mask", "old_log_probs", "sum_pi_squared", "advantages")
_HINTS = {"sum_pi_squared": "set actor_rollout_ref.actor.calculate_sum_pi_squared=True",
          "old_log_probs": "the actor's log-probabilities of the sampled tokens",
          "advantages": "call it after compute_advantage",
          "responses": "the sampled token ids",
          "response_mask": "the response tokens' mask"}


def _group_terms(y, mask, pi, spi, adv, reward):
    """``(||Z||^2, sum_{i != j} R_i R_j s_i.s_j, sum_i ||X_i||^2)`` of one group (float64)."""
    G, T = y.shape
    m = mask.bool()
    same_tok = (y[:, None, :] == y[None, :, :])
    both = m[:, None, :] & m[None, :, :]
    agree = same_tok & both
    # the context at t is shared iff every earlier token agrees (and both responses reach t)
    before = torch.cumprod(agree.to(torch.float64), dim=-1)
    shared = torch.cat([torch.ones(G, G, 1, dtype=torch.float64, device=y.device),
                        before[..., :-1]], dim=-1) * both
    k = shared * (same_tok.to(torch.float64) - pi[:, None, :] - pi[None, :, :]
                  + 0.5 * (spi[:, None, :] + spi[None, :, :]))
    gram_s = k.sum(-1)
    gram_x = (adv[:, None, :] * adv[None, :, :] * k).sum(-1)
    rr = reward[:, None] * reward[None, :]
    off = ~torch.eye(G, dtype=torch.bool, device=y.device)
    return gram_x.sum(), (rr * gram_s)[off].sum(), torch.diagonal(gram_x).sum()


def grouped_variance(responses, response_mask, old_log_probs, sum_pi_squared, advantages,
                     rewards, index, alpha: float = 0.05, prefix: str = PREFIX) -> dict:
    r"""The grouped logit-space gradient statistics of one batch (module docstring).

    Args:
        responses: (N, T) sampled token ids. response_mask: (N, T), 1 on response tokens.
        old_log_probs: (N, T) log pi of the sampled tokens. sum_pi_squared: (N, T) sum_v pi_v^2.
        advantages: (N, T) the advantages the loss uses.
        rewards: (N,) sequence rewards R (or (N, T) token rewards, summed).
        index: (N,) prompt ids (verl's ``uid``): responses with one id form a group.
        alpha: 1 - the intervals' level. prefix: the metric names' prefix.

    Returns:
        A dict of floats: ``grad_sq``, ``signal`` (+ ``_lo``/``_hi``), ``noise`` (+ ``_lo``/``_hi``),
        ``noise_to_signal``, ``iid_noise``, ``groups``, ``groups_skipped``, each name prefixed.

    Examples:
        >>> import torch
        >>> from grpo_theory.torch import grouped_variance
        >>> y = torch.tensor([[0], [1], [0], [1]]); one = torch.ones(4, 1)
        >>> pi = torch.tensor([[0.5], [0.5], [0.5], [0.5]])
        >>> r = torch.tensor([1.0, 0.0, 1.0, 0.0]); a = (r - 0.5)[:, None]
        >>> m = grouped_variance(y, one, pi.log(), one * 0.5, a, r, ["p", "p", "q", "q"])
        >>> round(m["grouped_variance/grad_sq"], 4), round(m["grouped_variance/signal"], 4)
        (0.0625, 0.0)
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    y = torch.as_tensor(responses)
    if y.ndim != 2:
        raise ValueError(f"responses must be (N, T) token ids, got shape {tuple(y.shape)}")
    N, T = y.shape
    f64 = dict(dtype=torch.float64, device=y.device)
    named = dict(response_mask=response_mask, old_log_probs=old_log_probs,
                 sum_pi_squared=sum_pi_squared, advantages=advantages)
    t = {}
    for name, v in named.items():
        v = torch.as_tensor(v).detach().to(**f64)
        if tuple(v.shape) != (N, T):
            raise ValueError(f"{name} must have the shape of responses {(N, T)}, got "
                             f"{tuple(v.shape)}")
        t[name] = v
    r = torch.as_tensor(rewards).detach().to(**f64)
    if r.ndim == 2 and tuple(r.shape) == (N, T):
        r = r.sum(-1)
    if tuple(r.shape) != (N,):
        raise ValueError(f"rewards must be (N,) sequence rewards or (N, T) token rewards, N = "
                         f"{N}, got shape {tuple(r.shape)}")
    ids = np.asarray(index, dtype=object)
    if ids.shape != (N,):
        raise ValueError(f"index must have one prompt id per response ({N}), got shape "
                         f"{ids.shape}")
    if N < 2:
        raise ValueError("the metric needs at least 2 responses a batch")
    mask, pi = t["response_mask"], t["old_log_probs"].exp()
    rows: dict = {}
    for i, u in enumerate(ids.tolist()):
        rows.setdefault(u, []).append(i)
    grad_sq, power, d, u_terms, skipped = 0.0, 0.0, [], [], 0
    for members in rows.values():
        sel = torch.as_tensor(members, device=y.device)
        z2, uu, p2 = _group_terms(y[sel], mask[sel], pi[sel], t["sum_pi_squared"][sel],
                                  t["advantages"][sel] * mask[sel], r[sel])
        z2, uu, p2 = float(z2) / N**2, float(uu), float(p2)
        grad_sq += z2
        power += p2 / N
        n = len(members)
        if n < 2:
            skipped += 1
            continue
        u_sig = n**2 * uu / (n * (n - 1)) / N**2
        u_terms.append(u_sig)
        d.append(z2 - u_sig)
    out = {"grad_sq": grad_sq, "iid_noise": (power - grad_sq) / (N - 1),
           "groups": float(len(rows)), "groups_skipped": float(skipped)}
    for name, terms in (("signal", u_terms), ("noise", d)):
        v = np.asarray(terms)
        total = float(v.sum()) if v.size else float("nan")
        half = (student_t.ppf(1 - alpha / 2, v.size - 1)
                * np.sqrt(v.size / (v.size - 1) * np.sum((v - v.mean()) ** 2))
                if v.size > 1 else float("nan"))
        out.update({name: total, f"{name}_lo": total - half, f"{name}_hi": total + half})
    out["noise_to_signal"] = (out["noise"] / out["signal"] if out["signal"] > 0
                              else float("nan"))
    return {prefix + k: float(v) for k, v in out.items()}


def grouped_variance_metrics(data, reward_key: str = "token_level_rewards",
                             alpha: float = 0.05) -> dict:
    """:func:`grouped_variance` of a verl ``DataProto``: a drop-in beside verl's
    ``compute_variance_proxy_metrics(batch, gradient_norm)``.

    Args:
        data: a verl ``DataProto`` after ``compute_advantage``: its ``batch`` holds
            :data:`FIELDS` and ``reward_key``; its ``non_tensor_batch`` the ``uid`` column.
        reward_key: the token rewards (summed per response) the signal is the gradient of.
        alpha: 1 - the intervals' level.

    Returns:
        The ``grouped_variance/*`` metrics (:func:`grouped_variance`).

    Raises:
        ValueError: a field is missing (naming the verl option that provides it), or the batch
            carries ``rollout_is_weights`` (the metric assumes on-policy responses).
    """
    tensors, extra = data.batch, data.non_tensor_batch
    for key in FIELDS + (reward_key,):
        if key not in tensors.keys():
            hint = _HINTS.get(key, f"reward_key={reward_key!r} names no field")
            raise ValueError(f"grouped_variance_metrics: the batch has no field {key!r} ({hint})")
    if "rollout_is_weights" in tensors.keys():
        raise ValueError("grouped_variance_metrics assumes on-policy responses: the batch carries "
                         "rollout_is_weights (switch off algorithm.rollout_correction to use it)")
    if "uid" not in extra:
        raise ValueError("grouped_variance_metrics: the batch's non_tensor_batch has no 'uid' "
                         "(the prompt ids verl's trainer adds before generation)")
    return grouped_variance(tensors["responses"], tensors["response_mask"],
                            tensors["old_log_probs"], tensors["sum_pi_squared"],
                            tensors["advantages"], tensors[reward_key], extra["uid"],
                            alpha=alpha)
