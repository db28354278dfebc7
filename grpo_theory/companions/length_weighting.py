r"""Length weighting ``f_alpha(L) = L^(alpha - 1)`` of GRPO's per-response terms (the length-weighting companion paper).

The impossibility note on Dr. GRPO (arXiv 2503.20783) weights response i of a group by
``f_alpha(L_i)``:

.. math:: \hat g_\alpha = \frac1G \sum_{i=1}^G f_\alpha(L_i)\, A_i\, s(x, y_i),
          \qquad f_\alpha(L) = L^{\alpha - 1}.

``alpha = 0`` is GRPO's per-response token mean ``1/|o_i|``; ``alpha = 1`` is Dr. GRPO's constant
normaliser. Each token of response i carries weight ``f_alpha(L_i) A_i``, so the response's total
token weight is ``L f_alpha(L) |A| = L^alpha |A|``: length-invariant only at ``alpha = 0``.

**Exact expectation** (mean-centred ``A_i = Z_i - Zbar``; derivation: ``E[A_1 | y_1, Z_1]``
depends on the other G - 1 rewards only through ``V(x)``):

.. math:: E\hat g_\alpha(x) = \frac{G-1}{G}\, \nabla_\theta\, E_{\pi_\theta}\big[f_\alpha(L)\,
          (\mu(x, y) - b)\big]\Big|_{b = V(x)},

so ``alpha = 1`` gives ``(G-1)/G grad J`` exactly and ``alpha < 1`` the gradient of another
objective. For any exchangeable advantage that depends on the rewards only (std-normalised
included), ``E[A_1 | Z_1 = z] = c_z(x) = E_{K' ~ Bin(G-1, V)} a(z, K')`` and
``E ghat(x) = sum_y pi(y) f(L_y) s_y [mu_y c_1 + (1 - mu_y) c_0]``
(:func:`exact_expected_gradient`);
brute-force enumeration of all G-tuples (:func:`enumerate_expected_gradient`) checks it and also
covers the batch-normalised ``token-mean`` mode, which is not of the f_alpha form.

**Aggregation modes**: how a framework turns per-token losses into one number. For a batch of B
groups of G responses (lengths ``L_bg``, every token of response (b, g) carrying ``A_bg``), each
mode is linear, ``ghat = (1/B) sum_{b,g} c_bg A_bg s_bg``, with the coefficients below (one
micro-batch on one process; :func:`mode_coefficients`):

===========================  ===================================  =====================  ========
mode                         framework (loss code)                ``c_bg``               alpha
===========================  ===================================  =====================  ========
``seq-mean-token-mean``      verl ``agg_loss``; TRL ``grpo``      ``1/(G L_bg)``         0
``seq-mean-token-sum``       verl ``agg_loss``                    ``1/G``                1
``seq-mean-token-sum-norm``  verl ``agg_loss``: batch sum /       ``B / lsf``            1 (x BG
                             ``loss_scale_factor`` (default                              / lsf)
                             T_max), not divided by the number
                             of sequences
``dr_grpo``                  TRL: batch sum / (N T_max)           ``1/(G T_max)``        1 (/T)
``token-mean``               verl: batch sum / global token       ``B / sum_bg L_bg``    none
                             count
``bnpo``                     TRL: / tokens of the micro-batch     ``B / sum_bg L_bg``    none
``dapo``                     TRL (default): / tokens of the       ``B / sum_bg L_bg``    none
                             generation batch, all processes
===========================  ===================================  =====================  ========

``token-mean``/``bnpo``/``dapo`` share a random normaliser across the batch: they are not of the
f_alpha form (alpha=1 token weights scaled by ``B / sum L``). With one micro-batch they coincide;
TRL's ``bnpo`` averages per-micro-batch token means when the batch is split, ``dapo`` does not.
``mode_coefficients(..., batch=False)`` treats each group as its own batch (B = 1).
"""

from __future__ import annotations

import itertools
from functools import partial
from math import comb

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from ..core import PolicyWrapper, PromptContext, get_estimator
from .._precision import float64


