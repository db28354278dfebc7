r"""Exact mean, bias and MSE of estimators that see the whole batch or per-response weights.

The closed forms and the binary route of :mod:`grpo_theory.core.exact` need each group's
advantages to be a function of its own rewards. Two count-state routes cover the rest, exactly,
for binary rewards on enumerable policies (``ghat = (1/BG) sum_b sum_i A_bi s_bi``):

1. **Batch counts** (estimators that couple the prompts of a batch, e.g. ``jspo``, the batch
   whitening presets): a batch slot is described by its prompt and its number k of correct
   responses. Given the slots, correct (incorrect) responses are iid from ``pi(y|x, Z=1)``
   (``pi(y|x, Z=0)``) and every advantage takes one value ``a1`` (``a0``) on them, so
   ``E[ghat | slots] = (1/BG) sum_b (a1_b k_b m1(x_b) + a0_b (G - k_b) m0(x_b))`` and the
   conditional covariance is a sum over responses of ``tr Cov(s | x, Z)``. Under the package's
   default design (``"independent"``: B prompts drawn iid from f) the state is the *multiset* of
   slots (exchangeable), ``C(P(G+1) + B - 1, B)`` states; under ``"each"`` (every prompt once
   per batch, B = P) it is the vector of counts, ``(G+1)^P`` states.
2. **Response classes** (per-response weights, e.g. ``norm_weighted``: a group's advantages
   depend on which responses it holds, not only on their rewards): a group is the composition
   of G into the prompt's classes (response, reward), ``C(G + C - 1, G)`` states; given it the
   group's estimate is deterministic. Groups are independent, so the batch's moments follow.

Both assume advantages equivariant under permuting a group's responses (and, for the first,
the batch's groups): true of every estimator in the registry. The results equal brute-force
enumeration (:func:`~grpo_theory.core.exact.enumerate_estimates`) to rounding.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from scipy.special import gammaln
from scipy.stats import binom

from .. import _validation as V
from .estimators import PromptContext, compiled_advantage, get_estimator
from .pooled_exact import conditional_moments, pooled_route
from .problem import as_problem
from .._precision import float64

DESIGNS = ("independent", "each")
"""The batch designs: B prompts drawn iid from the prompt law (``"independent"``, the package's
default), or every prompt exactly once a batch (``"each"``, B = P)."""
#: the routes of :func:`batch_moments`
ROUTES = ("auto", "counts", "classes", "pooled")
#: bytes per entry of an evaluated advantage table, counting JAX temporaries
_ADV_BYTES = 8 * 6
#: entries of one evaluated chunk of states
_CHUNK_ENTRIES = 2_000_000


class BatchMoments(NamedTuple):
    """Exact moments of one estimator's batch estimate (:func:`batch_moments`).

    Attributes:
        mean: ``E[ghat]`` (D,). gradient: ``grad J`` (D,) (the mean prompt gradient under
            ``"each"``). second: ``E||ghat||^2``. mse: ``E||ghat - grad J||^2``.
        prompt_means: (P, D) prompt x's share of ``E[ghat]`` (the rows sum to ``mean``).
        n_states: the count states summed over. route: ``"counts"`` or ``"classes"``.
        design: ``"independent"`` or ``"each"``. batch_size: B.
        power: ``E[(1/BG) sum_i A_i^2 ||s_i||^2]``, the mean squared per-response term (the
            expectation of verl's ``variance_proxy/proxy2_total_power`` when its weight W is
            the squared score norm, as on a softmax over logits).
    """

    mean: np.ndarray
    gradient: np.ndarray
    second: float
    mse: float
    prompt_means: np.ndarray
    n_states: int
    route: str
    design: str
    batch_size: int
    power: float = float("nan")

    @property
    def variance(self) -> float:
        """``tr Cov(ghat) = E||ghat||^2 - ||E ghat||^2``: the step's gradient variance."""
        return float(self.second - self.mean @ self.mean)

    @property
    def bias(self) -> np.ndarray:
        return self.mean - self.gradient

    @property
    def relative_bias(self) -> float:
        """``||E ghat - grad J|| / ||grad J||``."""
        return float(np.linalg.norm(self.bias) / np.linalg.norm(self.gradient))

    @property
    def kept(self) -> float:
        """``<E ghat, grad J> / ||grad J||^2``: the share of the gradient the mean keeps."""
        g = self.gradient
        return float(self.mean @ g / (g @ g))


