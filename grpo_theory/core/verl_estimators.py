r"""verl 0.9.1's advantage estimators (``verl/trainer/ppo/core_algos.py``) as package estimators.

verl registers its estimators with ``register_adv_est(name)``; each maps token rewards
``(bs, T)``, a response mask and the prompt ids ``index`` to token advantages. With an outcome
reward (one scalar ``Z`` on a response's last valid token) every one of them but GAE gives each
response one advantage repeated on its valid tokens, which is what a package estimator returns.
Each verl name maps to a package estimator (an older preset where verl's function is the same):

==================================  ======================================================
verl name                           package estimator
==================================  ======================================================
``grpo``                            ``grpo_std_verl`` (``grpo_mean`` without std)
``grpo_vectorized``                 ``grpo_std_verl`` (0.9.1: two-pass moments, no floor;
                                    v0.7's form is ``grpo_vectorized_verl``)
``rloo``, ``rloo_vectorized``       ``rloo``
``reinforce_plus_plus_baseline``    ``reinforce_plus_plus_baseline_verl_tokens`` (needs
                                    ``length``; ``reinforce_plus_plus_baseline_verl``
                                    at one token per response)
``grpo_passk``                      ``grpo_passk_verl`` (``grpo_passk_verl_noscale``
                                    without std)
``opo``                             ``opo_verl`` (needs ``length``)
``reinforce_plus_plus``             ``reinforce_plus_plus_verl`` (needs ``length``; gamma 1)
``remax``                           ``remax_verl`` (needs ``greedy_reward``)
``gpg``                             ``gpg_verl``
``gdpo``                            ``gdpo_verl`` (one channel), :func:`gdpo` (``channels``)
``optimal_token_baseline``,         ``optimal_token_baseline_verl`` (needs ``score_sq``;
``tir_optimal_token_baseline``      one-token responses)
==================================  ======================================================

What reaches an estimator besides the rewards comes in the :class:`PromptContext` fields its
``needs`` declare: ``length`` (each response's token count, ``response_mask.sum(-1)``, shape
``z.shape``), ``greedy_reward`` (ReMax's ``reward_baselines``: the reward of the prompt's greedy
response, shape ``z.shape[:-1]``), ``channels`` (GDPO's reward components, ``z.shape + (K,)``)
and ``score_sq`` (the optimal token baseline's weight ``1 - 2 pi + sum pi^2``). verl's whitening
(``masked_whiten``) runs over tokens, so those estimators weight each response by its length.
``tests/verl/test_verl_transcriptions.py`` checks every one against the installed verl.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._precision import float64
from .estimators import (Estimator, PromptContext, batch_axes, constant_group, centred,
                         register)

_OTB_EPS = 1e-8  # verl's epsilon of compute_optimal_token_baseline_advantage


def _response_field(ctx: PromptContext, field_name: str, est: str, z):
    """A per-response context field, checked to have the rewards' shape."""
    val = getattr(ctx, field_name)
    if val is None:
        raise ValueError(f"estimator {est!r} needs PromptContext.{field_name}")
    val = jnp.asarray(val).astype(z.dtype)
    if val.shape != z.shape:
        raise ValueError(f"estimator {est!r}: PromptContext.{field_name} must have the rewards' "
                         f"shape {tuple(z.shape)}, got {tuple(val.shape)}")
    return val


def _group_std(z, ddof=1):
    return jnp.std(z, axis=-1, ddof=ddof, keepdims=True)


def whiten_tokens(c, length):
    r"""verl's ``masked_whiten`` of advantages ``c`` repeated on ``length`` tokens each.

    With ``N = sum L`` tokens in the batch (the last two axes):

    .. math:: m = \frac{\sum L c}{N + 10^{-8}},\quad
              v = \frac{\sum L (c - m)^2}{N + 10^{-8}} \frac{N}{N - 1},\quad
              A = \frac{c - m}{\sqrt{v + 10^{-8}}}.

    Args:
        c: per-response values, ``(..., B, G)`` (a 1-d array is one group).
        length: token counts ``L >= 1`` of the same shape.

    Returns:
        The whitened values, shape of ``c``.
    """
    ax = batch_axes(c)
    n = jnp.sum(length, axis=ax, keepdims=True)
    m = jnp.sum(length * c, axis=ax, keepdims=True) / (n + 1e-8)
    v = jnp.sum(length * (c - m) ** 2, axis=ax, keepdims=True) / (n + 1e-8) * (n / (n - 1))
    return (c - m) * jax.lax.rsqrt(v + 1e-8)


def _grpo_verl(z, scale=True):
    """verl's loop GRPO (``compute_grpo_outcome_advantage``): ``(Z - mean) / (std + 1e-6)``."""
    num = centred(z, None)
    if not scale:
        return num
    return num / (_group_std(z) + 1e-6)


