r"""The exact moments of a pooled baseline at any batch size, and its fixed-budget group size.

A pooled estimator (an :class:`~grpo_theory.core.estimators.Estimator` with a
:class:`~grpo_theory.core.estimators.PooledForm`, e.g. ``jspo``) reads the other groups of its
batch only through ``T = sum_{y != x} t(z_y)``. With B prompts drawn iid (the package's default
design) and binary rewards, a slot is its prompt and its count k of correct responses, and the
slots are iid, so by exchangeability

.. math::

    E||\hat g||^2 = \tfrac1B E||\hat g_1||^2 + (1 - \tfrac1B) E[\hat g_1 \cdot \hat g_2],

with ``ghat_b = (1/G) sum_i A_bi s_bi``. Given the slots, ``E[ghat_b | slots] = alpha_b m1(x_b) +
beta_b m0(x_b)`` (``alpha = k a1 / G``, ``beta = (G - k) a0 / G``; ``a1``, ``a0`` the advantages of
a correct and an incorrect response; ``m1``, ``m0`` the mean scores given the reward) and the
conditional covariance of one slot is ``(k a1^2 tr Cov(s|x,1) + (G - k) a0^2 tr Cov(s|x,0))/G^2``.
The first term needs the law of T over B - 1 other slots, the second its law over B - 2 slots
with each of the two slots' statistics added: a dynamic programme over the values T takes
(for JSPO, T is a function of ``sum k`` and ``sum k^2``: ``O(B^2 G^3)`` values at most), never
the ``C(P(G+1) + B - 1, B)`` batch states of the counts route of
:mod:`~grpo_theory.core.batch_exact`, which it equals on small cases.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy.stats import binom

#: values of T closer than this are one state (their float sums differ only by rounding)
_DECIMALS = 10
#: advantage evaluations (states x counts x G) per compiled call
_CHUNK = 4_000_000


def conditional_moments(problem):
    """Per prompt: V, the mean scores m1, m0 (P, D) and ``tr Cov(s | x, Z)`` c1, c0 (P,)."""
    p = np.asarray(problem.probs, np.float64)
    mu = np.asarray(problem.reward_means, np.float64)
    S = np.asarray(problem.scores, np.float64)
    sq = np.sum(S**2, axis=-1)
    out = []
    for w in (p * mu, p * (1 - mu)):
        tot = w.sum(axis=1, keepdims=True)
        w = np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)
        m = np.einsum("pk,pkd->pd", w, S)
        out += [m, np.sum(w * sq, axis=1) - np.sum(m**2, axis=1)]
    return np.sum(p * mu, axis=1), out[0], out[2], out[1], out[3]


def _convolve(values, prob, stat, q):
    """Add one iid slot (statistics ``stat`` (K, d) with probabilities ``q`` (K,)) to the law
    ``(values (S, d), prob (S,))`` of T: the new law and each (old state, k)'s new index."""
    S, K, d = len(values), len(q), values.shape[1]
    new = (values[:, None, :] + stat[None]).reshape(S * K, d)
    _, first, inv = np.unique(np.round(new, _DECIMALS), axis=0, return_index=True,
                              return_inverse=True)
    inv = inv.reshape(-1)
    p = np.bincount(inv, weights=(prob[:, None] * q[None, :]).reshape(-1), minlength=len(first))
    return new[first], p, inv.reshape(S, K)


@functools.lru_cache(maxsize=64)
def _compiled(form):
    """One compiled ``advantage`` per pooled form (``n_others`` static)."""

    def table(zc, values, n_others):
        K, G = zc.shape
        z = jnp.broadcast_to(zc[:, None, :], (K, values.shape[0], G))
        adv = form.advantage(z, jnp.broadcast_to(values[None], (K,) + values.shape), n_others)
        return adv[..., 0], adv[..., -1]

    return jax.jit(table, static_argnums=2)


