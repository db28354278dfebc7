r"""U-statistics: a general order-m toolkit, the GRPO kernel (Lemma 1) and the exact MSE forms.

General toolkit
---------------
For a symmetric kernel ``h`` of order m and iid draws X_1..X_n,
``U_n = binom(n, m)^-1 sum_{i_1 < .. < i_m} h(X_{i_1}, .., X_{i_m})``. Its Hoeffding
decomposition uses the projections ``h_c(x_1..x_c) = E[h | X_1..X_c = x_1..x_c]`` and
``sigma_c^2 = Var h_c(X_1..X_c)`` (trace of the covariance for vector kernels). The classical
variance (Hoeffding 1948) is

.. math:: \operatorname{Var} U_n = \binom{n}{m}^{-1} \sum_{c=1}^m \binom{m}{c}\binom{n-m}{m-c}\,\sigma_c^2 .

GRPO as a U-statistic (Lemma 1)
-------------------------------
For one prompt, with ``h((s_i, z_i), (s_j, z_j)) = 1/2 (s_i - s_j)(z_i - z_j)``,
``ghat_GRPO = binom(G, 2)^-1 sum_{i<j} h_ij`` equals the leave-one-out estimator
``(1/G) sum_g s_g (z_g - Zbar_(-g))``. Its projections are ``h_0 = g(x)``,
``h_1(y, z) = 1/2 [s(y)(z - V(x)) + g(x)]`` so ``sigma_1^2 = tr Sigma_or(x) / 4``.

Exact MSE (Theorem 2, Proposition 3)
-------------------------------
Per prompt: oracle ``tr Sigma_or / G``; prompt baseline b: ``(E[||s||^2 (Z-b)^2] - ||g||^2) / G``;
GRPO: ``tr Sigma_or / G + (E||s||^2 sigma^2 + ||g||^2) / (G (G-1))`` (exact, derived); the
self-inclusive mean is ``(G-1)/G`` times GRPO (bias ``-g(x)/G``). For a minibatch of B iid prompts,
with per-prompt mean ``m(x)`` and trace variance ``v(x)``:
``MSE_B = (E_X v(X) + E_X ||m(X) - E m||^2) / B + ||E m - g||^2``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import partial
from math import comb

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .closed_forms import ClosedForm, LeaveOneOut, closed_form_of
from .gram import as_structure
from .problem import as_problem
from .._precision import float64


# --- general order-m U-statistics ---------------------------------------------------------------

def _take(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i], tree)


def _leading(tree) -> int:
    return jax.tree_util.tree_leaves(tree)[0].shape[0]


@float64
def u_statistic(kernel, samples, order: int):
    """Evaluate ``U_n`` for a symmetric ``kernel(x_1, .., x_m)`` over all m-subsets of ``samples``.

    ``samples`` is an array or pytree whose leaves have a leading axis of length n >= m. The
    kernel is vmapped over the ``binom(n, m)`` index subsets.
    """
    order = V.positive_int("order", order, 1)
    n = _leading(samples)
    if n < order:
        raise ValueError(f"samples must hold at least order={order} draws, got n={n}")
    idx = jnp.asarray(list(itertools.combinations(range(n), order)))
    vals = jax.vmap(lambda ii: kernel(*[_take(samples, ii[j]) for j in range(order)]))(idx)
    return jnp.mean(vals, axis=0)


@dataclass(frozen=True)
class HoeffdingResult:
    """``theta = E h`` and ``sigma_sq[c-1] = sigma_c^2`` for c = 1..m (trace for vector kernels)."""

    theta: np.ndarray
    sigma_sq: np.ndarray
    projections: tuple  # h_c evaluated on all c-tuples of atoms, shape (n_atoms,)*c + out

    @float64
    def variance(self, n: int) -> float:
        return ustat_variance(self.sigma_sq, n)


@float64
def hoeffding_exact(kernel, atoms, weights, order: int) -> HoeffdingResult:
    """Exact Hoeffding projections and sigma_c^2 for a discrete distribution.

    ``atoms`` is an array/pytree with leading axis A (the support), ``weights`` (A,) their
    probabilities. Enumerates all A^m tuples, so keep A^m small.
    """
    order = V.positive_int("order", order, 1)
    w = V.probability_vector("weights", weights, size=_leading(atoms))
    a = w.shape[0]
    tuples = jnp.asarray(list(itertools.product(range(a), repeat=order)))
    vals = jax.vmap(lambda ii: kernel(*[_take(atoms, ii[j]) for j in range(order)]))(tuples)
    vals = np.asarray(vals, dtype=np.float64)
    out_shape = vals.shape[1:]
    h = vals.reshape((a,) * order + out_shape)
    projections = [h]
    for _ in range(order):  # average out the last argument, repeatedly
        cur = projections[-1]
        axis = cur.ndim - len(out_shape) - 1
        projections.append(np.tensordot(cur, w, axes=([axis], [0])) if axis >= 0 else cur)
        # np.tensordot moves the contracted axis away: the remaining order is preserved
    # projections[j] has order - j leading atom axes: h_{order - j}
    theta = projections[order]
    sig = []
    for c in range(1, order + 1):
        hc = projections[order - c]
        dev = (hc - theta).reshape((a,) * c + (-1,))
        sq = np.sum(dev**2, axis=-1)
        for _ in range(c):
            sq = np.tensordot(sq, w, axes=([0], [0]))
        sig.append(float(sq))
    return HoeffdingResult(theta, np.asarray(sig), tuple(projections[order - c]
                                                         for c in range(1, order + 1)))


@float64
def hoeffding_mc(kernel, sampler, order: int, key, n_pairs: int = 100_000):
    """Monte Carlo sigma_c^2 = Cov(h(X_1..X_c, X'), h(X_1..X_c, X'')) with standard errors.

    ``sampler(key, n)`` returns n iid draws (array/pytree with leading axis n). For each c two
    kernel evaluations share their first c arguments and draw the rest independently.
    Returns ``(sigma_sq, se)`` arrays of length m.
    """
    order = V.positive_int("order", order, 1)
    keys = jax.random.split(key, order + 1)
    # ||theta||^2 estimated without bias by the product of two independent means
    ka, kb = jax.random.split(keys[0])
    theta_a = jnp.mean(jax.vmap(kernel)(*[sampler(k, n_pairs) for k in jax.random.split(ka, order)]), 0)
    theta_b = jnp.mean(jax.vmap(kernel)(*[sampler(k, n_pairs) for k in jax.random.split(kb, order)]), 0)
    theta_sq = float(jnp.sum(theta_a * theta_b))
    sig, se = [], []
    for c in range(1, order + 1):
        ks = jax.random.split(keys[c], 2 * order - c)
        shared = [sampler(k, n_pairs) for k in ks[:c]]
        rest1 = [sampler(k, n_pairs) for k in ks[c:order]]
        rest2 = [sampler(k, n_pairs) for k in ks[order:]]
        h1 = jax.vmap(kernel)(*shared, *rest1)
        h2 = jax.vmap(kernel)(*shared, *rest2)
        prod = jnp.sum((h1 * h2).reshape(n_pairs, -1), axis=1)
        sig.append(float(jnp.mean(prod)) - theta_sq)
        se.append(float(jnp.std(prod, ddof=1) / np.sqrt(n_pairs)))
    return np.asarray(sig), np.asarray(se)


@float64
def ustat_variance(sigma_sq, n: int) -> float:
    """Classical exact variance of an order-m U-statistic of n draws (Hoeffding 1948)."""
    sigma_sq = np.asarray(sigma_sq, dtype=np.float64)
    m = sigma_sq.shape[0]
    n = V.positive_int("n", n, m)
    total = sum(comb(m, c) * comb(n - m, m - c) * sigma_sq[c - 1] for c in range(1, m + 1))
    return float(total / comb(n, m))


# --- the GRPO kernel (Lemma 1) -----------------------------------------------------------------

@float64
def grpo_kernel(a, b):
    """h(a, b) = 1/2 (s_a - s_b)(z_a - z_b) with a = (s_a, z_a), b = (s_b, z_b)."""
    (sa, za), (sb, zb) = a, b
    return 0.5 * (sa - sb) * (za - zb)


@float64
def grpo_loo_estimate(scores, rewards):
    """Direct leave-one-out form ``(1/G) sum_g s_g (z_g - Zbar_(-g))``; scores (G, D), rewards (G,)."""
    g = rewards.shape[0]
    loo = (jnp.sum(rewards) - rewards) / (g - 1)
    return jnp.mean(scores * (rewards - loo)[:, None], axis=0)


@float64
def grpo_ustat_estimate(scores, rewards):
    """Lemma 1's pairwise form ``binom(G,2)^-1 sum_{i<j} h_ij``."""
    return u_statistic(grpo_kernel, (scores, rewards), 2)


# --- exact per-prompt moments and MSE ----------------------------------------------------------
# Everything below goes through a score structure (grpo_theory.core.gram): weighted score sums
# as per-prompt block vectors and the squared norms ||s(x, y)||^2, never a (P, K, D) tensor for
# the tabular policies. A DiscreteProblem is its own (dense, shared-parameter) structure, so the
# block vectors of a DiscreteProblem are ordinary (P, D) vectors.

@dataclass(frozen=True)
class PromptMoments:
    """Per-prompt moments (each of shape (P,) unless noted) for Bernoulli rewards.

    Vector fields are the structure's block vectors (P, D_b): (P, D) for a DiscreteProblem.
    """

    value: jnp.ndarray  # V(x)
    sigma2: jnp.ndarray  # Var(Z|x)
    grad: jnp.ndarray  # g(x), (P, D_b)
    grad_sq: jnp.ndarray  # ||g(x)||^2
    mean_score: jnp.ndarray  # E[s|x], (P, D_b) (zero for exact scores; kept for generality)
    score_sq: jnp.ndarray  # E[||s||^2 | x]
    score_sq_z: jnp.ndarray  # E[||s||^2 Z | x] (= E[||s||^2 Z^2 | x] for binary Z)
    tr_sigma_oracle: jnp.ndarray  # tr Sigma_or(x)


def row_dot(a, b):
    return jnp.sum(a * b, axis=-1)


@float64
def prompt_moments(problem) -> PromptMoments:
    """Exact per-prompt moments of Theorem 2 / Proposition 3 through the score structure.

    Args:
        problem: a policy, a :class:`DiscreteProblem` or a score structure.

    Returns:
        :class:`PromptMoments` (vector fields as block vectors).
    """
    st = as_structure(problem)
    p, mu, ssq = st.probs, st.reward_means, st.sq_norms()
    v = st.values()
    g = st.project(p * mu)
    es = st.project(p)
    s2 = jnp.sum(p * ssq, axis=1)
    s2z = jnp.sum(p * ssq * mu, axis=1)
    g2 = row_dot(g, g)
    # E||s (Z - V)||^2 - ||E[s (Z - V)]||^2 with E[s (Z - V)] = g - V E[s]
    mean_or = g - v[:, None] * es
    tr_or = s2z - 2 * v * s2z + v**2 * s2 - row_dot(mean_or, mean_or)
    # for binary Z: E[||s||^2 (Z - V)^2] = E[||s||^2 Z](1 - 2V) + V^2 E||s||^2
    return PromptMoments(v, v - v**2, g, g2, es, s2, s2z, tr_or)


class TraceRoute:
    """The score-structure route of :meth:`~grpo_theory.core.closed_forms.ClosedForm.moments`:
    per-prompt means as block vectors (P, D_b) and trace variances (P,), for Bernoulli rewards.

    Args:
        st: a score structure; mo: its :class:`PromptMoments`.
    """

    def __init__(self, st, mo: PromptMoments):
        self.st, self.mo = st, mo

    def prompt_baseline(self, b, G):
        """``A = Z - b(x)``: mean ``g - b E[s]``, variance ``(E||s (Z - b)||^2 - ||mean||^2)/G``."""
        mo = self.mo
        b = jnp.asarray(b, dtype=jnp.float64)
        mean = mo.grad - b[:, None] * mo.mean_score
        second = mo.score_sq_z * (1 - 2 * b) + b**2 * mo.score_sq  # E||s (Z-b)||^2, binary Z
        return mean, (second - row_dot(mean, mean)) / G

    def leave_one_out(self, G):
        """Lemma 1's U-statistic: mean ``g``, variance ``2/(G(G-1)) (2(G-2) sigma_1^2 +
        sigma_2^2)`` for the kernel's projections (general ``E s``)."""
        mo = self.mo
        h1_dev_sq = _h1_variance(self.st, mo)
        eh2 = 0.25 * (2 * mo.score_sq_z + 2 * mo.score_sq * mo.value - 4 * mo.score_sq_z * mo.value
                      - 4 * row_dot(mo.grad, mo.mean_score) + 4 * mo.grad_sq)
        sigma2_2 = eh2 - mo.grad_sq
        return mo.grad, (2.0 / (G * (G - 1))) * (2 * (G - 2) * h1_dev_sq + sigma2_2)


def _form(estimator):
    """The :class:`ClosedForm` of an estimator (registry name or Estimator), or a form itself."""
    if isinstance(estimator, ClosedForm):
        return estimator
    from .estimators import get_estimator  # the registry sits above the U-statistic maths

    return closed_form_of(get_estimator(estimator), "closed-form MSE", "use method='binary' "
                          "(exact_mse) or mc_mse")


def _check_group(form, G):
    if form.pair_term and isinstance(G, (int, np.integer)) and G < 2:
        raise ValueError(f"group_size must be >= 2 for a leave-one-out/mean baseline, got {G}")


@float64
def prompt_mean_and_variance(problem, estimator, group_size: int, b=None):
    """Exact per-prompt mean ``m(x)`` (block vectors) and trace variance ``v(x)`` (P,) of a G-group.

    Args:
        problem: a policy, a :class:`DiscreteProblem` (means (P, D)) or a score structure.
        estimator: an estimator with a closed form (registry name or
            :class:`~grpo_theory.core.estimators.Estimator`) or a
            :class:`~grpo_theory.core.closed_forms.ClosedForm`.
        group_size: G (>= 2 for a form with a pair term, e.g. leave-one-out).
        b: the prompt baseline (P,) for a prompt-baseline form given directly (an estimator's
            own baseline is used otherwise).

    Returns:
        ``(mean (P, D_b), var (P,))``.
    """
    G = group_size
    form = _form(estimator)
    _check_group(form, G)
    st = as_structure(problem)
    if b is None and not isinstance(estimator, ClosedForm):
        b = _baseline(st, estimator)
    return form.moments(TraceRoute(st, prompt_moments(st)), G, b)


def _baseline(st, estimator):
    from .estimators import get_estimator

    est = get_estimator(estimator)
    return est.closed_form.baseline(st.values, st.optimal_baselines, est)


def _h1_variance(st, mo: PromptMoments):
    """tr Var h_1 with ``h_1(y, z) = 1/2 [s(y) z - s(y) V - E[s] z + g]`` (Lemma 1, general E s).

    ``h_1(y, z) - g = d_z(y)/2`` with ``d_z = s (z - V) - (E[s] z + g)``; summed over y with
    weights ``c_z = pi (1 - mu), pi mu``: ``sum c_z (z - V)^2 ||s||^2 + (sum c_z) ||E[s] z + g||^2
    - 2 (z - V) <S^T c_z, E[s] z + g>`` (inner products only; Sigma_or/4 for exact scores).
    """
    p, mu, ssq = st.probs, st.reward_means, st.sq_norms()
    v = mo.value
    total = 0.0
    for z, c in ((0.0, p * (1 - mu)), (1.0, p * mu)):
        u = mo.mean_score * z + mo.grad
        term = (jnp.sum(c * ssq, axis=1) * (z - v) ** 2 + jnp.sum(c, axis=1) * row_dot(u, u)
                - 2 * (z - v) * row_dot(st.project(c), u))
        total = total + term
    return 0.25 * total


@float64
def minibatch_mse(problem, mean, var, batch_size: int) -> float:
    """``(E_X v + E_X||m - E m||^2)/B + ||E m - g||^2`` for B prompts drawn iid from f.

    Args:
        problem: a policy, a :class:`DiscreteProblem` or a score structure.
        mean: per-prompt means as the structure's block vectors ((P, D) for a DiscreteProblem).
        var: per-prompt trace variances (P,).
        batch_size: B.

    Returns:
        The minibatch MSE (float).
    """
    st = as_structure(problem)
    return float(minibatch_from_moments(st, jnp.asarray(mean), jnp.asarray(var), batch_size,
                            st.prompt_gradients()))


def minibatch_from_moments(st, mean, var, batch_size, grads):
    f = st.prompt_probs
    spread = st.spread(f, mean)
    bias2 = st.mean_sq(f, mean - grads)
    return (f @ var + spread) / batch_size + bias2


@partial(jax.jit, static_argnames=("form",))
def _closed_forms_jit(st, group_size, batch_size, b, form):
    """A form's closed-form MSE and the scaling constants in one compiled function (one compile
    per structure shape and form serves every G, B and ``scaling_constants``)."""
    mo = prompt_moments(st)
    mean, var = form.moments(TraceRoute(st, mo), group_size, b)
    mse = minibatch_from_moments(st, mean, var, batch_size, mo.grad)
    return mse, _pieces(st, mo)


def _pieces(st, mo):
    """The exact :data:`~grpo_theory.core.closed_forms.PIECES` (c1, c2, c3, c_v, ||grad J||^2)."""
    f = st.prompt_probs
    c1 = st.spread(f, mo.grad)
    c2 = f @ mo.tr_sigma_oracle
    c3 = f @ (mo.score_sq * mo.sigma2 + mo.grad_sq)
    c_v = f @ (mo.score_sq_z - mo.grad_sq)
    return jnp.stack([c1, c2, c3, c_v, st.mean_sq(f, mo.grad)])


def closed_form_pieces(st, group_size, batch_size, b=None, form=None):
    """``(mse, pieces)`` of ``form`` (leave-one-out by default) at (G, B)."""
    form = LeaveOneOut() if form is None else form
    b = jnp.zeros(st.n_prompts) if b is None else jnp.asarray(b, dtype=jnp.float64)
    return _closed_forms_jit(st, jnp.float64(group_size), jnp.float64(batch_size), b, form)


@float64
def exact_mse_closed_form(problem, estimator, group_size: int, batch_size: int = 1,
                          b=None) -> float:
    """Closed-form minibatch MSE (jit-compiled; see :func:`minibatch_mse` for the formula).

    Args:
        problem: a policy, a :class:`DiscreteProblem` or a score structure.
        estimator: an estimator with a closed form (registry name or ``Estimator``) or a
            :class:`~grpo_theory.core.closed_forms.ClosedForm`.
        group_size: G; batch_size: B; b: the prompt baseline (P,) for a prompt-baseline form
            given directly (an estimator's own baseline is used otherwise).

    Returns:
        The exact minibatch MSE (float).
    """
    form = _form(estimator)
    if form.pair_term and group_size < 2:
        raise ValueError(f"group_size must be >= 2 for a leave-one-out/mean baseline, got {group_size}")
    st = as_structure(problem)
    if b is None and not isinstance(estimator, ClosedForm):
        b = _baseline(st, estimator)
    # G and B are traced (float64): one compile per structure shape and form for every G and B
    mse, _ = closed_form_pieces(st, group_size, batch_size, b, form)
    return float(mse)


@float64
def leading_order_mse(problem, estimator, group_size: int, batch_size: int = 1) -> float:
    """The paper's leading-order MSE (Theorem 2 for grpo/oracle, Proposition 3 for vanilla).

    The estimator's :meth:`~grpo_theory.core.closed_forms.ClosedForm.leading_order_weights` over
    the exact pieces: ``(c1 + c2/G)/B`` for ``grpo`` and ``oracle`` (the O(G^-2) remainder of
    eq. 7 dropped) and ``(c1 + E_X[E||s||^2 Z^2 - ||g(X)||^2]/G)/B`` for ``vanilla`` (exact).

    Args:
        problem: a policy, a :class:`DiscreteProblem` or a score structure.
        estimator: a registry name or an ``Estimator`` whose closed form has leading-order
            weights (``"grpo"``, ``"rloo"``, ``"oracle"``, ``"vanilla"`` among the built-ins).
        group_size: G; batch_size: B.

    Returns:
        The leading-order MSE (float).
    """
    group_size = V.positive_int("group_size", group_size)
    batch_size = V.positive_int("batch_size", batch_size)
    if isinstance(estimator, ClosedForm):
        raise ValueError(f"estimator must be a registry name or an Estimator, got {estimator!r}")
    form = _form(estimator)
    w = np.asarray(form.leading_order_weights(batch_size, group_size), dtype=np.float64)
    st = as_structure(problem)
    pieces = np.asarray(_pieces(st, prompt_moments(st)), dtype=np.float64)
    return float(w @ pieces)


@float64
def sigma_oracle(problem) -> jnp.ndarray:
    """Asymptotic per-sample covariance ``E_X Sigma_or(X)`` (D, D); Theorem 2's ``Sigma``.

    Dense by nature: refuses with ``ValueError`` when the (P, D, D) covariances would not fit
    (its trace is ``scaling_constants(...).c2``, which needs no dense array).
    """
    prob = as_problem(problem)
    P, K, D = prob.scores.shape
    V.check_memory(f"sigma_oracle's ({P}, {D}, {D}) covariances", 8.0 * P * D * D * 2,
                   "its trace is scaling_constants(policy).c2 (no dense array)")
    return jnp.tensordot(prob.prompt_probs, prob.oracle_covariances(), axes=1)