@float64
def grpo_passk(scale: bool = True, eps: float = 1e-6, name=None) -> Estimator:
    r"""verl 0.9.1 ``grpo_passk`` (``compute_grpo_passk_outcome_advantage``, Pass@k training).

    Only a group's best response gets an advantage, the margin over the runner-up:

    .. math:: A_g = [g = \arg\max Z]\,(Z_{(1)} - Z_{(2)}) / (\mathrm{std}_1(Z) + \epsilon)

    (no division when ``scale`` is false, verl's ``norm_adv_by_std_in_grpo=False``). Ties for the
    maximum give every response 0. It estimates the gradient of the group's best reward (the
    pass@k surrogate), not of the mean reward: biased for the latter.

    Args:
        scale: divide by the group std (ddof 1) plus ``eps``.
        eps: verl's ``epsilon`` (1e-6).
        name: registry name.

    Returns:
        An :class:`Estimator` (``min_group_size`` 2).

    Examples:
        >>> import jax.numpy as jnp
        >>> from grpo_theory.core import get_estimator
        >>> get_estimator("grpo_passk_verl_noscale")(jnp.array([0.0, 1.0, 0.5])).tolist()
        [0.0, 0.5, 0.0]
        >>> get_estimator("grpo_passk_verl_noscale")(jnp.array([1.0, 1.0, 0.5])).tolist()
        [0.0, 0.0, 0.0]
    """
    if not (eps >= 0.0 and jnp.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")

    def adv(z, ctx):
        top2 = jax.lax.top_k(z, 2)[0]
        margin = top2[..., :1] - top2[..., 1:2]
        if scale:
            margin = margin / (_group_std(z) + eps)
        best = (z == top2[..., :1]) & (margin != 0.0)
        return jnp.where(best, margin, 0.0)

    if name is None:
        name = f"grpo_passk(eps={eps:g}{'' if scale else ',noscale'})"
    return Estimator(name, adv, min_group_size=2, params=dict(scale=scale, eps=eps))


def _opo(z, ctx):
    r"""verl 0.9.1 ``opo`` (``compute_opo_outcome_advantage``): the length-weighted group mean
    ``A_g = Z_g - sum_k L_k Z_k / sum_k L_k`` as baseline. The baseline contains the response's
    own reward: biased (unbiased only in the limit of many responses)."""
    length = _response_field(ctx, "length", "opo_verl", z)
    base = jnp.sum(length * z, axis=-1, keepdims=True) / jnp.sum(length, axis=-1, keepdims=True)
    return jnp.where(constant_group(z), 0.0, z - base)


def _reinforce_plus_plus(z, ctx):
    r"""verl 0.9.1 ``reinforce_plus_plus`` (``compute_reinforce_plus_plus_outcome_advantage``)
    at its default ``gamma = 1``: the return ``Z`` on every valid token, whitened over the
    batch's tokens (:func:`whiten_tokens`); no group baseline. The batch mean contains the
    response's own reward and the std rescales: biased. With ``gamma < 1`` verl's advantage
    varies along the response (not transcribed)."""
    return whiten_tokens(z, _response_field(ctx, "length", "reinforce_plus_plus_verl", z))


def _reinforce_plus_plus_baseline_tokens(z, ctx):
    r"""verl 0.9.1 ``reinforce_plus_plus_baseline``
    (``compute_reinforce_plus_plus_baseline_outcome_advantage``) at any response lengths:
    group-mean centring, then :func:`whiten_tokens`. Biased (self-inclusive mean, batch std)."""
    length = _response_field(ctx, "length", "reinforce_plus_plus_baseline_verl_tokens", z)
    return whiten_tokens(centred(z, ctx), length)


def _remax(z, ctx):
    r"""verl 0.9.1 ``remax`` (``compute_remax_outcome_advantage``): ``A = Z - Z_greedy(x)``, the
    reward of the prompt's greedy response (verl's ``reward_baselines``) as baseline. Unbiased:
    the greedy response does not depend on the sampled group."""
    base = ctx.greedy_reward
    if base is None:
        raise ValueError("estimator 'remax_verl' needs PromptContext.greedy_reward")
    base = jnp.asarray(base).astype(z.dtype)
    if base.shape != z.shape[:-1]:
        raise ValueError(f"estimator 'remax_verl': PromptContext.greedy_reward must have shape "
                         f"{tuple(z.shape[:-1])} (one per group), got {tuple(base.shape)}")
    return z - base[..., None]


def _gpg(z, ctx):
    r"""verl 0.9.1 ``gpg`` (``compute_gpg_outcome_advantage``, f_norm = 1): the group-mean
    advantage times ``alpha = BG / max(#{Z != 0}, 1)``, counted over the whole batch. Biased
    (self-inclusive mean; alpha reads the rewards)."""
    ax = batch_axes(z)
    n = 1
    for a in ax:
        n *= z.shape[a]
    nonzero = jnp.sum(z != 0.0, axis=ax, keepdims=True)
    return n / jnp.maximum(nonzero, 1).astype(z.dtype) * centred(z, ctx)


@float64
def gdpo(weights=None, scale: bool = True, name=None) -> Estimator:
    r"""verl 0.9.1 ``gdpo`` (``compute_gdpo_outcome_advantage``): each reward channel
    normalised by its own group (verl's loop GRPO), summed with weights, then whitened over
    the batch's tokens:

    .. math:: A = \mathrm{whiten}_L\Big(\sum_k w_k \frac{Z_k - \bar Z_k}{\mathrm{std}_1(Z_k)
              + 10^{-6}}\Big).

    ``weights=None`` is verl without ``gdpo_reward_keys``: one channel, the reward ``Z`` itself
    (the registered ``gdpo_verl``). With ``weights`` (verl's ``gdpo_reward_weights``, one per
    channel) the channels come in ``PromptContext.channels`` (``z.shape + (K,)``, verl's
    ``non_tensor_batch[key]`` for each of ``gdpo_reward_keys``) and ``z`` only gives the shape.
    Biased (std normalisation, batch whitening).

    Args:
        weights: ``None`` (one channel) or K finite channel weights.
        scale: divide each channel by its group std (verl's default).
        name: registry name.

    Returns:
        A batch-coupled :class:`Estimator` needing ``length`` (and ``channels`` with weights).
    """
    if weights is not None:
        w = jnp.asarray(weights, dtype=jnp.float64)
        if w.ndim != 1 or w.size == 0 or not bool(jnp.all(jnp.isfinite(w))):
            raise ValueError(f"weights must be None or a non-empty 1-d list of finite numbers, "
                             f"got {weights!r}")
    label = name or ("gdpo_verl" if weights is None else "gdpo")

    def adv(z, ctx):
        length = _response_field(ctx, "length", label, z)
        if weights is None:
            total = _grpo_verl(z, scale)
        else:
            ch = ctx.channels
            if ch is None:
                raise ValueError(f"estimator {label!r} needs PromptContext.channels")
            ch = jnp.asarray(ch).astype(z.dtype)
            if ch.shape != (*z.shape, w.size):
                raise ValueError(f"estimator {label!r}: PromptContext.channels must have shape "
                                 f"{(*z.shape, int(w.size))}, got {tuple(ch.shape)}")
            parts = [_grpo_verl(ch[..., k], scale) for k in range(w.size)]
            total = sum(w[k].astype(z.dtype) * parts[k] for k in range(w.size))
        return whiten_tokens(total, length)

    needs = ("length",) if weights is None else ("length", "channels")
    return Estimator(label, adv, min_group_size=2, binary_exact=False, batch_coupled=True,
                     needs=needs, params=dict(weights=None if weights is None else w,
                                              scale=scale))


def _optimal_token_baseline(z, ctx):
    r"""verl 0.9.1 ``optimal_token_baseline`` (``compute_optimal_token_baseline_advantage``;
    ``tir_optimal_token_baseline``, ``compute_multi_turn_optimal_token_baseline_advantage``, is
    the same on one-token responses) on one-token responses:

    .. math:: A_g = Z_g - \frac{\sum_k W_k Z_k}{\sum_k W_k + 10^{-8}},\quad
              W = 1 - 2\pi(y) + \sum_v \pi(v)^2 = \|e_y - \pi\|^2,

    the squared score norm of a softmax over logits (``score_sq`` of a tabular softmax policy).
    It is ``norm_weighted`` (:mod:`grpo_theory.core.baselines`) but for verl's ``+ 1e-8``, which
    keeps ``A = Z`` where every weight is 0 (``norm_weighted`` then centres on the mean).
    The weighted baseline contains the response's own reward: biased. On longer responses verl's
    baseline varies token by token (cumulative weights), which one advantage per response does
    not transcribe."""
    w = _response_field(ctx, "score_sq", "optimal_token_baseline_verl", z)
    base = jnp.sum(w * z, axis=-1, keepdims=True) / (jnp.sum(w, axis=-1, keepdims=True)
                                                      + _OTB_EPS)
    return z - base


register(grpo_passk(True, name="grpo_passk_verl"))
register(grpo_passk(False, name="grpo_passk_verl_noscale"))
# the papers' names for the same advantages: OPO (arXiv 2505.23585) is verl's ``opo``, the
# Optimal Token Baseline (arXiv 2602.07078) its ``optimal_token_baseline``, GDPO (arXiv
# 2601.05242) its ``gdpo``
register(Estimator("opo_verl", _opo, min_group_size=2, binary_exact=False, needs=("length",)),
         "opo")
register(Estimator("reinforce_plus_plus_verl", _reinforce_plus_plus, binary_exact=False,
                   batch_coupled=True, needs=("length",)))
register(Estimator("reinforce_plus_plus_baseline_verl_tokens",
                   _reinforce_plus_plus_baseline_tokens, min_group_size=2, binary_exact=False,
                   batch_coupled=True, needs=("length",)))
register(Estimator("remax_verl", _remax, binary_exact=False, needs=("greedy_reward",)))
register(Estimator("gpg_verl", _gpg, min_group_size=2, batch_coupled=True))
register(gdpo(None, name="gdpo_verl"), "gdpo")
register(Estimator("optimal_token_baseline_verl", _optimal_token_baseline, min_group_size=2,
                   needs=("score_sq",)), "otb")
