r"""Exact gradients, exact expectations and exact MSE by enumeration and closed forms.

Three independent routes to the same numbers, so each checks the others:

1. **Closed forms** (:mod:`grpo_theory.ustat`): prompt-only baselines (vanilla, oracle, b*(x),
   user b(x)), leave-one-out GRPO (U-statistic variance) and the self-inclusive mean.
2. **Binary-reward conditioning**: rewards are Bernoulli, so a group is described by the number
   k ~ Binomial(G, V(x)) of correct responses. Given k, correct responses are iid from
   ``pi(y|x, Z=1) ∝ pi(y|x) mu(x,y)`` and incorrect ones from ``∝ pi(y|x)(1 - mu(x,y))``, and any
   permutation-equivariant advantage takes one value ``a1(k)`` on correct and ``a0(k)`` on
   incorrect responses. Then ``E[ghat | k]`` and ``E[||ghat||^2 | k]`` have closed forms in the
   conditional score moments: the exact MSE of *every* registry estimator, ``grpo_std`` included.
3. **Brute-force enumeration** of every outcome of a minibatch (prompts, responses, rewards):
   used to test routes 1 and 2 as equalities on small problems.
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .closed_forms import closed_form_of
from .estimators import PromptContext, batch_context, compiled_advantage, get_estimator
from .gram import as_structure
from .problem import as_problem
from .ustat import minibatch_from_moments, exact_mse_closed_form, prompt_mean_and_variance
from .._precision import float64


#: bytes per entry of the binary route's advantage table, counting JAX temporaries
_ADV_BYTES = 8 * 6


@float64
def exact_gradient(bandit):
    """grad J(theta) = E_X E[s Z | X] (the main paper, Algorithm 1's target), exactly.

    Args:
        bandit: a policy (result shaped like its parameters, e.g. (P, K) for a SoftmaxBandit),
            a :class:`DiscreteProblem` or a score structure (flat (D,)).

    Returns:
        The gradient.
    """
    st = as_structure(bandit)
    g = st.gradient()
    return g.reshape(st.param_shape) if st.param_shape is not None else g


def _closed_form_route(est, method: str) -> bool:
    """True for the closed form, False for binary conditioning; ValueError if neither applies."""
    if method not in ("auto", "closed_form", "binary"):
        raise ValueError(f"method must be 'auto', 'closed_form' or 'binary', got {method!r}")
    _check_coupled(est)
    if method != "binary" and est.closed_form is not None:
        return True
    if method == "closed_form":
        closed_form_of(est, "closed-form MSE", "use method='binary'")
    if not est.rewards_only:
        raise ValueError(
            f"estimator {est.name!r} has no exact MSE (its advantages are not a function of the "
            "group's rewards alone); use mc_mse for a Monte Carlo estimate"
        )
    return False


def _check_coupled(est):
    if est.batch_coupled:
        raise ValueError(
            f"estimator {est.name!r} has no exact MSE: its advantages couple the prompts of a "
            "batch (normalised over the whole batch); use mc_mse for a Monte Carlo estimate"
        )




def binary_advantages(st, est, group_size: int):
    """a1[x, k], a0[x, k] for k = 0..G correct responses (undefined entries are 0).

    Estimators that read no prompt constant (``needs`` empty) are evaluated once on a (G+1, G)
    table and broadcast; the others on a (P, G+1, G) table. A table that would not fit is refused
    (``ValueError`` naming its size) before anything is allocated.
    """
    G = group_size
    _check_table(st, est, G)  # before the (G+1, G) groups are formed
    k = np.arange(G + 1)
    z1 = (np.arange(G)[None, :] < k[:, None]).astype(np.float64)  # (G+1, G): k ones first
    adv = _advantage_table(st, est, z1)
    a1 = np.where(k[None, :] > 0, adv[:, :, 0], 0.0)
    a0 = np.where(k[None, :] < G, adv[:, :, -1], 0.0)
    return a1, a0


def binary_advantages_hold(st, est, group_size: int, tables=None, rtol: float = 1e-9) -> bool:
    """Whether the estimator's advantages on binary groups are its tables' entries in any order.

    :func:`binary_advantages` reads each group's advantages with its correct responses first; the
    routes built on the tables assume every response's advantage is a function of its own reward
    and the group's count alone. This evaluates the estimator on the same G + 1 groups with the
    responses in a fixed shuffled order and checks each advantage against ``a1[x, k]`` or
    ``a0[x, k]`` (relative ``rtol`` of the table's largest entry).

    Args:
        st: the problem (or structure) with ``n_prompts``, ``values()``, ``optimal_baselines()``.
        est: the :class:`~grpo_theory.core.estimators.Estimator`.
        group_size: G.
        tables: ``(a1, a0)`` already formed, or None to form them.
        rtol: the tolerance.

    Returns:
        True where every shuffled advantage matches.
    """
    G = group_size
    _check_table(st, est, G)
    a1, a0 = binary_advantages(st, est, G) if tables is None else map(np.asarray, tables)
    k = np.arange(G + 1)
    z1 = (np.arange(G)[None, :] < k[:, None]).astype(np.float64)
    shuffled = np.random.default_rng(0).permuted(z1, axis=1)
    adv = _advantage_table(st, est, shuffled)
    want = np.where(shuffled[None] > 0, a1[:, :, None], a0[:, :, None])
    scale = max(float(np.max(np.abs(a1), initial=0.0)), float(np.max(np.abs(a0), initial=0.0)))
    return bool(np.all(np.abs(adv - want) <= rtol * max(scale, 1e-300)))


_TABLE_ALTERNATIVE = "use method='closed_form' where the estimator has one, a smaller G, or mc_mse"


def _check_table(st, est, G):
    """Refuse an advantage table that would not fit (``ValueError`` naming its size)."""
    P = st.n_prompts
    V.check_memory(f"the binary route's ({G + 1}, {G}) advantage table (G={G})",
                   _ADV_BYTES * (G + 1) * G, _TABLE_ALTERNATIVE)
    if est.needs:
        V.check_memory(f"the binary route's ({P}, {G + 1}, {G}) advantage table (P={P}, G={G})",
                       _ADV_BYTES * P * (G + 1) * G, _TABLE_ALTERNATIVE)


def _advantage_table(st, est, z1):
    """The estimator's advantages ``(P, G+1, G)`` on the binary groups ``z1 (G+1, G)``."""
    G, P = z1.shape[1], st.n_prompts
    alternative = _TABLE_ALTERNATIVE
    if not est.needs:
        try:
            return np.broadcast_to(
                np.asarray(compiled_advantage(est)(jnp.asarray(z1), PromptContext())),
                (P, G + 1, G))
        except Exception:  # an advantage that reads a prompt constant without declaring it
            pass
    V.check_memory(f"the binary route's ({P}, {G + 1}, {G}) advantage table (P={P}, G={G})",
                   _ADV_BYTES * P * (G + 1) * G, alternative)
    z = jnp.broadcast_to(jnp.asarray(z1), (P, G + 1, G))
    xs = jnp.broadcast_to(jnp.arange(P)[:, None], (P, G + 1))
    ctx = PromptContext(
        prompt=xs,
        value=jnp.broadcast_to(st.values()[:, None], (P, G + 1)),
        optimal_baseline=jnp.broadcast_to(st.optimal_baselines()[:, None], (P, G + 1)),
    )
    return np.asarray(compiled_advantage(est)(z, ctx))  # (P, G+1, G)


def _binary_blocks(st, est, group_size: int):
    """Per-prompt mean (block vectors (P, D_b)) and trace variance (P,) by binary conditioning.

    Given k ~ Binomial(G, V(x)) correct responses, the estimate is
    ``(a1(k) sum_{correct} s + a0(k) sum_{incorrect} s) / G`` with correct (incorrect) scores iid
    with mean ``m1`` (``m0``) and second moment ``q1`` (``q0``); binomial weights are evaluated in
    log space (``scipy.stats.binom.pmf``), so any G works.
    """
    G = group_size
    P = st.n_prompts
    V.check_memory(f"the binary route's ({P}, {G + 1}) binomial tables (P={P}, G={G})",
                   8.0 * 12 * P * (G + 1), "use method='closed_form' where the estimator has one, "
                   "a smaller G, or mc_mse")
    p = np.asarray(st.probs)
    mu = np.asarray(st.reward_means)
    ssq = np.asarray(st.sq_norms())
    v = np.sum(p * mu, axis=1)
    w1, w0 = p * mu, p * (1 - mu)  # unnormalised conditional laws of y given Z = 1, 0
    n1 = np.where(v > 0, v, 1.0)[:, None]
    n0 = np.where(v < 1, 1 - v, 1.0)[:, None]
    m1 = np.asarray(st.project(jnp.asarray(w1 / n1)))
    m0 = np.asarray(st.project(jnp.asarray(w0 / n0)))
    q1 = np.sum(w1 / n1 * ssq, axis=1)
    q0 = np.sum(w0 / n0 * ssq, axis=1)
    a1, a0 = binary_advantages(st, est, G)
    k = np.arange(G + 1)[None, :].astype(np.float64)
    from scipy.stats import binom  # imported on first use (slow to import)

    pk = binom.pmf(np.arange(G + 1)[None, :], G, np.clip(v, 0.0, 1.0)[:, None])  # (P, G+1)
    mean = (np.sum(pk * a1 * k, axis=1)[:, None] * m1
            + np.sum(pk * a0 * (G - k), axis=1)[:, None] * m0) / G
    m11 = np.sum(m1**2, axis=1)[:, None]
    m00 = np.sum(m0**2, axis=1)[:, None]
    m10 = np.sum(m1 * m0, axis=1)[:, None]
    second = (a1**2 * (k * q1[:, None] + k * (k - 1) * m11)
              + a0**2 * ((G - k) * q0[:, None] + (G - k) * (G - k - 1) * m00)
              + 2 * a1 * a0 * k * (G - k) * m10)
    second = np.sum(pk * second, axis=1) / G**2
    return jnp.asarray(mean), jnp.asarray(second - np.sum(mean**2, axis=1))


@float64
def exact_prompt_mean_and_variance(problem, estimator, group_size: int):
    """Per-prompt exact mean (P, D) and trace variance (P,) by binary-reward conditioning.

    Args:
        problem: a policy, a :class:`DiscreteProblem` or a score structure.
        estimator: a registry name or an :class:`Estimator` with ``binary_exact``.
        group_size: G.

    Returns:
        ``(mean (P, D), var (P,))``: the means as full parameter vectors (for tabular policies
        the (P, P D_b) array is refused by size with a ``ValueError``; :func:`exact_prompt_mse`
        and :func:`exact_mse` need no such array).
    """
    est = get_estimator(estimator)
    G, _ = V.group_run(est, group_size, 1)
    _closed_form_route(est, "binary")
    st = as_structure(problem)
    st.check_embed()
    mean, var = _binary_blocks(st, est, G)
    return st.embed(mean), var


@float64
def exact_mse(bandit, estimator, group_size: int, batch_size: int = 1, method: str = "auto"):
    """Exact ``E||ghat - grad J||^2`` (trace) for B prompts drawn iid and G responses each.

    Args:
        bandit: a policy, a :class:`DiscreteProblem` or a score structure (tabular policies at
            O(P K) cost through :mod:`grpo_theory.core.gram`).
        estimator: a registry name or an :class:`Estimator`.
        group_size: G; batch_size: B.
        method: ``"closed_form"`` (ustat formulas; vanilla, oracle, optimal, baseline, grpo,
            grpo_mean), ``"binary"`` (conditioning on the number of correct responses; every
            estimator whose advantages depend only on the group's rewards, e.g. ``grpo_std``) or
            ``"auto"`` (closed form when there is one).

    Returns:
        The exact minibatch MSE (float). Raises ``ValueError`` when the estimator has no exact
        form (or couples the prompts of a batch) or a route's table would not fit.

    Examples:
        Two prompts, three responses each, B = 2 prompts of G = 4 responses:

        >>> from grpo_theory.core import SoftmaxBandit, exact_mse
        >>> bandit = SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]],
        ...                        [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
        >>> round(exact_mse(bandit, "grpo", group_size=4, batch_size=2), 6)
        0.033936
        >>> round(exact_mse(bandit, "oracle", group_size=4, batch_size=2), 6)
        0.026668
    """
    est = get_estimator(estimator)
    G, B = V.group_run(est, group_size, batch_size)
    closed = _closed_form_route(est, method)
    st = as_structure(bandit)
    est.check_problem(st.n_prompts)  # a prompt baseline of the wrong length
    if closed:
        return exact_mse_closed_form(st, est, G, B)
    mean, var = _binary_blocks(st, est, G)
    targets = st.pass_k_prompt_gradients(est.pass_k)
    return float(minibatch_from_moments(st, mean, var, B, targets))


@float64
def exact_prompt_mse(bandit, estimator, group_size: int, method: str = "auto") -> jnp.ndarray:
    """Per-prompt exact MSE ``E[||ghat_x - g(x)||^2 | x]`` of one prompt's G-group, shape (P,).

    Args:
        bandit: a policy, a :class:`DiscreteProblem` or a score structure.
        estimator: a registry name or an :class:`Estimator`.
        group_size: G.
        method: ``"auto"`` (the closed form where there is one, else binary conditioning),
            ``"closed_form"`` or ``"binary"``.

    Returns:
        The per-prompt MSEs (P,).
    """
    est = get_estimator(estimator)
    G, _ = V.group_run(est, group_size, 1)
    closed = _closed_form_route(est, method)
    st = as_structure(bandit)
    if closed:
        mean, var = prompt_mean_and_variance(st, est, G)
    else:
        mean, var = _binary_blocks(st, est, G)
    d = mean - st.pass_k_prompt_gradients(est.pass_k)
    return var + jnp.sum(d**2, axis=1)


@float64
def enumerate_estimates(bandit, estimator, group_size: int, batch_size: int = 1,
                        max_outcomes: int = 2_000_000):
    """Every outcome of a minibatch with its probability: ``(probs (N,), estimates (N, D))``.

    Enumerates prompts, responses and binary rewards: N = (P (2K)^G)^B outcomes, so only for
    tiny problems (the reference that the closed forms are tested against).
    """
    est = get_estimator(estimator)
    G, B = V.group_run(est, group_size, batch_size)
    st = as_structure(bandit)
    P, K, D = st.n_prompts, st.n_responses, st.dim
    n_group = P * (2 * K) ** G
    if n_group**B > max_outcomes:
        raise ValueError(f"enumeration has {n_group ** B} outcomes > max_outcomes={max_outcomes}")
    N = n_group**B
    V.check_memory(f"enumerate_estimates' ({N}, {B}, {G}, {D}) score gather", 8.0 * N * B * G * D
                   + 8.0 * P * K * D, "use exact_mse (closed form or binary route) instead")
    problem = as_problem(bandit)
    f = np.asarray(problem.prompt_probs)
    p = np.asarray(problem.probs)
    mu = np.asarray(problem.reward_means)
    # one group's outcomes: prompt x, atoms a_g = (y_g, z_g)
    grid = np.array(list(itertools.product(range(P), *[range(2 * K)] * G)))  # (n_group, 1+G)
    x1 = grid[:, 0]
    y1, z1 = grid[:, 1:] // 2, (grid[:, 1:] % 2).astype(np.float64)
    pz = np.where(z1 == 1, mu[x1[:, None], y1], 1 - mu[x1[:, None], y1])
    prob1 = f[x1] * np.prod(p[x1[:, None], y1] * pz, axis=1)
    combos = np.array(list(itertools.product(range(n_group), repeat=B)))  # (N, B)
    x, y, z = x1[combos], y1[combos], z1[combos]
    prob = np.prod(prob1[combos], axis=1)
    ctx = batch_context(est, jnp.asarray(x), jnp.asarray(y), problem.values(),
                        problem.optimal_baselines(), lambda: jnp.sum(problem.scores**2, axis=-1),
                        P)
    adv = est.advantage(jnp.asarray(z), ctx)  # (N, B, G)
    sc = problem.scores[x[:, :, None], y]  # (N, B, G, D)
    est_vals = jnp.einsum("nbg,nbgd->nd", adv, sc) / (B * G)
    return jnp.asarray(prob), est_vals


@float64
def enumerated_moments(bandit, estimator, group_size: int, batch_size: int = 1):
    """Exact ``(E ghat, E||ghat - grad J||^2)`` by brute-force enumeration."""
    problem = as_problem(bandit)
    prob, vals = enumerate_estimates(problem, estimator, group_size, batch_size)
    mean = prob @ vals
    target = problem.pass_k_gradient(get_estimator(estimator).pass_k)
    mse = prob @ jnp.sum((vals - target) ** 2, axis=1)
    return mean, float(mse)