def _log_multiplicity(rows: np.ndarray) -> np.ndarray:
    """``log(n! / prod_c n_c!)`` for sorted rows of class indices (S, n): ``prod_c n_c!`` is the
    product over positions of the 1-based rank within the run of equal indices."""
    S, n = rows.shape
    run = np.ones(S)
    log_fact = np.zeros(S)
    for j in range(1, n):
        run = np.where(rows[:, j] == rows[:, j - 1], run + 1.0, 1.0)
        log_fact += np.log(run)
    return gammaln(n + 1.0) - log_fact


def _multisets(n_types: int, size: int, max_states: int, what: str) -> np.ndarray:
    """Sorted rows (S, size) of every multiset of ``size`` draws from ``n_types`` types."""
    S = math.comb(n_types + size - 1, size)
    if S > max_states:
        raise ValueError(f"the exact {what} route has {S} states > max_states={max_states}; use a "
                         "smaller batch_size or group_size, raise max_states, or use mc_mse")
    flat = np.fromiter(itertools.chain.from_iterable(
        itertools.combinations_with_replacement(range(n_types), size)), np.int64, S * size)
    return flat.reshape(S, size)


def _chunks(S: int, per_state: int):
    step = max(1, _CHUNK_ENTRIES // max(per_state, 1))
    for lo in range(0, S, step):
        yield slice(lo, min(S, lo + step))


def _counts_route(problem, est, G, B, design, max_states, state):
    P = problem.n_prompts
    f = np.asarray(problem.prompt_probs, np.float64)
    Vx, m1, m0, c1, c0 = conditional_moments(problem)
    k = np.arange(G + 1)
    pk = binom.pmf(k[None, :], G, Vx[:, None])  # (P, G+1)
    if design == "independent":
        tx, tk = np.nonzero(f[:, None] * pk > 0)
        tp = (f[:, None] * pk)[tx, tk]
        rows = _multisets(len(tx), B, max_states, "batch counts")
        logp = _log_multiplicity(rows) + np.sum(np.log(tp)[rows], axis=1)
        xs, ks = tx[rows], tk[rows]
    else:
        S = (G + 1) ** P
        if S > max_states:
            raise ValueError(f"the exact batch counts route has {S} states > max_states="
                             f"{max_states}; use a smaller group_size, raise max_states, or mc_mse")
        ks = np.array(list(itertools.product(range(G + 1), repeat=P)), np.int64).reshape(S, P)
        with np.errstate(divide="ignore"):
            logp = np.sum(np.log(pk[np.arange(P)[None, :], ks]), axis=1)
        keep = np.isfinite(logp)
        ks, logp = ks[keep], logp[keep]
        xs = np.broadcast_to(np.arange(P), ks.shape)
    prob = np.exp(logp)
    values = np.asarray(problem.values())
    opt = np.asarray(problem.optimal_baselines())
    fn = compiled_advantage(est)
    Mvec = np.concatenate([m1, m0])  # (2P, D)
    M = Mvec @ Mvec.T
    Eu = np.zeros(2 * P)
    second = power = 0.0
    q1, q0 = c1 + np.sum(m1**2, axis=1), c0 + np.sum(m0**2, axis=1)  # E[||s||^2 | x, Z]
    onehot = np.eye(P)
    for sl in _chunks(len(prob), B * G):
        x, kk = xs[sl], ks[sl]
        z = (np.arange(G)[None, None, :] < kk[..., None]).astype(np.float64)
        ctx = PromptContext(prompt=jnp.asarray(x), value=jnp.asarray(values[x]),
                            optimal_baseline=jnp.asarray(opt[x]), state=state)
        adv = np.asarray(fn(jnp.asarray(z), ctx))
        a1 = np.where(kk > 0, adv[..., 0], 0.0)
        a0 = np.where(kk < G, adv[..., -1], 0.0)
        al, be = a1 * kk / (B * G), a0 * (G - kk) / (B * G)
        oh = onehot[x]  # (s, B, P)
        u = np.concatenate([np.einsum("sb,sbp->sp", al, oh), np.einsum("sb,sbp->sp", be, oh)], 1)
        within = np.sum(a1**2 * kk * c1[x] + a0**2 * (G - kk) * c0[x], axis=1) / (B * G) ** 2
        pr = prob[sl]
        Eu += pr @ u
        second += float(pr @ (np.einsum("sp,pq,sq->s", u, M, u) + within))
        power += float(pr @ np.sum(a1**2 * kk * q1[x] + a0**2 * (G - kk) * q0[x], axis=1)) \
            / (B * G)
    prompt_means = Eu[:P, None] * m1 + Eu[P:, None] * m0
    return prompt_means, second, power, len(prob)


def _classes_route(problem, est, G, B, design, max_states, state):
    P, K = problem.n_prompts, problem.n_responses
    f = np.asarray(problem.prompt_probs, np.float64)
    p = np.asarray(problem.probs, np.float64)
    mu = np.asarray(problem.reward_means, np.float64)
    S = np.asarray(problem.scores, np.float64)
    sq = np.sum(S**2, axis=-1)
    values = np.asarray(problem.values())
    opt = np.asarray(problem.optimal_baselines())
    fn = compiled_advantage(est)
    means, seconds, n_states = np.zeros((P, S.shape[-1])), np.zeros(P), 0
    powers = np.zeros(P)
    for x in range(P):
        if design == "independent" and f[x] == 0:
            continue
        cy, cz = np.meshgrid(np.arange(K), [1.0, 0.0], indexing="ij")
        cp = p[x][:, None] * np.where(cz == 1, mu[x][:, None], 1 - mu[x][:, None])
        cy, cz, cp = cy[cp > 0], cz[cp > 0], cp[cp > 0]
        rows = _multisets(len(cp), G, max_states, "response classes")
        prob = np.exp(_log_multiplicity(rows) + np.sum(np.log(cp)[rows], axis=1))
        n_states += len(prob)
        gram = S[x] @ S[x].T
        onehot = np.eye(K)
        for sl in _chunks(len(prob), G):
            r = rows[sl]
            y, z = cy[r], cz[r]
            n = len(r)
            ctx = PromptContext(prompt=jnp.full((n,), x), value=jnp.full((n,), values[x]),
                                optimal_baseline=jnp.full((n,), opt[x]),
                                score_sq=jnp.asarray(sq[x][y]), state=state)
            adv = np.asarray(fn(jnp.asarray(z), ctx))  # (n, G)
            u = np.einsum("sg,sgk->sk", adv, onehot[y]) / G  # (n, K): E[g_x | group] = u S_x
            means[x] += (prob[sl] @ u) @ S[x]
            seconds[x] += float(prob[sl] @ np.einsum("sk,kl,sl->s", u, gram, u))
            powers[x] += float(prob[sl] @ np.sum(adv**2 * sq[x][y], axis=1)) / G
    if design == "independent":
        prompt_means = f[:, None] * means
        mean = prompt_means.sum(axis=0)
        second = float(f @ seconds) / B + (1 - 1 / B) * float(mean @ mean)
        power = float(f @ powers)
    else:
        prompt_means = means / P
        mean = prompt_means.sum(axis=0)
        second = float(np.sum(seconds - np.sum(means**2, axis=1))) / P**2 + float(mean @ mean)
        power = float(np.mean(powers))
    return prompt_means, second, power, n_states


def _choice(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


@float64
def batch_moments(bandit, estimator, group_size: int, batch_size: int | None = None,
                  design: str = "independent", route: str = "auto",
                  max_states: int = 2_000_000, state=None) -> BatchMoments:
    r"""Exact ``E[ghat]``, bias and MSE of any estimator of binary rewards, by count states.

    Args:
        bandit: an enumerable policy or a :class:`~grpo_theory.core.problem.DiscreteProblem`.
        estimator: a registry name or an :class:`~grpo_theory.core.estimators.Estimator`:
            batch-coupled ones (``jspo``, the whitening presets), per-response weighted ones
            (``norm_weighted``) and every group-only one; a stateful estimator is taken at
            ``state`` (the moments are conditional on the state before the step).
        group_size: G. batch_size: B (default: P under ``"each"``, 1 otherwise).
        design: ``"independent"`` (B prompts iid from f, the package's default everywhere) or
            ``"each"`` (every prompt once per batch: B = P and f uniform).
        route: ``"counts"`` (batch counts), ``"classes"`` (response classes; groups must not be
            coupled), ``"pooled"`` (an estimator with a ``PooledForm``, prompts iid:
            :mod:`~grpo_theory.core.pooled_exact`, any B) or ``"auto"`` (classes for
            per-response weights; counts otherwise, pooled where the counts route would
            exceed ``max_states`` and the estimator has a pooled form).
        max_states: refuse (``ValueError``) a route with more count states.
        state: a stateful estimator's state before the step (default: its initial state);
            ignored by a stateless one.

    The target is the gradient the estimator declares (``est.pass_k``): ``grad J`` for all but
    the pass@k estimators, ``grad pass@k`` (``DiscreteProblem.pass_k_gradient``) for those.

    Returns:
        A :class:`BatchMoments`.

    Examples:
        JSPO against leave-one-out, one of each of four prompts per batch (the two-armed toy):

        >>> import numpy as np
        >>> from grpo_theory.core import SoftmaxBandit, batch_moments
        >>> p = np.array([0.1, 0.3, 0.6, 0.9])
        >>> toy = SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * 4)
        >>> js = batch_moments(toy, "jspo", 4, design="each")
        >>> loo = batch_moments(toy, "grpo", 4, design="each")
        >>> round(js.relative_bias, 12), round(js.mse / loo.mse, 3)
        (0.0, 0.593)
    """
    est = get_estimator(estimator)
    G = V.integer("group_size", group_size, max(1, est.min_group_size))
    _choice("design", design, DESIGNS)
    _choice("route", route, ROUTES)
    max_states = V.integer("max_states", max_states, 1)
    problem = as_problem(bandit)
    P = problem.n_prompts
    if design == "each":
        B = P if batch_size is None else V.integer("batch_size", batch_size, 1)
        if B != P:
            raise ValueError(f"design='each' holds every prompt once: batch_size must be the "
                             f"number of prompts {P}, got {B}")
        f = np.asarray(problem.prompt_probs, np.float64)
        if not np.allclose(f, 1.0 / P, rtol=0, atol=1e-12):
            raise ValueError("design='each' estimates the mean prompt gradient: the problem's "
                             "prompt_probs must be uniform (or use design='independent')")
    else:
        B = 1 if batch_size is None else V.integer("batch_size", batch_size, 1)
    weighted = "score_sq" in est.needs
    if route == "auto":
        route = "classes" if weighted or not est.batch_coupled else "counts"
        if (route == "counts" and est.pooled is not None and design == "independent"
                and math.comb(P * (G + 1) + B - 1, B) > max_states):
            route = "pooled"
    if route == "pooled" and (est.pooled is None or design != "independent"):
        raise ValueError(f"route='pooled' needs an estimator with a pooled form and "
                         f"design='independent'; {est.name!r} under design={design!r} has "
                         f"{'a' if est.pooled is not None else 'no'} pooled form: use route='counts'")
    if route == "classes" and est.batch_coupled:
        raise ValueError(f"estimator {est.name!r} couples the prompts of a batch: use "
                         "route='counts' (or 'auto')")
    if route == "counts" and (weighted or not est.binary_exact):
        what = "reads per-response weights" if weighted else "is not a function of the rewards"
        raise ValueError(f"estimator {est.name!r} {what}: the batch counts route does not apply"
                         + ("; use route='classes'" if not est.batch_coupled else
                            "; use mc_mse for a Monte Carlo estimate"))
    if state is None:
        state = est.initial_state(P)
    if route == "pooled":
        prompt_means, second, power, n = pooled_route(problem, est, G, B, max_states)
    elif route == "counts":
        prompt_means, second, power, n = _counts_route(problem, est, G, B, design, max_states,
                                                       state)
    else:
        prompt_means, second, power, n = _classes_route(problem, est, G, B, design, max_states,
                                                        state)
    grad = np.asarray(problem.pass_k_gradient(est.pass_k), np.float64)
    mean = prompt_means.sum(axis=0)
    mse = second - 2 * float(mean @ grad) + float(grad @ grad)
    return BatchMoments(mean=mean, gradient=grad, second=float(second), mse=float(max(mse, 0.0)),
                        prompt_means=prompt_means, n_states=int(n), route=route, design=design,
                        batch_size=B, power=float(power))


@float64
def verl_proxy_audit(bandit, estimator, group_size: int, batch_size: int,
                     design: str = "independent") -> dict:
    r"""The exact expectations of verl's three gradient-variance proxies, against the truth.

    verl's ``compute_variance_proxy_metrics`` (``verl/trainer/ppo/metric_utils.py``) logs
    ``proxy1 = ||ghat||^2``, ``proxy2 = mean_i A_i^2 W_i`` and ``proxy3 = (proxy2 - proxy1) /
    (N - 1)`` over the N = BG responses of a mini-batch. For N *independent* terms
    ``X_i = A_i s_i`` with ``W_i = ||s_i||^2``, ``proxy3`` would be unbiased for
    ``tr Cov(ghat)``; a group's advantages share their baseline, so the terms are dependent. On
    a softmax over logits with one-token responses, W (``1 - 2 pi + sum pi^2``) is exactly the
    squared score norm and parameter space is logit space, so the expectations are exact here.
    verl clips ``proxy3`` at 0; the audit takes the unclipped value's expectation.

    Args:
        bandit: an enumerable policy whose parameters are the logits (e.g. a SoftmaxBandit).
        estimator: a registry name or estimator (the advantages A).
        group_size, batch_size: G and B (prompts a mini-batch).
        design: the batch design (:data:`DESIGNS`).

    Returns:
        A dict: ``proxy1``, ``proxy2``, ``proxy3`` (expectations), ``variance``
        (``tr Cov(ghat)``), ``mse``, ``ratio`` (``E proxy3 / variance``).

    Examples:
        >>> import numpy as np
        >>> from grpo_theory.core import SoftmaxBandit, verl_proxy_audit
        >>> toy = SoftmaxBandit(np.log([[0.3, 0.7], [0.6, 0.4]]), [[1.0, 0.0]] * 2)
        >>> a = verl_proxy_audit(toy, "grpo", 4, 2)
        >>> round(a["ratio"], 3)  # verl's proxy3 sees a third of the variance here
        0.322
    """
    bm = batch_moments(bandit, estimator, group_size, batch_size, design=design)
    N = bm.batch_size * int(group_size)
    if N < 2:
        raise ValueError("verl's proxy3 divides by N - 1: need at least 2 responses a batch")
    p3 = (bm.power - bm.second) / (N - 1)
    return dict(proxy1=bm.second, proxy2=bm.power, proxy3=p3, variance=bm.variance, mse=bm.mse,
                ratio=p3 / bm.variance if bm.variance > 0 else float("nan"))
