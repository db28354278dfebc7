"""Monte Carlo gradient estimates per second: grpo-theory's jit+vmap engine vs plain NumPy.

Both sides do the same work: R replicates of B prompts x G responses from the default bandit,
leave-one-out (GRPO) advantages, the estimate (1/BG) sum A s, and its squared error against the
exact gradient. The NumPy reference is vectorised over replicates (inverse-CDF sampling with
``searchsorted``, gathered scores, ``einsum``), so the ratio measures the engine, not a Python
loop. Reported: estimates/s for each and the ratio, measured in the same run.

    python benchmarks/bench_mc_gradients.py [--reps 200000] [--repeat 3] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory.problems import default_bandit


def numpy_reference(problem, B, G, R, seed, chunk=20_000):
    rng = np.random.default_rng(seed)
    f = np.asarray(problem.prompt_probs)
    pi = np.asarray(problem.probs)
    mu = np.asarray(problem.reward_means)
    S = np.asarray(problem.scores)
    g = np.asarray(problem.gradient())
    cdf_f, cdf_pi = np.cumsum(f), np.cumsum(pi, axis=1)
    err = np.empty(R)
    for start in range(0, R, chunk):  # chunks bound memory; each chunk is fully vectorised
        r = min(chunk, R - start)
        x = np.minimum(np.searchsorted(cdf_f, rng.random((r, B))), len(f) - 1)
        u = rng.random((r, B, G))
        y = (u[..., None] > cdf_pi[x][:, :, None, :]).sum(-1)
        y = np.minimum(y, pi.shape[1] - 1)
        z = (rng.random((r, B, G)) < mu[x[..., None], y]).astype(float)
        adv = z - (z.sum(-1, keepdims=True) - z) / (G - 1)
        est = np.einsum("rbg,rbgd->rd", adv, S[x[..., None], y]) / (B * G)
        err[start:start + r] = np.sum((est - g) ** 2, axis=1)
    return err.mean()


def time_it(fn, repeat):
    fn()  # warm-up (jit compile for the JAX side)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    problem = default_bandit().problem()
    rows = []
    for B, G in [(1, 8), (8, 8), (4, 64)]:
        R = args.reps
        t_jax = time_it(lambda: gt.mc_mse(problem, "grpo", G, B, n_reps=R, seed=1).mse, args.repeat)
        t_np = time_it(lambda: numpy_reference(problem, B, G, R, 1), args.repeat)
        mse_j = gt.mc_mse(problem, "grpo", G, B, n_reps=R, seed=1).mse
        mse_n = numpy_reference(problem, B, G, R, 1)
        rows.append(dict(B=B, G=G, reps=R, jax_est_per_s=R / t_jax, numpy_est_per_s=R / t_np,
                         speedup=t_np / t_jax, jax_mse=mse_j, numpy_mse=mse_n,
                         exact_mse=gt.exact_mse(problem, "grpo", G, B),
                         device=str(jax.devices()[0]), machine=platform.processor() or "?",
                         version=gt.__version__))
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(df.to_string(index=False))
    if args.csv:
        df.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