AGGREGATION_MODES = {
    "seq-mean-token-mean": (0.0, "verl seq-mean-token-mean = TRL 'grpo': 1/(G L_i)"),
    "seq-mean-token-sum": (1.0, "verl seq-mean-token-sum: 1/G"),
    "seq-mean-token-sum-norm": (1.0, "verl seq-mean-token-sum-norm: batch sum / loss_scale_factor "
                                     "(default T_max), not / number of sequences: B/T_max"),
    "token-mean": (None, "verl token-mean: batch sum / the batch's token count: B/sum_bg L_bg"),
}
"""verl ``loss_agg_mode`` -> (alpha or None, description) (verl ``core_algos.agg_loss``)."""
TRL_LOSS_TYPES = {
    "grpo": (0.0, "TRL grpo = verl seq-mean-token-mean: 1/(G L_i)"),
    "dr_grpo": (1.0, "TRL dr_grpo: batch sum / (N max_completion_length): 1/(G T_max)"),
    "bnpo": (None, "TRL bnpo: batch sum / the micro-batch's token count: B/sum_bg L_bg"),
    "dapo": (None, "TRL dapo (default): batch sum / the generation batch's token count over all "
                   "processes: B/sum_bg L_bg"),
}
"""TRL ``GRPOConfig.loss_type`` -> (alpha or None, description) (TRL
``GRPOTrainer._compute_loss``)."""
#: TRL loss types equal to a verl mode (one micro-batch on one process)
_TRL_ALIASES = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean"}


def _check_alpha(alpha):
    a = float(alpha)
    if not (np.isfinite(a) and 0.0 <= a <= 1.0):
        raise ValueError(f"alpha must be a finite number in [0, 1], got {alpha!r}")
    return a


@float64
def length_weights(lengths, alpha) -> jnp.ndarray:
    """``f_alpha(L) = L^(alpha - 1)`` for lengths >= 1.

    Args:
        lengths: response lengths (any shape), each >= 1.
        alpha: exponent in [0, 1].

    Returns:
        ``L^(alpha - 1)``, same shape.

    Examples:
        ``alpha = 0`` divides each sequence by its length (TRL's "grpo"), ``alpha = 1`` sums it:

        >>> from grpo_theory.companions import length_weights
        >>> length_weights([1, 2, 4], 0.0).tolist()
        [1.0, 0.5, 0.25]
        >>> length_weights([1, 2, 4], 1.0).tolist()
        [1.0, 1.0, 1.0]
    """
    a = _check_alpha(alpha)
    L = jnp.asarray(lengths, dtype=jnp.float64)
    if bool(jnp.any(L < 1)):
        raise ValueError("lengths must be >= 1")
    return L ** (a - 1.0)


def _mode_name(mode: str) -> str:
    if isinstance(mode, str) and mode in AGGREGATION_MODES:
        return mode
    if isinstance(mode, str) and mode in TRL_LOSS_TYPES:
        return _TRL_ALIASES.get(mode, mode)
    raise ValueError(f"mode must be one of verl's {sorted(AGGREGATION_MODES)} or TRL's "
                     f"{sorted(TRL_LOSS_TYPES)}, got {mode!r}")


@float64
def mode_alpha(mode: str):
    """The alpha an aggregation mode corresponds to (None for the batch token normalisers).

    Args:
        mode: a verl ``loss_agg_mode`` or TRL ``loss_type`` name.

    Returns:
        alpha (float) or ``None``.
    """
    name = _mode_name(mode)
    return (AGGREGATION_MODES.get(name) or TRL_LOSS_TYPES[name])[0]


@float64
def mode_coefficients(mode, lengths, max_length: int | None = None, *, batch: bool = False,
                      loss_scale_factor: float | None = None) -> jnp.ndarray:
    """Coefficients ``c_bg`` of ``A_bg s_bg`` in ``ghat = (1/B) sum_bg c_bg A_bg s_bg``.

    Args:
        mode: a verl ``loss_agg_mode`` or TRL ``loss_type`` name (table in the module doc), or a
            number alpha in [0, 1] (``c = f_alpha(L) / G``).
        lengths: response lengths, ``(..., G)`` (``batch=False``: each group is its own batch,
            B = 1) or ``(..., B, G)`` (``batch=True``: the batch normalisers couple the B groups).
        max_length: T_max (TRL ``max_completion_length``; verl's default ``loss_scale_factor``,
            the padded response length); needed by ``dr_grpo`` and ``seq-mean-token-sum-norm``.
        batch: read the last two axes of ``lengths`` as the batch ``(B, G)``.
        loss_scale_factor: verl's ``actor.loss_scale_factor`` for ``seq-mean-token-sum-norm``
            (default ``max_length``).

    Returns:
        ``c``, the shape of ``lengths``.
    """
    L = jnp.asarray(lengths, dtype=jnp.float64)
    if L.ndim < (2 if batch else 1):
        raise ValueError(f"lengths must have shape {'(..., B, G)' if batch else '(..., G)'}, "
                         f"got shape {L.shape}")
    G = L.shape[-1]
    B = L.shape[-2] if batch else 1
    if not isinstance(mode, str):
        return length_weights(L, mode) / G
    name = _mode_name(mode)
    if name == "seq-mean-token-mean":
        return 1.0 / (G * L)
    if name == "seq-mean-token-sum":
        return jnp.ones_like(L) / G
    if name == "seq-mean-token-sum-norm":
        if loss_scale_factor is None:
            if max_length is None:
                raise ValueError("seq-mean-token-sum-norm needs loss_scale_factor or max_length "
                                 "(T_max, verl's default loss_scale_factor)")
            lsf = V.positive_int("max_length", max_length, 1)
        else:
            lsf = V.real_scalar("loss_scale_factor", loss_scale_factor, positive=True)
        return jnp.ones_like(L) * (B / lsf)
    if name == "dr_grpo":
        if max_length is None:
            raise ValueError("max_length (T_max, TRL's max_completion_length) is needed for dr_grpo")
        V.positive_int("max_length", max_length, 1)
        return jnp.ones_like(L) / (G * max_length)
    axes = (-2, -1) if batch else (-1,)
    return jnp.broadcast_to(B / jnp.sum(L, axis=axes, keepdims=True), L.shape)


