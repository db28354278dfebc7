r"""Coverage of the advisor's intervals on an enumerable policy (repeated, vmapped estimates).

Each repetition draws m prompts from the policy's prompt distribution and n responses each,
computes the unbiased estimates of :mod:`.estimate`, and records whether the 1 - alpha intervals
contain the exact c1, c2, c3 (:func:`grpo_theory.core.scaling.scaling_constants`) and
``G* = 1 + sqrt(c3/c1)``. Two interval methods for G*:

* ``"fieller"`` (the one :class:`~.estimate.ScalingEstimate` reports): Fieller's interval for
  c3/c1 with the jackknife covariance (:mod:`.intervals`);
* ``"bootstrap"``: the percentile interval of ``1 + sqrt(max(c3*, 0)/c1*)`` over ``n_boot``
  resamples of the m prompts with replacement (``inf`` where the resampled c1 is <= 0), the
  across-prompt term recomputed from the Gram matrix of the per-prompt means.

Repetitions run vmapped in memory-bounded batches (``jax.lax.map``); one compile per setting.

:func:`enumerated_expectation` is the exact check of unbiasedness: it enumerates every draw of
m prompts with n (response, reward) atoms each and returns ``E[theta-hat]`` next to the exact
``theta`` (to rounding, ``E[c-hat] = c``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from ..core import ResultMixin, as_problem, prompt_moments, sample_from_uniforms, scaling_constants
from .estimate import check_sizes
from .pieces import rollout_statistics, scaling_intervals, t_quantile
from .intervals import jackknife_cov


@dataclass(frozen=True)
class Coverage(ResultMixin):
    """Shares of repetitions whose intervals contain the exact values.

    The :class:`~grpo_theory.core.stats.Result` interface (``conf_int``, ``summary``) covers the
    Monte Carlo means of the c1, c2, c3 estimates over the repetitions (rows c1, c2, c3:
    ``mean -/+ z se_mean``), the check that the estimators are unbiased.

    Attributes:
        c: (3,) coverage of c1, c2, c3 (jackknife, t quantile).
        g_star: coverage of G* by the chosen method.
        unbounded: share of repetitions whose G* interval is unbounded above.
        mean: (3,) mean of the c1, c2, c3 estimates over the repetitions.
        se_mean: (3,) standard error of that mean.
        exact: (3,) exact c1, c2, c3; g_exact: exact 1 + sqrt(c3/c1).
        reps, n_prompts, n_samples, method: the settings.
    """

    c: np.ndarray
    g_star: float
    unbounded: float
    mean: np.ndarray
    se_mean: np.ndarray
    exact: np.ndarray
    g_exact: float
    reps: int
    n_prompts: int
    n_samples: int
    method: str

    def _params(self):
        return ("c1", "c2", "c3"), self.mean, self.se_mean, None


def _bootstrap_g(key, z, q, gram, n_boot, alpha):
    m = z.shape[0]
    idx = jax.random.randint(key, (n_boot, m), 0, m)

    def one(ii):
        g = gram[ii][:, ii]
        theta, _, _ = rollout_statistics(z[ii], q[ii], jnp.diag(g), g.sum(1))
        c1, c3 = theta[0], theta[2]
        return jnp.where(c1 > 0, 1 + jnp.sqrt(jnp.maximum(c3, 0) / jnp.where(c1 > 0, c1, 1)),
                         jnp.inf)

    gs = jax.vmap(one)(idx)
    return jnp.quantile(gs, alpha / 2), jnp.quantile(gs, 1 - alpha / 2)


def interval_coverage(policy, n_prompts: int = 40, n_samples: int = 8, reps: int = 200,
                      seed=0, alpha: float = 0.05, method: str = "fieller",
                      n_boot: int = 200, *, key=None) -> Coverage:
    """Coverage of the 1 - alpha intervals over ``reps`` independent estimates.

    Args:
        policy: an enumerable policy or :class:`~grpo_theory.DiscreteProblem` with c1 > 0.
        n_prompts, n_samples: m >= 3, n >= 3 per estimate.
        reps: repetitions (>= 2).
        seed: integer seed or JAX key.
        key: a JAX PRNG key (or an integer), used instead of ``seed`` when given.
        alpha: 1 - nominal coverage.
        method: ``"fieller"`` or ``"bootstrap"`` (G* only; c1, c2, c3 always jackknife).
        n_boot: bootstrap resamples per repetition.

    Returns:
        :class:`Coverage`.
    """
    m = V.integer("n_prompts", n_prompts)
    n = V.integer("n_samples", n_samples)
    check_sizes(m, n)
    reps = V.positive_int("reps", reps, 2)
    n_boot = V.positive_int("n_boot", n_boot, 2)
    if method not in ("fieller", "bootstrap"):
        raise ValueError(f"method must be 'fieller' or 'bootstrap', got {method!r}")
    key = V.key_or_seed(seed, "seed") if key is None else V.key_or_seed(key, "key")
    ex = scaling_constants(policy)
    if not ex.c1 > 0:
        raise ValueError(f"policy must have c1 > 0 for a finite G*, got c1 = {ex.c1!r}")
    exact = np.array([ex.c1, ex.c2, ex.c3])
    g_exact = 1.0 + float(np.sqrt(ex.c3 / ex.c1))
    qt = t_quantile(alpha, m)
    with jax.enable_x64(True):
        dp = as_problem(policy)

        def one(k):
            kx, ky, kz, kb = jax.random.split(k, 4)
            x, y, z = sample_from_uniforms(dp, jax.random.uniform(kx, (m,)),
                                           jax.random.uniform(ky, (m, n)),
                                           jax.random.uniform(kz, (m, n)))
            s = dp.scores[x[:, None], y]
            ghat = jnp.einsum("ai,aid->ad", z, s) / n
            q = jnp.sum(s * s, 2)
            gram = ghat @ ghat.T
            theta, loo, _ = rollout_statistics(z, q, jnp.diag(gram), gram.sum(1))
            r = scaling_intervals(theta, jackknife_cov(loo), qt)
            if method == "bootstrap":
                glo, ghi = _bootstrap_g(kb, z, q, gram, n_boot, alpha)
            else:
                glo, ghi = r["g_low"], r["g_high"]
            return r["c"], r["low"], r["high"], glo, ghi

        # vmapped in batches: the bootstrap's (n_boot, m, m) Gram gathers stay within memory
        per_rep = n_boot * m * m if method == "bootstrap" else m * (m + n * dp.dim)
        batch = int(max(1, min(reps, 2e8 // (8 * per_rep))))
        run = jax.jit(lambda keys: jax.lax.map(one, keys, batch_size=batch))
        c, lo, hi, glo, ghi = (np.asarray(a) for a in run(jax.random.split(key, reps)))
    cov_c = np.mean((lo <= exact) & (exact <= hi), axis=0)
    cov_g = float(np.mean((glo <= g_exact) & (g_exact <= ghi)))
    return Coverage(cov_c, cov_g, float(np.mean(np.isinf(ghi))), c.mean(0),
                    c.std(0, ddof=1) / np.sqrt(reps), exact, g_exact, reps, m, n, method)


def group_outcomes(policy, n_samples: int):
    """Every outcome of one prompt's group: a prompt and n (response, binary reward) atoms.

    Args:
        policy: an enumerable policy or :class:`~grpo_theory.DiscreteProblem` (P prompts,
            K responses: ``P (2K)^n`` outcomes).
        n_samples: n >= 1.

    Returns:
        ``(x (N,), prob (N,), z (N, n), sq_norms (N, n), ghat (N, D))`` with
        ``ghat = (1/n) sum_i z_i s_i``; the probabilities sum to one.
    """
    n = V.positive_int("n_samples", n_samples)
    with jax.enable_x64(True):
        dp = as_problem(policy)
        f, pi, mu, s = (np.asarray(a, np.float64) for a in
                        (dp.prompt_probs, dp.probs, dp.reward_means, dp.scores))
    P, K, D = s.shape
    total = P * (2 * K) ** n
    V.check_memory(f"the {total} group outcomes", 8.0 * total * (3 * n + D + 2),
                   "use fewer prompts, responses or samples")
    atoms = np.array(list(itertools.product(range(2 * K), repeat=n)), dtype=np.int64)
    y, z = atoms // 2, (atoms % 2).astype(np.float64)
    xs, ps, zs, qs, gs = [], [], [], [], []
    for x in range(P):
        pz = np.where(z == 1, mu[x, y], 1 - mu[x, y])
        ps.append(f[x] * np.prod(pi[x, y] * pz, axis=1))
        sc = s[x][y]  # (A, n, D)
        qs.append(np.sum(sc * sc, axis=2))
        gs.append(np.einsum("ai,aid->ad", z, sc) / n)
        xs.append(np.full(len(atoms), x))
        zs.append(z)
    return tuple(np.concatenate(a) for a in (xs, ps, zs, qs, gs))


def enumerated_expectation(policy, n_prompts: int = 3, n_samples: int = 3):
    """Exact ``E[theta-hat]`` over every draw of m prompts x n responses, and the exact theta.

    ``theta = (c1, c2, c3, c_v, ||grad J||^2)`` (:data:`~.estimate.PARAMETERS`). The expectation
    sums over all ``(P (2K)^n)^m`` outcomes (one compiled, vmapped pass per outcome of the last
    prompt), so keep the policy tiny.

    Args:
        policy: an enumerable policy or :class:`~grpo_theory.DiscreteProblem`.
        n_prompts: m >= 3; n_samples: n >= 3.

    Returns:
        ``(expected (5,), exact (5,))``.
    """
    m = V.integer("n_prompts", n_prompts)
    n = V.integer("n_samples", n_samples)
    check_sizes(m, n)
    x, pr, z, q, g = group_outcomes(policy, n)
    ng = len(pr)
    V.check_memory(f"the {ng ** m} outcomes of {m} groups", 8.0 * ng ** (m - 1) * (m * m + 16),
                   "use a smaller policy or fewer prompts / samples")
    with jax.enable_x64(True):
        gram = jnp.asarray(g @ g.T)
        zj, qj, prj = jnp.asarray(z), jnp.asarray(q), jnp.asarray(pr)
        head = jnp.asarray(np.array(list(itertools.product(range(ng), repeat=m - 1))))

        @jax.jit
        def given_last(c):
            def one(i):
                idx = jnp.concatenate([i, c[None]])
                gg = gram[idx][:, idx]
                theta, _, _ = rollout_statistics(zj[idx], qj[idx], jnp.diag(gg), gg.sum(1))
                return jnp.prod(prj[idx]) * theta
            return jnp.sum(jax.vmap(one)(head), axis=0)

        mean = np.sum([np.asarray(given_last(jnp.asarray(c))) for c in range(ng)], axis=0)
        dp = as_problem(policy)
        ex = scaling_constants(dp)
        mo = prompt_moments(dp)
        f = np.asarray(dp.prompt_probs)
        grad = np.asarray(dp.gradient())
        c_v = float(f @ np.asarray(mo.score_sq_z - mo.grad_sq))  # binary Z: Z^2 = Z
    return mean, np.array([ex.c1, ex.c2, ex.c3, c_v, float(grad @ grad)])
