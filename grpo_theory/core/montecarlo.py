r"""Monte Carlo engine: R replicates of B prompts x G responses, jit-compiled and vectorised.

One replicate draws ``x_b ~ f`` (b = 1..B), ``y_bg ~ pi(.|x_b)`` and ``Z_bg ~ Bernoulli(mu(x_b,
y_bg))``, forms the estimator's advantages ``A_bg`` and returns

.. math:: \hat g = \frac{1}{BG} \sum_{b,g} A_{bg}\, s(x_b, y_{bg}).

Replicates are ``vmap``-ed inside chunks and the chunks run under ``lax.scan``, so memory stays
O(chunk x D) whatever R is and there is no Python loop over replicates or samples. The summary
reports the mean, bias, trace covariance and the MSE ``E||ghat - grad J||^2`` with a normal 95%
confidence interval from the per-replicate squared errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .estimators import Estimator, PromptContext, get_estimator
from .policies import DiscreteProblem, as_problem
from .sampling import sample_from_uniforms, sample_groups

__all__ = ["estimate_gradient", "mc_estimates", "mc_mse", "MCResult",
           "summarize_squared_errors"]

Z95 = 1.959963984540054


def _context(problem: DiscreteProblem, x) -> PromptContext:
    return PromptContext(prompt=x, value=problem.values()[x],
                         optimal_baseline=problem.optimal_baselines()[x])


def estimate_gradient(problem: DiscreteProblem, estimator: Estimator, x, y, z) -> jnp.ndarray:
    """The estimate ``(1/BG) sum A_bg s(x_b, y_bg)`` from one sampled batch, shape (D,)."""
    b, g = z.shape
    adv = estimator.advantage(z, _context(problem, x))
    if b * g <= problem.n_prompts * problem.n_responses:
        return jnp.einsum("bg,bgd->d", adv, problem.scores[x[:, None], y]) / (b * g)
    weights = jnp.zeros(problem.probs.shape).at[x[:, None], y].add(adv) / (b * g)
    return jnp.einsum("pk,pkd->d", weights, problem.scores)


def _one_replicate(key, problem, estimator, batch_size, group_size):
    x, y, z = sample_groups(key, problem, batch_size, group_size)
    return estimate_gradient(problem, estimator, x, y, z)


@partial(jax.jit, static_argnames=("estimator", "batch_size", "group_size"))
def _estimates(keys, problem, estimator, batch_size, group_size):
    return jax.vmap(lambda k: _one_replicate(k, problem, estimator, batch_size, group_size))(keys)


@partial(jax.jit, static_argnames=("estimator", "batch_size", "group_size", "chunk", "n_chunks"))
def _summary_scan(key, mask, problem, estimator, batch_size, group_size, chunk, n_chunks):
    """Scan over chunks of replicates; returns per-replicate squared errors and running sums.

    Each chunk draws all its uniforms with one key (``fold_in(key, chunk index)``), then the
    replicates are vmapped: no per-replicate key splitting.
    """
    target = problem.gradient()
    mask = mask.reshape(-1, chunk)
    B, G = batch_size, group_size

    def one(ux, uy, uz):
        x, y, z = sample_from_uniforms(problem, ux, uy, uz)
        return estimate_gradient(problem, estimator, x, y, z)

    def body(carry, inp):
        i, m = inp
        kx, ky, kz = jax.random.split(jax.random.fold_in(key, i), 3)
        est = jax.vmap(one)(jax.random.uniform(kx, (chunk, B)), jax.random.uniform(ky, (chunk, B, G)),
                            jax.random.uniform(kz, (chunk, B, G)))
        err2 = jnp.sum((est - target) ** 2, axis=1)
        s, ss = carry
        s = s + jnp.sum(est * m[:, None], axis=0)
        ss = ss + jnp.sum(jnp.sum(est**2, axis=1) * m)
        return (s, ss), err2

    init = (jnp.zeros(problem.dim), jnp.zeros(()))
    (s, ss), err2 = jax.lax.scan(body, init, (jnp.arange(n_chunks), mask))
    return s, ss, err2.reshape(-1)


def _check_run(problem, est, group_size, batch_size, n_reps=None):
    V.group_run(est, group_size, batch_size)
    if n_reps is not None:
        V.positive_int("n_reps", n_reps, 2)


def mc_estimates(bandit, estimator, group_size: int, batch_size: int = 1, n_reps: int = 1000,
                 seed: int = 0, key=None) -> jnp.ndarray:
    """All R gradient estimates, shape (R, D) (use :func:`mc_mse` for large R)."""
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    _check_run(problem, est, group_size, batch_size, n_reps)
    key = jax.random.PRNGKey(seed) if key is None else key
    return _estimates(jax.random.split(key, n_reps), problem, est, batch_size, group_size)


@dataclass(frozen=True)
class MCResult:
    """Monte Carlo summary of R replicates (all in float64)."""

    estimator: str
    group_size: int
    batch_size: int
    n_reps: int
    seed: int
    mse: float
    se: float
    ci_low: float
    ci_high: float
    mean: np.ndarray  # (D,) Monte Carlo mean of the estimates
    bias: np.ndarray  # mean - grad J
    trace_cov: float  # tr Cov(ghat), unbiased (divides by R - 1)

    @property
    def bias_sq_norm(self) -> float:
        return float(np.sum(self.bias**2))

    def contains(self, value: float) -> bool:
        return self.ci_low <= value <= self.ci_high


def summarize_squared_errors(err2) -> tuple[float, float, float, float]:
    """Mean, standard error and normal 95% CI of per-replicate squared errors."""
    err2 = np.asarray(err2, dtype=np.float64)
    mse = float(err2.mean())
    se = float(err2.std(ddof=1) / np.sqrt(err2.size))
    return mse, se, mse - Z95 * se, mse + Z95 * se


def mc_mse(bandit, estimator, group_size: int, batch_size: int = 1, n_reps: int = 100_000,
           seed: int = 0, key=None, chunk: int | None = None) -> MCResult:
    """Monte Carlo MSE ``E||ghat - grad J||^2`` of an estimator with a 95% CI.

    ``bandit`` is any policy of :mod:`grpo_theory.policies` or a :class:`DiscreteProblem`;
    ``estimator`` a registry name or :class:`Estimator`. Deterministic for a given
    ``(seed, n_reps, chunk)``; ``chunk`` (replicates per vmapped block) defaults to a size that
    keeps memory near 64 MB.
    """
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    _check_run(problem, est, group_size, batch_size, n_reps)
    if chunk is None:
        per_rep = batch_size * group_size * (problem.dim + 4) + problem.probs.size * (
            problem.dim + 1)
        chunk = int(max(1, min(n_reps, 2**23 // max(per_rep, 1))))
    n_chunks = -(-n_reps // chunk)
    key = jax.random.PRNGKey(seed) if key is None else key
    mask = (jnp.arange(n_chunks * chunk) < n_reps).astype(jnp.float64)
    s, ss, err2 = _summary_scan(key, mask, problem, est, batch_size, group_size, chunk, n_chunks)
    err2 = np.asarray(err2)[:n_reps]
    mean = np.asarray(s) / n_reps
    trace_cov = (float(ss) - n_reps * float(mean @ mean)) / (n_reps - 1)
    mse, se, lo, hi = summarize_squared_errors(err2)
    return MCResult(est.name, group_size, batch_size, n_reps, seed, mse, se, lo, hi, mean,
                    mean - np.asarray(problem.gradient()), trace_cov)


from .._precision import scope_module as _scope  # noqa: E402

_scope(globals())