# --- exact expectations -----------------------------------------------------------------------


@V.renamed_arguments(G="group_size")
@float64
def conditional_advantages(estimator, values, group_size: int, optimal_baseline=None):
    """``c_z(x) = E[A_1 | Z_1 = z]`` for z = 1, 0: shapes (P,), jit friendly.

    ``A_1`` is the estimator's advantage of response 1 in a group whose other G - 1 rewards are
    iid Bernoulli(V(x)); averages over their count K' ~ Binomial(G - 1, V).

    Args:
        estimator: registry name or Estimator.
        values: ``V(x)`` (P,).
        group_size: G, the group size.
        optimal_baseline: ``b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x]`` (P,), needed by
            ``estimator="optimal"`` (a ``ValueError`` without it; never replaced by V).
    Returns:
        ``(c_1, c_0)``, each (P,).
    """
    G = group_size
    est = get_estimator(estimator)
    if est.batch_coupled:
        raise ValueError(f"estimator {est.name!r} normalises over the whole batch (batch-coupled), "
                         "so its advantages are not a function of one group; use Monte Carlo")
    v = jnp.asarray(values, dtype=jnp.float64)
    if "optimal_baseline" in est.needs and optimal_baseline is None:
        raise ValueError(f"estimator {est.name!r} needs optimal_baseline=b*(x) (P,); "
                         "V(x) is not b*(x) unless ||s||^2 and Z are uncorrelated")
    bstar = v if optimal_baseline is None else jnp.asarray(optimal_baseline, dtype=jnp.float64)
    kp = np.arange(G)  # k' = 0 .. G-1 correct among the others
    others = (np.arange(G - 1)[None, :] < kp[:, None]).astype(np.float64)  # (G, G-1)
    z = np.stack([np.concatenate([np.full((G, 1), zz), others], 1) for zz in (1.0, 0.0)])
    z = jnp.broadcast_to(jnp.asarray(z), (v.shape[0], 2, G, G))
    bc = jnp.broadcast_to(v[:, None, None], (v.shape[0], 2, G))
    ctx = PromptContext(prompt=jnp.broadcast_to(jnp.arange(v.shape[0])[:, None, None], bc.shape),
                        value=bc, optimal_baseline=jnp.broadcast_to(bstar[:, None, None],
                                                                    bc.shape))
    a = est.advantage(z, ctx)[..., 0]  # (P, 2, G)
    binom = jnp.asarray([comb(G - 1, k) for k in range(G)], dtype=jnp.float64)
    pmf = binom * v[:, None] ** kp * (1 - v[:, None]) ** (G - 1 - kp)  # (P, G)
    c = jnp.einsum("pk,pzk->pz", pmf, a)
    return c[:, 0], c[:, 1]


def _prompt_expectations(problem, lengths, alpha, estimator, G):
    f = jnp.asarray(lengths, dtype=jnp.float64) ** (alpha - 1.0)  # (K,)
    c1, c0 = conditional_advantages(estimator, problem.values(), G,
                                    optimal_baseline=problem.optimal_baselines())
    mu = problem.reward_means
    w = problem.probs * f[None, :] * (mu * c1[:, None] + (1 - mu) * c0[:, None])
    return jnp.einsum("pk,pkd->pd", w, problem.scores)