def _advantage_tables(form, zc, values, n_others):
    """``a1, a0`` (K, S): the advantage of a correct / incorrect response of a group with k
    correct (row k) when the others' statistics sum to ``values[s]``. Chunks are padded to a
    power of two, so a sweep compiles a few shapes only."""
    K, G = zc.shape
    fn = _compiled(form)
    S = len(values)
    step = max(1, _CHUNK // (K * G))
    step = min(step, 1 << max(0, (S - 1).bit_length()))
    a1, a0 = np.zeros((K, S)), np.zeros((K, S))
    for lo in range(0, S, step):
        part = values[lo:lo + step]
        n = len(part)
        pad = np.concatenate([part, np.repeat(part[-1:], step - n, axis=0)]) if n < step else part
        r1, r0 = fn(jnp.asarray(zc), jnp.asarray(pad), n_others)
        a1[:, lo:lo + n] = np.asarray(r1)[:, :n]
        a0[:, lo:lo + n] = np.asarray(r0)[:, :n]
    k = np.arange(K)[:, None]
    return np.where(k > 0, a1, 0.0), np.where(k < G, a0, 0.0)


def pooled_route(problem, est, group_size: int, batch_size: int, max_states: int):
    """``(prompt_means (P, D), E||ghat||^2, power, states)`` of a pooled estimator, prompts iid.

    Args:
        problem: a :class:`~grpo_theory.core.problem.DiscreteProblem` (binary rewards).
        est: an :class:`~grpo_theory.core.estimators.Estimator` with a ``pooled`` form.
        group_size, batch_size: G and B. max_states: refuse more states of the other groups.

    Returns:
        The tuple above; ``power`` is ``E[(1/BG) sum A^2 ||s||^2]`` (as in
        :func:`~grpo_theory.core.batch_moments`), ``states`` the states summed over.
    """
    G, B = int(group_size), int(batch_size)
    form = est.pooled
    f = np.asarray(problem.prompt_probs, np.float64)
    Vx, m1, m0, c1, c0 = conditional_moments(problem)
    q1, q0 = c1 + np.sum(m1**2, axis=1), c0 + np.sum(m0**2, axis=1)
    k = np.arange(G + 1)
    w = f[:, None] * binom.pmf(k[None, :], G, Vx[:, None])  # (P, K): P(x, k)
    q = w.sum(axis=0)
    zc = (np.arange(G)[None, :] < k[:, None]).astype(np.float64)  # (K, G): k correct first
    stat = np.asarray(form.statistic(jnp.asarray(zc)), np.float64)
    values, prob = np.zeros((1, stat.shape[1])), np.ones(1)
    before, inv = (values, prob), None
    n_states = 1
    for _ in range(B - 1):
        before = (values, prob)
        values, prob, inv = _convolve(values, prob, stat, q)
        n_states += len(values)
        if len(values) > max_states:
            raise ValueError(f"the exact pooled route has {len(values)} states of the other groups "
                             f"> max_states={max_states}; use a smaller batch_size or "
                             "group_size, raise max_states, or use mc_mse")
    a1, a0 = _advantage_tables(form, zc, values, B - 1)
    alpha, beta = k[:, None] * a1 / G, (G - k)[:, None] * a0 / G  # (K, S)
    Ea, Eb = alpha @ prob, beta @ prob
    prompt_means = (w @ Ea)[:, None] * m1 + (w @ Eb)[:, None] * m0
    Eaa, Eab, Ebb = (alpha**2) @ prob, (alpha * beta) @ prob, (beta**2) @ prob
    Ea1, Ea0 = (a1**2) @ prob, (a0**2) @ prob
    mm = np.sum(m1**2, 1), np.sum(m1 * m0, 1), np.sum(m0**2, 1)
    own = np.sum(w * (Eaa[None] * mm[0][:, None] + 2 * Eab[None] * mm[1][:, None]
                      + Ebb[None] * mm[2][:, None]
                      + (k[None] * Ea1[None] * c1[:, None]
                         + (G - k)[None] * Ea0[None] * c0[:, None]) / G**2))
    power = float(np.sum(w * (k[None] * Ea1[None] * q1[:, None]
                              + (G - k)[None] * Ea0[None] * q0[:, None]))) / G
    cross = 0.0
    if B >= 2:
        p0 = before[1]  # the law of T over B - 2 slots; inv maps (its state, k) to T's states
        mu1, mu0 = w.T @ m1, w.T @ m0  # (K, D): E[1{k} m_Z(x)] over x
        gram = {("a", "a"): mu1 @ mu1.T, ("a", "b"): mu1 @ mu0.T,
                ("b", "a"): mu0 @ mu1.T, ("b", "b"): mu0 @ mu0.T}
        tab = {"a": alpha, "b": beta}
        for k1 in range(G + 1):
            other = inv[:, k1]  # slot 2 sees slot 1's k1 among its others
            for u in "ab":
                first = tab[u][k1][inv]  # (S0, K): slot 1 with slot 2's k2 among its others
                for v in "ab":
                    second = tab[v][:, other]  # (K, S0)
                    e = np.einsum("s,sk,ks->k", p0, first, second)
                    cross += float(e @ gram[(u, v)][k1])
    second_moment = own / B + (1 - 1 / B) * cross
    return prompt_means, float(second_moment), power, int(n_states)
