r"""Credit assignment in GRPO and the rank-2 structure of its gradients (the credit-assignment companion paper).

Companion paper: "credit assignment" (arXiv 2606.29238). With an outcome-only reward every token
of a response receives that response's advantage, so the token-level policy gradient collapses
to the sequence-level one:

.. math:: \sum_t A_i \nabla\log\pi(y_{i,t} | x, y_{i,<t}) = A_i\, s(x, y_i)

(:func:`token_level_gradient` vs :func:`sequence_level_gradient`, equal in float64).

**Binary-reward identity.** For a group of G responses with k correct (0 < k < G) and any
permutation-equivariant advantage that takes the value ``a1`` on correct and ``a0`` on incorrect
responses and sums to zero over the group (``k a1 + (G - k) a0 = 0``),

.. math:: \hat g = \frac1G \sum_i A_i s_i = c(k, G)\,(\bar s_{+} - \bar s_{-}),
          \qquad c(k, G) = \frac{k\, a_1}{G},

with closed forms (:func:`binary_scalar`): mean-centred ``k(G-k)/G^2``; leave-one-out
``k(G-k)/(G(G-1))``; std-normalised ``k(G-k)/G^2 / (sd + eps)`` with
``sd = sqrt(k(G-k)/(G(G-ddof)))``. A group's gradient lies in the plane of the two class-mean
scores: the "rank-2 structure whatever G".

**Effective rank.** The per-response matrix ``diag(A) S`` (G x D) can still have rank up to G:
its rows are the individual scores. :func:`rank_measures` gives the entropy effective rank
``exp(H(sigma / sum sigma))`` (Roy & Vetterli 2007), the participation ratio
``(sum sigma^2)^2 / sum sigma^4`` and the number of components holding 90% of the energy
``sum sigma^2``; :func:`class_plane_energy` the share of ``||diag(A) S||_F^2`` in the plane of the
class means. Whether the effective rank is ~2 depends on the policy (peaked vs near-uniform),
which :func:`rank_study` measures.

Also here: a tiny MLP softmax sequence policy (:class:`MLPSequencePolicy`) for weight-gradient
matrices, the zero-advantage probability ``V^G + (1 - V)^G`` and the MSE-optimal baseline
``b* = E[r ||s||^2] / E[||s||^2]`` against the group mean (:func:`baseline_comparison`).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from ..core import (PolicyWrapper, PromptContext, SequencePolicy, as_problem, exact_mse,
                    get_estimator, sample_groups)
from .._precision import float64
from .mlp_policy import MLPSequencePolicy, sequence_entropy


RANK_FIELDS = ("erank", "participation", "n90")
"""The rank measures of a Gram matrix, in the order :func:`rank_measures_from_gram` returns."""


# --- token-level view -------------------------------------------------------------------------


def _check_seq(policy):
    if not isinstance(policy, (SequencePolicy, MLPSequencePolicy)):
        raise ValueError(f"policy must be a SequencePolicy or MLPSequencePolicy, "
                         f"got {type(policy).__name__}")


@float64
def token_scores(policy, params=None) -> jnp.ndarray:
    """Per-token scores ``grad log pi(y_t | x, y_<t)``, shape (P, K, T, D) (0 on padding)."""
    _check_seq(policy)
    theta = policy.params if params is None else params
    jac = jax.jacfwd(policy.token_log_probs)(theta)
    return jac.reshape(*jac.shape[:3], -1)


@float64
def token_advantages(adv, lengths, horizon: int) -> jnp.ndarray:
    """Outcome-reward credit: token t of response i gets ``A_i`` if ``t < L_i`` else 0.

    ``adv`` and ``lengths`` have shape (..., G); returns (..., G, horizon).
    """
    adv = jnp.asarray(adv, dtype=jnp.float64)
    lengths = jnp.asarray(lengths)
    if adv.shape != lengths.shape:
        raise ValueError(f"lengths must have the shape of adv {adv.shape}, got {lengths.shape}")
    V.positive_int("horizon", horizon, 1)
    mask = jnp.arange(horizon) < lengths[..., None]
    return jnp.where(mask, adv[..., None], 0.0)


@float64
def token_level_gradient(policy, prompt: int, responses, adv, params=None) -> jnp.ndarray:
    r"""``sum_i sum_t A_{i,t} grad log pi(y_{i,t} | .)`` by reverse-mode autodiff of the token loss.

    This is how a training framework computes the gradient: a per-token surrogate
    ``sum_{i,t} A_{i,t} log pi(y_{i,t})`` with ``A_{i,t} = A_i`` (:func:`token_advantages`).
    ``responses`` are indices into ``policy.responses`` (G,). Returns (D,).
    """
    _check_seq(policy)
    theta = policy.params if params is None else params
    responses = jnp.asarray(responses)
    tok_adv = token_advantages(adv, jnp.asarray(policy.lengths)[responses], policy.horizon)

    def surrogate(th):
        tlp = policy.token_log_probs(th)[prompt, responses]  # (G, T)
        return jnp.sum(tok_adv * tlp)

    return jax.grad(surrogate)(theta).reshape(-1)


@float64
def sequence_level_gradient(policy, prompt: int, responses, adv, params=None) -> jnp.ndarray:
    """``sum_i A_i s(x, y_i)`` from the sequence scores, (D,)."""
    _check_seq(policy)
    s = policy.scores(params)[prompt, jnp.asarray(responses)]
    return jnp.asarray(adv) @ s


# --- binary-reward identity -------------------------------------------------------------------


@float64
def group_gradient(scores, adv) -> jnp.ndarray:
    """One group's estimate ``(1/G) sum_i A_i s_i``; ``scores`` (..., G, D), ``adv`` (..., G)."""
    return jnp.einsum("...g,...gd->...d", adv, scores) / adv.shape[-1]