@V.renamed_arguments(G="group_size")
@float64
def exact_expected_gradient(policy, alpha, estimator="grpo_mean", group_size: int = 8,
                            params=None):
    """Exact ``E ghat_alpha`` (full gradient, (D,)) and per prompt ((P, D)); see module doc."""
    _check_policy(policy)
    a = _check_alpha(alpha)
    est = get_estimator(estimator)
    G = V.positive_int("group_size", group_size, max(2, est.min_group_size))
    problem = policy.problem(params)
    per = _prompt_expectations(problem, jnp.asarray(policy.lengths), a, est, G)
    return problem.prompt_probs @ per, per


def _check_policy(policy):
    if not hasattr(policy, "lengths") or not hasattr(policy, "problem"):
        raise ValueError("policy must be a SequencePolicy (or another policy with .lengths), "
                         f"got {type(policy).__name__}")


@V.renamed_arguments(G="group_size")
@float64
def enumerate_expected_gradient(policy, mode, estimator="grpo_mean", group_size: int = 2,
                                max_outcomes: int = 2_000_000, params=None):
    """Brute force: ``E[sum_i c_i A_i s_i]`` over every G-tuple of (response, reward) atoms.

    ``mode``: alpha in [0, 1] or an aggregation-mode name (:func:`mode_coefficients`).
    Returns (full (D,), per prompt (P, D)). ``(2K)^G`` tuples per prompt must not exceed
    ``max_outcomes``.
    """
    _check_policy(policy)
    est = get_estimator(estimator)
    G = V.positive_int("group_size", group_size, max(2, est.min_group_size))
    problem = policy.problem(params)
    P, K = problem.probs.shape
    n = (2 * K) ** G
    if n > max_outcomes:
        raise ValueError(f"enumeration has (2K)^G = {n} outcomes > max_outcomes={max_outcomes}")
    atoms = np.array(list(itertools.product(range(2 * K), repeat=G)))  # (N, G)
    y, z = atoms // 2, (atoms % 2).astype(np.float64)
    L = np.asarray(policy.lengths)[y]
    coef = np.asarray(mode_coefficients(mode, L, max_length=int(np.max(policy.lengths))))
    p = np.asarray(problem.probs)
    mu = np.asarray(problem.reward_means)
    vals = np.asarray(problem.values())
    bstar = np.asarray(problem.optimal_baselines())  # b*(x), what "optimal" subtracts
    per = []
    for x in range(P):  # P is a handful of prompts; each prompt's tuples are vectorised
        pz = np.where(z == 1, mu[x][y], 1 - mu[x][y])
        prob = np.prod(p[x][y] * pz, axis=1)  # (N,)
        ctx = PromptContext(prompt=jnp.full(len(atoms), x), value=jnp.full(len(atoms), vals[x]),
                            optimal_baseline=jnp.full(len(atoms), bstar[x]))
        adv = np.asarray(est.advantage(jnp.asarray(z), ctx))
        w = np.bincount(y.ravel(), weights=(prob[:, None] * coef * adv).ravel(), minlength=K)
        per.append(w @ np.asarray(problem.scores[x]))
    per = jnp.asarray(np.stack(per))
    return problem.prompt_probs @ per, per


@float64
def surrogate_gradient(policy, alpha, params=None):
    r"""``grad_theta sum_x f(x) E_pi[f_alpha(L) (mu - b(x))]`` at ``b = V(x)`` held fixed, (D,).

    By autodiff of the objective (not of an estimator): the mean-centred expectation equals
    ``(G-1)/G`` times this, exactly.
    """
    _check_policy(policy)
    a = _check_alpha(alpha)
    theta = policy.params if params is None else params
    f = jnp.asarray(policy.lengths, dtype=jnp.float64) ** (a - 1.0)
    b = jax.lax.stop_gradient(policy.problem(theta).values())

    def obj(th):
        pr = policy.probs(th)
        return policy.prompt_probs @ jnp.sum(pr * f * (policy.reward_means - b[:, None]), axis=1)

    return jax.grad(obj)(theta).reshape(-1)


# --- bias and length sensitivity --------------------------------------------------------------


