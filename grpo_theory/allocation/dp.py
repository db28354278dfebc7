r"""Exact per-prompt moments of a rule's estimate by dynamic programming over count states.

For binary rewards the rewards of one prompt are iid Bernoulli(V(x)); a rule that reads the
counts ``(n1, n0)`` of correct and incorrect responses sampled so far is a stopping rule on the
lattice walk ``(n1, n0) -> (n1 + 1, n0)`` (probability V) or ``(n1, n0 + 1)`` (1 - V). With
``R_t(n1)`` the probability of reaching ``(n1, t - n1)`` without having stopped,

.. math:: R_0(0) = 1,\qquad R_t(n) = (1 - s_{t-1}(n)) R_{t-1}(n) (1 - V)
          + (1 - s_{t-1}(n - 1)) R_{t-1}(n - 1) V,

and the rule stops at ``(n1, t - n1)`` with probability ``R_t(n1) s_t(n1)`` (``s_t`` is
:meth:`Rule.decide`'s stop mask), keeping ``(m1, m0)`` responses. Given the kept counts the kept
correct (incorrect) responses are iid from ``pi(y|x, Z=1)`` (``pi(y|x, Z=0)``), whose scores have
means ``M1``, ``M0`` and second moments ``q1``, ``q0``: the estimate
``c (a1 sum_{correct} s + a0 sum_{incorrect} s)`` (``a1``, ``a0`` the estimator's advantages on a
group of ``k = m1 + m0`` rewards with ``m1`` ones, ``c`` the normaliser) has

.. math:: E[\hat g | m] = c (a_1 m_1 M_1 + a_0 m_0 M_0),

.. math:: E\|\hat g\|^2 | m = c^2 [a_1^2 (m_1 q_1 + m_1 (m_1 - 1) \|M_1\|^2)
          + a_0^2 (m_0 q_0 + m_0 (m_0 - 1) \|M_0\|^2) + 2 a_1 a_0 m_1 m_0 \langle M_1, M_0\rangle],

so the DP only accumulates seven coefficients per prompt: O(P H^2) work for horizon H, never a
response sequence. This is the binary-reward conditioning of :mod:`grpo_theory.core.exact` with
a random, data-dependent group.
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
from scipy.stats import binom

from ..core import binary_advantages


NORMALISERS = ("group", "token")
"""``"group"``: each prompt's estimate is divided by its own group size k (equal prompt weights,
the per-sequence mean of Algorithm 1); ``"token"``: the batch's sum is divided by the batch's
number of kept responses (TRL's ``loss_type="dapo"`` with one token per response), taken in the
large-batch limit ``sum_b k_b / B -> E[k]`` so each slot's sum is divided by the expected kept
group size (exact for every B when k is constant)."""


class PromptMoments(NamedTuple):
    """One slot's exact per-prompt moments, unconditional on acceptance (arrays over prompts).

    Attributes:
        mean: (P, D_b) block vectors ``E[ghat_x 1{kept}]``.
        second: (P,) ``E[||ghat_x||^2 1{kept}]``.
        accept: (P,) the probability that the group is kept (non-empty).
        kept: (P,) ``E[k 1{kept}]``, the expected number of kept responses.
        rollouts: (P,) the expected responses sampled for the prompt.
    """

    mean: np.ndarray
    second: np.ndarray
    accept: np.ndarray
    kept: np.ndarray
    rollouts: np.ndarray


def check_normaliser(normaliser):
    if normaliser not in NORMALISERS:
        raise ValueError(f"normaliser must be one of {NORMALISERS}, got {normaliser!r}")


def _scale(k, normaliser):
    """c(k): 1/k ("group") or 1 ("token", divided by E[k] later); 0 for an empty group."""
    k = np.asarray(k, np.float64)
    if normaliser == "group":
        return np.where(k > 0, 1.0 / np.where(k > 0, k, 1.0), 0.0)
    return np.where(k > 0, 1.0, 0.0)


def advantage_tables(st, est, max_size: int):
    """``A1[x, k, m1]``, ``A0[x, k, m1]``: advantages of a group of k with m1 correct responses.

    Shapes (P, max_size + 1, max_size + 1) (zero where undefined or ``k <`` the estimator's
    minimum group size); one row when the estimator reads no prompt constant.
    """
    rows = st.n_prompts if est.needs else 1
    H = max_size
    A1 = np.zeros((rows, H + 1, H + 1))
    A0 = np.zeros((rows, H + 1, H + 1))
    for k in range(max(est.min_group_size, 1), H + 1):
        try:
            a1, a0 = _free_table(est, k) if not est.needs else binary_advantages(st, est, k)
        except AttributeError:  # an advantage that reads a prompt constant without declaring it
            a1, a0 = binary_advantages(st, est, k)
        A1[:, k, :k + 1] = np.asarray(a1)[:rows]
        A0[:, k, :k + 1] = np.asarray(a0)[:rows]
    return A1, A0


@lru_cache(maxsize=1024)
def _free_table(est, k):
    """The (1, k + 1) advantage rows of an estimator that reads no prompt constant (cached)."""
    a1, a0 = binary_advantages(SimpleNamespace(n_prompts=1), est, k)
    a1, a0 = np.array(a1[:1]), np.array(a0[:1])
    a1.flags.writeable = a0.flags.writeable = False
    return a1, a0


def conditional_laws(st):
    """``M1, M0`` (P, D_b) and ``q1, q0`` (P,): score means and second moments given Z = 1, 0."""
    p = np.asarray(st.probs)
    mu = np.asarray(st.reward_means)
    ssq = np.asarray(st.sq_norms())
    # clipped: with every reward 1, sum(p mu) can round to 1 + 1e-16, and binom.pmf(., ., v)
    # is NaN outside [0, 1]
    v = np.clip(np.sum(p * mu, axis=1), 0.0, 1.0)
    w1 = p * mu / np.where(v > 0, v, 1.0)[:, None]
    w0 = p * (1 - mu) / np.where(v < 1, 1 - v, 1.0)[:, None]
    M1 = np.asarray(st.project(w1))
    M0 = np.asarray(st.project(w0))
    return v, M1, M0, np.sum(w1 * ssq, axis=1), np.sum(w0 * ssq, axis=1)


def _combine(st, coef):
    """Mean blocks and second moments from the seven accumulated coefficients."""
    a1, a0, b1, b0, g11, g00, g10 = coef
    _, M1, M0, q1, q0 = conditional_laws(st)
    mean = a1[:, None] * M1 + a0[:, None] * M0
    second = (b1 * q1 + b0 * q0 + g11 * np.sum(M1**2, axis=1) + g00 * np.sum(M0**2, axis=1)
              + g10 * np.sum(M1 * M0, axis=1))
    return mean, second


def count_moments(st, rule, est, normaliser: str = "group") -> PromptMoments:
    """Exact per-prompt moments of a rule that reads reward counts (the module's recursion).

    Args:
        st: a score structure (:func:`grpo_theory.core.gram.as_structure`).
        rule: a :class:`~grpo_theory.allocation.rules.Rule`.
        est: an :class:`~grpo_theory.core.estimators.Estimator` (``binary_exact``).
        normaliser: one of :data:`NORMALISERS`.

    Returns:
        :class:`PromptMoments`. ``ValueError`` when the rule keeps a group smaller than the
        estimator allows or does not stop by its horizon.
    """
    check_normaliser(normaliser)
    return _walk(st, est, int(rule.horizon()), rule.decide, rule.name, normaliser)


def _fixed_decide(G):
    def decide(t, n1):
        return np.full((1, t + 1), t == G), n1[None, :], (t - n1)[None, :]
    return decide


def _walk(st, est, H, decide, name, normaliser):
    """The recursion of the module docstring for a horizon H and a stop/keep map ``decide``."""
    P = st.n_prompts
    v = np.clip(np.asarray(st.values(), np.float64), 0.0, 1.0)[:, None]
    A1, A0 = advantage_tables(st, est, H)
    row = np.arange(P)[:, None] if A1.shape[0] > 1 else np.zeros((P, 1), np.int64)
    coef = np.zeros((7, P))
    accept, kept, rollouts = np.zeros(P), np.zeros(P), np.zeros(P)
    reach = np.ones((P, 1))
    for t in range(1, H + 1):
        new = np.zeros((P, t + 1))
        new[:, :t] += reach * (1 - v)
        new[:, 1:] += reach * v
        reach = new
        n1 = np.arange(t + 1)
        stop, m1, m0 = (np.broadcast_to(np.asarray(a), (P, t + 1))
                        for a in decide(t, n1))
        mass = np.where(stop, reach, 0.0)
        k = m1 + m0
        small = (mass > 0) & (k > 0) & (k < est.min_group_size)
        if np.any(small):
            raise ValueError(f"rule {name!r} keeps groups of {int(k[small].min())} responses, "
                             f"fewer than estimator {est.name!r} needs "
                             f"({est.min_group_size})")
        a1 = A1[row, k, m1]
        a0 = A0[row, k, m1]
        c = _scale(k, normaliser)
        coef += np.stack([
            np.sum(mass * c * a1 * m1, axis=1), np.sum(mass * c * a0 * m0, axis=1),
            np.sum(mass * c**2 * a1**2 * m1, axis=1), np.sum(mass * c**2 * a0**2 * m0, axis=1),
            np.sum(mass * c**2 * a1**2 * m1 * (m1 - 1), axis=1),
            np.sum(mass * c**2 * a0**2 * m0 * (m0 - 1), axis=1),
            np.sum(mass * 2 * c**2 * a1 * a0 * m1 * m0, axis=1)])
        accept += np.sum(np.where(k > 0, mass, 0.0), axis=1)
        kept += np.sum(mass * k, axis=1)
        rollouts += t * np.sum(mass, axis=1)
        reach = np.where(stop, 0.0, reach)
    if np.max(np.sum(reach, axis=1)) > 1e-12:
        raise ValueError(f"rule {name!r} did not stop by its horizon {H}")
    mean, second = _combine(st, coef)
    return PromptMoments(mean, second, accept, kept, rollouts)


def answer_agreement_moments(st, rule, est, normaliser: str = "group") -> PromptMoments:
    r"""Exact per-prompt moments of C-GRPO's stopping on answer agreement with ``qhat = 1``.

    The count state is the multiset of answers; with ``qhat = 1`` the only states that matter are
    "the first t responses are all answer y" and "they disagree", and a disagreeing prefix never
    agrees later, so the rule stops at ``g_1 = grid[0]`` on ``E_y = {first g_1 responses all y}``
    (probability ``pi_y^{g_1}``) and at ``L = grid[-1]`` otherwise:

    .. math:: E[\hat g] = \sum_y \pi_y^{g_1} E[\hat g_{g_1} | E_y]
              + E[\hat g_L] - \sum_y \pi_y^{g_1} E[\hat g_L | E_y],

    and the same for ``||ghat||^2``. Given ``E_y`` the first ``g_1`` rewards are iid
    Bernoulli(mu_y) with score ``s_y``; the other ``L - g_1`` responses are iid from pi, and the
    estimate's conditional moments follow from the ones of :func:`count_moments`.

    Args:
        st: a score structure; rule: a ``ConformalStopping`` rule; est: an estimator;
        normaliser: one of :data:`NORMALISERS`.

    Returns:
        :class:`PromptMoments`.
    """
    check_normaliser(normaliser)
    g1, L = int(rule.grid[0]), int(rule.grid[-1])
    for k in (g1, L):
        if k < est.min_group_size:
            raise ValueError(f"rule {rule.name!r} keeps groups of {k} responses, fewer than "
                             f"estimator {est.name!r} needs ({est.min_group_size})")
    P, K = st.n_prompts, st.n_responses
    pi = np.asarray(st.probs, np.float64)
    mu = np.clip(np.asarray(st.reward_means, np.float64), 0.0, 1.0)
    ssq = np.asarray(st.sq_norms())
    S = np.stack([np.asarray(st.project(np.broadcast_to(np.eye(K)[y], (P, K))))
                  for y in range(K)], axis=1)  # (P, K, D_b): s_y as block vectors
    v, M1, M0, q1, q0 = conditional_laws(st)
    A1, A0 = advantage_tables(st, est, L)
    row = np.arange(P)[:, None, None, None] if A1.shape[0] > 1 else 0
    py = pi**g1  # (P, K)
    # part A: stopped at g1 with all answers y
    j = np.arange(g1 + 1)
    pj = binom.pmf(j[None, None, :], g1, mu[:, :, None])  # (P, K, g1+1)
    rA = A1.shape[0]
    sumA = j * A1[:, g1, :g1 + 1] + (g1 - j) * A0[:, g1, :g1 + 1]  # (rows, g1+1)
    sumA = np.broadcast_to(sumA[:, None, :], (P if rA > 1 else 1, 1, g1 + 1))
    cA = _scale(g1, normaliser)
    EA = np.sum(pj * sumA, axis=2)
    EA2 = np.sum(pj * sumA**2, axis=2)
    mean = cA * np.einsum("pk,pkd->pd", py * EA, S)
    second = cA**2 * np.sum(py * EA2 * ssq, axis=1)
    # the full group of L
    mf = _walk(st, est, L, _fixed_decide(L), rule.name, normaliser)
    mean = mean + mf.mean
    second = second + mf.second
    # part B: the group of L on E_y
    r = L - g1
    kk = np.arange(r + 1)
    pk = binom.pmf(kk[None, :], r, v[:, None])[:, None, None, :]  # (P, 1, 1, r+1)
    pjj = pj[:, :, :, None]  # (P, K, g1+1, 1)
    tot = j[:, None] + kk[None, :]  # (g1+1, r+1)
    a1 = A1[row, L, tot] if rA > 1 else A1[0, L, tot][None, None]
    a0 = A0[row, L, tot] if rA > 1 else A0[0, L, tot][None, None]
    jj = j[:, None].astype(np.float64)
    alpha = a1 * jj + a0 * (g1 - jj)
    pp = pjj * pk  # (P, K, g1+1, r+1)
    cL = _scale(L, normaliser)
    c_s = np.sum(pp * alpha, axis=(2, 3))
    c_1 = np.sum(pp * a1 * kk, axis=(2, 3))
    c_0 = np.sum(pp * a0 * (r - kk), axis=(2, 3))
    meanB = cL * (c_s[:, :, None] * S + c_1[:, :, None] * M1[:, None, :]
                  + c_0[:, :, None] * M0[:, None, :])  # (P, K, D_b)
    sM1 = np.einsum("pkd,pd->pk", S, M1)
    sM0 = np.einsum("pkd,pd->pk", S, M0)
    m11 = np.sum(M1**2, axis=1)[:, None, None, None]
    m00 = np.sum(M0**2, axis=1)[:, None, None, None]
    m10 = np.sum(M1 * M0, axis=1)[:, None, None, None]
    q1b, q0b = q1[:, None, None, None], q0[:, None, None, None]
    terms = (alpha**2 * ssq[:, :, None, None]
             + 2 * alpha * a1 * kk * sM1[:, :, None, None]
             + 2 * alpha * a0 * (r - kk) * sM0[:, :, None, None]
             + a1**2 * (kk * q1b + kk * (kk - 1) * m11)
             + a0**2 * ((r - kk) * q0b + (r - kk) * (r - kk - 1) * m00)
             + 2 * a1 * a0 * kk * (r - kk) * m10)
    secondB = cL**2 * np.sum(pp * terms, axis=(2, 3))  # (P, K)
    mean = mean - np.einsum("pk,pkd->pd", py, meanB)
    second = second - np.sum(py * secondB, axis=1)
    stop_early = np.sum(py, axis=1)
    rollouts = g1 * stop_early + L * (1 - stop_early)
    return PromptMoments(mean, second, np.ones(P), rollouts, rollouts)