@float64
def class_mean_scores(scores, z):
    """Mean score of correct (z = 1) and of incorrect (z = 0) responses; 0 for an empty class."""
    z = jnp.asarray(z, dtype=jnp.float64)
    n1 = jnp.sum(z, axis=-1, keepdims=True)
    n0 = z.shape[-1] - n1
    m1 = jnp.einsum("...g,...gd->...d", z, scores) / jnp.maximum(n1, 1.0)
    m0 = jnp.einsum("...g,...gd->...d", 1.0 - z, scores) / jnp.maximum(n0, 1.0)
    return m1, m0


@float64
def binary_scalar(k, G: int, kind: str = "mean", ddof: int = 1, eps: float = 0.0):
    r"""Closed-form ``c(k, G)`` with ``ghat = c (sbar_+ - sbar_-)`` (module docstring).

    ``kind``: ``"mean"`` (``Z - Zbar``), ``"loo"`` (``Z - Zbar_(-g)``), ``"std"``
    (``(Z - Zbar)/(sd_ddof + eps)``). 0 when k is 0 or G (no gradient).
    """
    V.positive_int("G", G, 2)
    if kind not in ("mean", "loo", "std"):
        raise ValueError(f"kind must be 'mean', 'loo' or 'std', got {kind!r}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
    if not (np.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    k = jnp.asarray(k, dtype=jnp.float64)
    if bool(jnp.any((k < 0) | (k > G))):
        raise ValueError(f"k must lie in 0..G={G}")
    kk = k * (G - k)
    if kind == "mean":
        c = kk / G**2
    elif kind == "loo":
        c = kk / (G * (G - 1))
    else:
        sd = jnp.sqrt(kk / (G * (G - ddof)))
        c = jnp.where(kk > 0, kk / G**2 / jnp.where(kk > 0, sd + eps, 1.0), 0.0)
    return c


@float64
def binary_scalar_from_estimator(estimator, G: int, k: int) -> float:
    """``c(k, G) = k a1 / G`` read off any registry estimator (checks the zero-sum premise)."""
    est = get_estimator(estimator)
    V.positive_int("G", G, max(2, est.min_group_size))
    if not (0 < k < G):
        return 0.0
    z = jnp.asarray([1.0] * k + [0.0] * (G - k))
    a = est.advantage(z[None], PromptContext(prompt=jnp.zeros(1, int)))[0]
    if abs(float(jnp.sum(a))) > 1e-9 * max(1.0, float(jnp.max(jnp.abs(a)))):
        raise ValueError(f"estimator {est.name!r} advantages do not sum to zero over the group")
    return float(k * a[0] / G)


# --- effective rank ---------------------------------------------------------------------------


def rank_measures_from_gram(gram, energy: float = 0.9) -> np.ndarray:
    """Rank measures from Gram matrices ``M M^T`` (..., n, n): ``sigma^2`` are their eigenvalues.

    Returns (..., 3): entropy effective rank ``exp(H(sigma / sum sigma))`` (Roy & Vetterli),
    participation ratio ``(sum sigma^2)^2 / sum sigma^4`` and the number of components holding
    ``energy`` of ``sum sigma^2``; NaN for a zero matrix. Eigenvalues by NumPy's LAPACK (batched).
    """
    if not 0 < energy <= 1:
        raise ValueError(f"energy must lie in (0, 1], got {energy!r}")
    gram = np.asarray(gram, dtype=np.float64)
    e2 = np.clip(np.linalg.eigvalsh(0.5 * (gram + np.swapaxes(gram, -1, -2))), 0.0, None)
    e2 = np.sort(e2, axis=-1)[..., ::-1]
    tot2 = e2.sum(-1, keepdims=True)
    scale = np.where(tot2 > 0, tot2, 1.0)
    e2 = np.where(e2 > 1e-13 * scale, e2, 0.0)  # round-off floor of the eigen-solver
    sv = np.sqrt(e2)
    tot = sv.sum(-1, keepdims=True)
    ok = tot[..., 0] > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        p = sv / np.where(tot > 0, tot, 1.0)
        ent = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
        pr = e2.sum(-1) ** 2 / np.where(ok, np.sum(e2**2, -1), 1.0)
        cum = np.cumsum(e2, -1) / np.where(tot2 > 0, tot2, 1.0)
    n_e = np.sum(cum < energy - 1e-12, axis=-1) + 1.0
    out = np.stack([np.exp(ent), pr, n_e], axis=-1)
    return np.where(ok[..., None], out, np.nan)


@float64
def rank_measures(M, energy: float = 0.9) -> np.ndarray:
    """``[entropy effective rank, participation ratio, #components for energy]`` of M (..., m, n).

    Singular values of M (via the smaller Gram matrix); NaN for a zero matrix.
    """
    M = np.asarray(M, dtype=np.float64)
    if M.ndim < 2:
        raise ValueError(f"M must be a matrix (or a stack of matrices), got shape {M.shape}")
    gram = M @ np.swapaxes(M, -1, -2) if M.shape[-2] <= M.shape[-1] else (
        np.swapaxes(M, -1, -2) @ M)
    return rank_measures_from_gram(gram, energy)


@float64
def response_matrix(scores, adv) -> jnp.ndarray:
    """Per-response gradient matrix ``diag(A) S``: rows ``A_i s_i``, shape (..., G, D)."""
    return adv[..., None] * scores


@float64
def class_aggregate_matrix(scores, adv, z) -> jnp.ndarray:
    """Rows ``sum_{z_i=1} A_i s_i`` and ``sum_{z_i=0} A_i s_i`` (..., 2, D); rank <= 2."""
    z = jnp.asarray(z, dtype=jnp.float64)
    pos = jnp.einsum("...g,...gd->...d", adv * z, scores)
    neg = jnp.einsum("...g,...gd->...d", adv * (1 - z), scores)
    return jnp.stack([pos, neg], axis=-2)


@float64
def class_plane_energy(M, m1, m0) -> jnp.ndarray:
    """Share of ``||M||_F^2`` (rows of M (..., G, D)) lying in span{m1, m0}; NaN for M = 0.

    Closed-form 2 x 2 projection (no LAPACK call, so it runs inside jit/vmap/scan).
    """
    a, b, c = (jnp.sum(m1 * m1, -1), jnp.sum(m1 * m0, -1), jnp.sum(m0 * m0, -1))
    r1 = jnp.einsum("...gd,...d->...g", M, m1)
    r0 = jnp.einsum("...gd,...d->...g", M, m0)
    det = a * c - b**2
    full = det > 1e-12 * jnp.maximum(a * c, 1e-300)
    safe = jnp.where(full, det, 1.0)
    e_full = jnp.sum(c[..., None] * r1**2 - 2 * b[..., None] * r1 * r0
                     + a[..., None] * r0**2, -1) / safe
    # degenerate plane: project on the non-zero (or common) direction
    use1 = a >= c
    nn = jnp.where(use1, a, c)
    rr = jnp.where(use1[..., None], r1, r0)
    e_line = jnp.where(nn > 0, jnp.sum(rr**2, -1) / jnp.where(nn > 0, nn, 1.0), 0.0)
    tot = jnp.sum(M**2, axis=(-2, -1))
    proj = jnp.where(full, e_full, e_line)
    return jnp.where(tot > 1e-300, proj / jnp.where(tot > 1e-300, tot, 1.0), jnp.nan)


# --- rank study -------------------------------------------------------------------------------


def _group_grams(scores_g, adv, z, weight_block=None):
    """Gram matrices of one group's per-response, class-aggregate (and weight) matrices and the
    class-plane energy (matmuls only: safe inside jit/vmap/scan)."""
    M = response_matrix(scores_g, adv)
    m1, m0 = class_mean_scores(scores_g, z)
    C = class_aggregate_matrix(scores_g, adv, z)
    out = dict(resp=M @ M.T, cls=C @ C.T, plane=class_plane_energy(M, m1, m0))
    if weight_block is not None:
        W = weight_block(group_gradient(scores_g, adv))
        out["weight"] = W @ W.T if W.shape[0] <= W.shape[1] else W.T @ W
    return out


@partial(jax.jit, static_argnames=("estimator", "n_groups", "G", "weight_block"))
def _rank_batch(key, problem, estimator, n_groups, G, weight_block=None):
    x, y, z = sample_groups(key, problem, n_groups, G)
    ctx = PromptContext(prompt=x, value=problem.values()[x],
                        optimal_baseline=problem.optimal_baselines()[x])
    adv = estimator.advantage(z, ctx)
    sc = problem.scores[x[:, None], y]  # (n, G, D)
    grams = jax.vmap(lambda s, a, zz: _group_grams(s, a, zz, weight_block))(sc, adv, z)
    mixed = (jnp.sum(z, axis=1) > 0) & (jnp.sum(z, axis=1) < G)
    ys = jnp.sort(y, axis=1)
    n_distinct = jnp.sum(ys[:, 1:] != ys[:, :-1], axis=1) + 1
    return grams, mixed, n_distinct


def _measures_table(grams) -> dict:
    """Named per-group measures (numpy) from the Gram matrices returned by the jitted code."""
    out = {}
    for key, prefix in (("resp", "resp"), ("cls", "class"), ("weight", "weight")):
        if key in grams:
            m = rank_measures_from_gram(np.asarray(grams[key]))
            for i, f in enumerate(RANK_FIELDS):
                out[f"{prefix}_{f}"] = m[..., i]
    out["plane_energy"] = np.asarray(grams["plane"])
    return out


@V.renamed_arguments(G="group_size")
@float64
def rank_study(policy, group_size: int, n_groups: int = 2000, seed: int = 0,
               estimator="grpo_std", weight: str | None = None, *, key=None) -> dict:
    """Monte Carlo effective-rank measures of GRPO gradient matrices for one policy and G.

    Draws ``n_groups`` groups (prompt ~ f, G responses, binary rewards); for every group with
    mixed rewards computes the rank measures (:func:`rank_measures_from_gram`) of ``diag(A) S``
    and of the class aggregates, :func:`class_plane_energy` and (``weight="W1"`` or ``"W2"`` for
    an :class:`MLPSequencePolicy`) those of the group's weight-gradient matrix. Returns means and
    standard errors over mixed groups, the mixed-group fraction, the mean number of distinct
    responses in a group, and the exact response entropy and value (``G``: the group size).
    ``key`` (a JAX key or an integer) overrides the integer ``seed``.
    """
    G = V.positive_int("group_size", group_size, 2)
    V.positive_int("n_groups", n_groups, 2)
    est = get_estimator(estimator)
    problem = as_problem(policy)
    wb = None
    if weight is not None:
        if not isinstance(policy, MLPSequencePolicy):
            raise ValueError("weight needs an MLPSequencePolicy")
        wb = _WeightBlock(policy, weight)
    grams, mixed, nd = _rank_batch(V.random_key(seed, key), problem, est, n_groups, G, wb)
    mixed = np.asarray(mixed)
    out = dict(G=G, n_groups=n_groups, mixed_frac=float(mixed.mean()),
               n_mixed=int(mixed.sum()), distinct=float(np.asarray(nd)[mixed].mean()),
               entropy=float(problem.prompt_probs @ sequence_entropy(problem)),
               value=float(problem.objective()))
    for name, vals in _measures_table(grams).items():
        v = vals[mixed]
        v = v[np.isfinite(v)]
        out[name] = float(v.mean()) if v.size else float("nan")
        out[name + "_se"] = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
    return out


class _WeightBlock:
    """Hashable (static) reshaper of a flat gradient to one MLP weight matrix."""

    def __init__(self, policy: MLPSequencePolicy, name: str):
        if name not in policy.shapes or len(policy.shapes[name]) != 2:
            raise ValueError(f"weight must be a matrix parameter (W1 or W2), got {name!r}")
        self.policy, self.name = policy, name

    def __call__(self, flat):
        return self.policy.block(flat, self.name)

    def _key(self):
        return (tuple(self.policy.shapes.items()), self.name)

    def __eq__(self, other):  # equal reshapers share one compiled function
        return isinstance(other, _WeightBlock) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


# --- sparsity ---------------------------------------------------------------------------------


@V.renamed_arguments(G="group_size")
@float64
def zero_advantage_probability(value, group_size: int):
    """P(all G binary rewards equal) = ``V^G + (1 - V)^G`` (no gradient from the group)."""
    G = V.positive_int("group_size", group_size, 1)
    v = jnp.asarray(value, dtype=jnp.float64)
    if bool(jnp.any((v < 0) | (v > 1))):
        raise ValueError("value must lie in [0, 1]")
    return v**G + (1 - v) ** G


@float64
def zero_group_fraction(z) -> jnp.ndarray:
    """Fraction of groups (rows of z (..., G)) whose rewards are all equal."""
    z = jnp.asarray(z)
    return jnp.mean(jnp.all(z == z[..., :1], axis=-1))


# --- training: sparsity and rank along a GRPO run ---------------------------------------------


@V.renamed_arguments(G="group_size")
@float64
def train_grpo_records(policy, n_steps: int, batch_size: int, group_size: int, lr: float, seeds,
                       estimator="grpo_std", weight: str | None = None):
    """Plain GRPO ascent ``theta += lr * ghat``: a use of
    :func:`grpo_theory.optim.train.make_train` (``lax.scan`` over steps, ``vmap`` over seeds).

    Args:
        policy: an enumerable policy (e.g. :class:`MLPSequencePolicy`).
        n_steps, batch_size, group_size, lr: steps, prompts per step (B), G, constant step
            size.
        seeds: integer seeds, one run each.
        estimator: registry name (``"optimal"`` uses the exact ``b*(x)``).
        weight: ``"W1"`` or ``"W2"`` to also record the weight-gradient matrix's rank.
    Returns:
        Arrays (S, n_steps), recorded before each step: exact J, entropy, the observed
        zero-advantage group fraction, the exact expected fraction ``mean_b q(x_b)`` with
        ``q = V^G + (1-V)^G`` for the sampled prompts, and the mean rank measures of the mixed
        groups (resp_erank, plane_energy, and weight_erank when ``weight`` is given).
    """
    from ..optim import TrainConfig, seed_keys, train_batch

    G = V.positive_int("group_size", group_size, 2)
    est = get_estimator(estimator)
    cfg = TrainConfig(batch_size=batch_size, group_size=G, n_steps=n_steps, lr=lr)
    wb = _WeightBlock(policy, weight) if weight is not None else None
    _, keys = seed_keys(seeds)
    rec = dict(train_batch(_RecordedPolicy(policy, wb), est, cfg, keys,
                           sup_objective=0.0).records)
    grams = rec.pop("grams")
    mixed = np.asarray(rec.pop("mixed"))  # (S, n_steps, B)
    out = {k: np.asarray(v) for k, v in rec.items()}
    for name, vals in _measures_table(grams).items():
        ok = mixed & np.isfinite(vals)
        with np.errstate(invalid="ignore"):
            out[name] = np.where(ok.any(-1), np.sum(np.where(ok, vals, 0.0), -1)
                                 / np.maximum(ok.sum(-1), 1), np.nan)
    return out


class _RecordedPolicy(PolicyWrapper):
    """An enumerable policy plus the per-step records of :func:`train_grpo_records` (the
    ``step_record`` hook of the training loop); a pytree (the policy traced, the weight block
    static), so policies of equal shapes share one compiled loop."""

    def __init__(self, policy, weight_block=None):
        super().__init__(policy)
        self.weight_block = weight_block

    def step_record(self, dp, x, y, z, adv):
        G = z.shape[-1]
        vals = dp.values()
        sc = dp.scores[x[:, None], y]
        grams = jax.vmap(lambda s, a, zz: _group_grams(s, a, zz, self.weight_block))(sc, adv, z)
        mixed = (jnp.sum(z, 1) > 0) & (jnp.sum(z, 1) < G)
        return dict(J=dp.objective(), entropy=dp.prompt_probs @ sequence_entropy(dp),
                    zero_obs=1.0 - jnp.mean(mixed),
                    zero_exact=jnp.mean(vals[x] ** G + (1 - vals[x]) ** G),
                    mixed=mixed, grams=grams)


# --- when is the group mean the optimal baseline? ----------------------------------------------


@float64
def baseline_comparison(policy, group_sizes=(2, 4, 8, 16, 32, 64)) -> list[dict]:
    r"""Exact MSE (B = 1) of the oracle ``V(x)``, the MSE-optimal ``b*(x)``, GRPO (LOO) and the
    self-inclusive group mean, for each G, with the exact gap

    .. math:: \mathrm{MSE}(V) - \mathrm{MSE}(b^*) = E_X\big[E[\|s\|^2|X]\,(V(X) - b^*(X))^2\big] / G

    (the MSE of ``A = Z - b`` is quadratic in b with minimiser b*, Greensmith et al.).
    ``within_ratio_grpo_optimal`` compares the within-prompt parts (MSE minus the between-prompt
    term ``E_X||g(X) - g||^2``, common to all estimators).
    """
    problem = as_problem(policy)
    v = np.asarray(problem.values())
    bstar = np.asarray(problem.optimal_baselines())
    ess = np.asarray(problem.mean_score_sq_norm())
    f = np.asarray(problem.prompt_probs)
    gap_num = float(f @ (ess * (v - bstar) ** 2))
    gp = np.asarray(problem.prompt_gradients())
    c1 = float(f @ np.sum((gp - f @ gp) ** 2, axis=1))  # between-prompt part, same for all
    rows = []
    for G in group_sizes:
        r = dict(G=int(G))
        for name in ("oracle", "optimal", "grpo", "grpo_mean"):
            r[f"mse_{name}"] = float(exact_mse(problem, name, int(G)))
        r["gap_predicted"] = gap_num / G
        r["gap_measured"] = r["mse_oracle"] - r["mse_optimal"]
        r["ratio_grpo_optimal"] = r["mse_grpo"] / r["mse_optimal"]
        r["ratio_grpo_oracle"] = r["mse_grpo"] / r["mse_oracle"]
        r["between_prompt"] = c1
        r["within_ratio_grpo_optimal"] = (r["mse_grpo"] - c1) / (r["mse_optimal"] - c1)
        r["max_abs_V_minus_bstar"] = float(np.max(np.abs(v - bstar)))
        rows.append(r)
    return rows


@float64
def score_reward_correlation(problem) -> np.ndarray:
    """Per-prompt correlation of ``||s||^2`` and the reward mean under pi (Assumption 2 check)."""
    problem = as_problem(problem)
    p = np.asarray(problem.probs)
    a = np.asarray(problem.score_sq_norms())
    m = np.asarray(problem.reward_means)
    ea, em = np.sum(p * a, 1), np.sum(p * m, 1)
    cov = np.sum(p * (a - ea[:, None]) * (m - em[:, None]), 1)
    va = np.sum(p * (a - ea[:, None]) ** 2, 1)
    vm = np.sum(p * (m - em[:, None]) ** 2, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return cov / np.sqrt(va * vm)