@float64
def bias_metrics(mean, target) -> dict:
    """``cos`` (direction), ``rel_bias = ||mean - target|| / ||target||`` and ``sin`` (scale-free
    bias: distance to the best rescaling of target, relative)."""
    m, t = np.asarray(mean, float), np.asarray(target, float)
    nm, nt = np.linalg.norm(m), np.linalg.norm(t)
    if nt == 0:
        raise ValueError("target must be non-zero")
    cos = float(m @ t / (nm * nt)) if nm > 0 else float("nan")
    perp = m - (m @ t) / nt**2 * t
    return dict(cos=cos, rel_bias=float(np.linalg.norm(m - t) / nt),
                sin=float(np.linalg.norm(perp) / nm) if nm > 0 else float("nan"))


def _wls_slope(x, y, w):
    w = w / w.sum()
    xm, ym = w @ x, w @ y
    vx = w @ (x - xm) ** 2
    return float(w @ ((x - xm) * (y - ym)) / vx) if vx > 0 else float("nan")


@float64
def length_sensitivity(policy, alpha, params=None, _problem=None) -> dict:
    """Slopes vs log L under the policy's length distribution (probability-weighted LS).

    ``token_slope``: of ``log(L f_alpha(L))`` (a response's total token weight; the paper's P2),
    equal to alpha whenever lengths vary. ``grad_slope``: of ``log E[f_alpha(L) ||s(y)|| | L]``
    (the size of a response's gradient term per unit advantage, measured on the policy).
    NaN when all lengths are equal (no slope to fit).
    """
    _check_policy(policy)
    a = _check_alpha(alpha)
    problem = policy.problem(params) if _problem is None else _problem
    lengths = np.asarray(policy.lengths)
    p = np.asarray(problem.prompt_probs) @ np.asarray(problem.probs)  # marginal over prompts
    pk = np.asarray(problem.prompt_probs)[:, None] * np.asarray(problem.probs)
    norms = np.sqrt(np.asarray(problem.score_sq_norms()))
    Ls = np.unique(lengths)
    pL = np.array([p[lengths == L].sum() for L in Ls])
    keep = pL > 0
    Ls, pL = Ls[keep], pL[keep]
    if Ls.size < 2:
        return dict(token_slope=float("nan"), grad_slope=float("nan"))
    cont = np.array([np.sum(pk[:, lengths == L] * norms[:, lengths == L]) for L in Ls]) / pL
    x = np.log(Ls.astype(float))
    return dict(token_slope=_wls_slope(x, a * x, pL),
                grad_slope=_wls_slope(x, np.log(cont * Ls.astype(float) ** (a - 1)), pL))


@V.renamed_arguments(G="group_size")
@float64
def alpha_sweep(policy, alphas, group_size: int = 8, estimator="grpo_mean") -> list[dict]:
    """Bias and length sensitivity of ``E ghat_alpha`` over a grid of alpha.

    Bias is measured against ``(G-1)/G grad J`` (the alpha = 1 expectation for mean-centred
    advantages) and, for any advantage, against the alpha = 1 expectation of the same advantage
    (``cos_vs_alpha1``: bias caused by length weighting alone). Per-prompt cosines included.
    """
    est = get_estimator(estimator)
    G = V.positive_int("group_size", group_size, max(2, est.min_group_size))
    problem = policy.problem()
    lengths = jnp.asarray(policy.lengths)
    g = np.asarray(problem.gradient())
    gp = np.asarray(problem.prompt_gradients())

    def expect(a):
        per = np.asarray(_prompt_expectations(problem, lengths, a, est, G))
        return np.asarray(problem.prompt_probs) @ per, per

    ref, ref_p = expect(1.0)
    rows = []
    for a in alphas:
        m, mp = expect(_check_alpha(a))
        bm = bias_metrics(m, (G - 1) / G * g)
        r = dict(alpha=float(a), G=G, estimator=est.name, cos=bm["cos"], rel_bias=bm["rel_bias"],
                 sin=bm["sin"], cos_vs_alpha1=bias_metrics(m, ref)["cos"],
                 norm_ratio=float(np.linalg.norm(m) / np.linalg.norm(ref)))
        r.update(length_sensitivity(policy, float(a), _problem=problem))
        for x in range(mp.shape[0]):
            r[f"cos_prompt{x}"] = bias_metrics(mp[x], gp[x])["cos"] if np.any(gp[x]) else np.nan
        rows.append(r)
    return rows


# --- policies ---------------------------------------------------------------------------------


@float64
def conditional_lengths(problem, lengths) -> dict:
    """Exact ``E[L | Z = 0]``, ``E[L | Z = 1]``, ``E[L]`` and J under the policy (jit friendly)."""
    w = problem.prompt_probs[:, None] * problem.probs
    L = jnp.asarray(lengths, dtype=jnp.float64)
    mu = problem.reward_means
    w0, w1 = w * (1 - mu), w * mu
    return dict(L_incorrect=jnp.sum(w0 * L) / jnp.sum(w0), L_correct=jnp.sum(w1 * L) / jnp.sum(w1),
                L_mean=jnp.sum(w * L), J=jnp.sum(w1))


# --- training dynamics ------------------------------------------------------------------------


class _LengthWeighted(PolicyWrapper):
    """An enumerable policy whose per-response terms carry ``f_alpha(L_y)`` (the
    ``response_weights`` hook of the training loop) and whose records are
    :func:`conditional_lengths`; a pytree (policy and alpha traced), so one compiled loop
    serves every alpha and every policy of the same shapes."""

    def __init__(self, policy, alpha):
        super().__init__(policy)
        self.alpha = jnp.asarray(alpha, dtype=jnp.float64)

    def response_weights(self, dp):
        L = jnp.asarray(self.policy.lengths, dtype=jnp.float64)
        return jnp.broadcast_to(L ** (self.alpha - 1.0), dp.probs.shape)

    def step_record(self, dp, x, y, z, adv):
        return conditional_lengths(dp, jnp.asarray(self.policy.lengths, dtype=jnp.float64))


#: runs per vmapped call of :func:`train_length_weighted`
SEED_CHUNK = 32


@V.renamed_arguments(G="group_size")
@float64
def train_length_weighted(policy, alpha, n_steps: int, batch_size: int, group_size: int,
                          lr: float, seeds, estimator="grpo_mean") -> dict:
    """Sampled GRPO ascent with f_alpha weights: a use of
    :func:`grpo_theory.optim.train.make_train` (``lax.scan`` over steps, ``vmap`` over seeds).

    ``ghat = (1/BG) sum_bg f_alpha(L_bg) A_bg s_bg``; ``estimator="optimal"`` subtracts the
    exact ``b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x]`` at the current parameters.

    Args:
        policy: a SequencePolicy (or another enumerable policy with ``lengths``).
        alpha: in [0, 1]; n_steps, batch_size, group_size, lr: steps, B, G, step size.
        seeds: integer seeds, one run each; estimator: registry name.
    Returns:
        Exact ``L_incorrect, L_correct, L_mean, J`` before each step, arrays (S, n_steps).
    """
    from ..optim import TrainConfig, seed_keys, train_batch

    _check_policy(policy)
    a = _check_alpha(alpha)
    est = get_estimator(estimator)
    G = V.positive_int("group_size", group_size, max(2, est.min_group_size))
    cfg = TrainConfig(batch_size=batch_size, group_size=G, n_steps=n_steps, lr=lr)
    _, keys = seed_keys(seeds)
    prob = _LengthWeighted(policy, a)
    # at most SEED_CHUNK runs per vmapped call: the loop's time grows faster than linearly
    # beyond (measured: 6 s at 32 seeds, 28 s at 64); each run's numbers do not depend on it
    parts = [train_batch(prob, est, cfg, keys[i:i + SEED_CHUNK], sup_objective=0.0).records
             for i in range(0, keys.shape[0], SEED_CHUNK)]
    return {k: np.concatenate([np.asarray(r[k]) for r in parts]) for k in parts[0]}


@V.renamed_arguments(G="group_size")
@float64
def expected_flow(policy, alpha, n_steps: int, group_size: int, lr: float,
                  estimator="grpo_mean") -> dict:
    """Deterministic ascent along the exact expectation ``theta += lr E ghat_alpha(theta)``."""
    _check_policy(policy)
    a = _check_alpha(alpha)
    V.positive_int("n_steps", n_steps, 1)
    est = get_estimator(estimator)
    G = V.positive_int("group_size", group_size, max(2, est.min_group_size))
    return {k: np.asarray(v) for k, v in
            _flow(policy, est, a, n_steps, G, float(lr)).items()}


@partial(jax.jit, static_argnames=("est", "n_steps", "G"))
def _flow(policy, est, alpha, n_steps, G, lr):
    """The exact-expectation ascent, the policy traced (one compilation per shapes)."""
    lengths = jnp.asarray(policy.lengths, dtype=jnp.float64)

    def step(theta, _):
        prob = policy.problem(theta)
        m = prob.prompt_probs @ _prompt_expectations(prob, lengths, alpha, est, G)
        return theta + lr * m.reshape(theta.shape), conditional_lengths(prob, lengths)

    _, rec = jax.lax.scan(step, policy.params, None, length=n_steps)
    return rec
