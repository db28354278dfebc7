"""Monte Carlo gradient estimates per second: grpo-theory's engine vs a strong NumPy program.

Both sides do the same work: R replicates of B prompts x G responses from
``grpo_theory.problems.default_bandit()``, leave-one-out (GRPO) advantages, the estimate
(1/BG) sum A s and its squared error against the exact gradient, summarised by running sums.

The NumPy program is the strong one: PCG64 ``default_rng``, all replicates of a chunk at once,
inverse-CDF sampling with ONE ``searchsorted`` over the prompts' CDFs laid end to end, advantages
for all replicates at once, the advantages scattered into per-(prompt, response) weights with
``np.bincount`` and ONE ``(R, P*K) @ (P*K, D)`` matmul. It draws 1 + 2G uniforms per group.

Printed per (B, G) and engine route: engine time, NumPy time and their ratio, measured in the
same run two ways, best of ``--repeat`` each: interleaved (each call right after the other
programs') and consecutive (each program's calls back to back); and each side's time relative to
drawing its own random numbers alone (``jax.random.uniform`` / ``bits`` of the same count, dtype, key
implementation and chunking; ``rng.random`` for NumPy).

    python benchmarks/bench_mc_gradients.py [--reps 200000] [--repeat 5] [--csv out.csv]
"""

from __future__ import annotations

import os

# NumPy's BLAS on one thread unless the caller says otherwise: the NumPy program's products are
# (20,000 x 24) @ (24 x 24), which one thread did faster (measured), and OpenBLAS's idle worker
# threads spin after each product on the cores the next program is timed on.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import grpo_theory as gt  # noqa: E402
from grpo_theory.core import montecarlo as mc  # noqa: E402
from grpo_theory.problems import default_bandit  # noqa: E402

NP_CHUNK = 20_000


def numpy_strong(problem, B, G, R, seed, chunk=NP_CHUNK):
    """Strong vectorised NumPy MSE of the GRPO (leave-one-out) estimator; returns (mse, se)."""
    rng = np.random.default_rng(seed)
    f = np.asarray(problem.prompt_probs)
    pi = np.asarray(problem.probs)
    mu = np.asarray(problem.reward_means).reshape(-1)
    P, K = pi.shape
    S = np.asarray(problem.scores).reshape(P * K, -1)
    g = np.asarray(problem.gradient())
    cdf_f = np.cumsum(f)
    cdf_flat = (np.cumsum(pi, axis=1) + np.arange(P)[:, None]).reshape(-1)  # row p shifted by p
    s1 = s2 = 0.0
    for start in range(0, R, chunk):
        r = min(chunk, R - start)
        x = np.minimum(np.searchsorted(cdf_f, rng.random((r, B)), side="right"), P - 1)
        lo = x[..., None] * K
        cell = np.searchsorted(cdf_flat, rng.random((r, B, G)) + x[..., None], side="right")
        cell = np.clip(cell, lo, lo + K - 1)  # prompt x's cells are x*K .. x*K + K - 1
        z = rng.random((r, B, G)) < mu[cell]
        adv = z - (z.sum(-1, keepdims=True) - z) / (G - 1)
        idx = (np.arange(r)[:, None, None] * (P * K) + cell).ravel()
        W = np.bincount(idx, weights=adv.ravel(), minlength=r * P * K).reshape(r, P * K)
        e2 = np.sum((W @ S / (B * G) - g) ** 2, axis=1)
        s1 += e2.sum()
        s2 += (e2**2).sum()
    mse = s1 / R
    return mse, np.sqrt(max(s2 / R - mse**2, 0.0) / (R - 1))


def numpy_draws(rng, R, per_rep, chunk=NP_CHUNK):
    """NumPy's own random numbers alone: PCG64 doubles in the chunks ``numpy_strong`` uses."""
    total = 0.0
    for start in range(0, R, chunk):
        total += rng.random((min(chunk, R - start), per_rep)).sum()
    return total


def _jax_draws(R, B, G, chunk, rng, dtype, per_group):
    """Jitted: draw exactly the engine's uniforms (same chunks, key impl, dtype), reduce them."""
    n_chunks = -(-R // chunk)
    shape = (chunk, B, per_group)

    @jax.jit
    def draw(key):
        def body(c, i):
            k = jax.random.fold_in(key, i)
            if rng == "splitmix":
                u = mc.splitmix_uniforms(k, shape, dtype).astype(jnp.float64)
            elif dtype == jnp.uint32:
                u = jax.random.bits(k, shape, jnp.uint32).astype(jnp.float64) * 2.0**-32
            else:
                u = jax.random.uniform(k, shape, dtype=dtype).astype(jnp.float64)
            return c + jnp.sum(u), None
        return jax.lax.scan(body, jnp.zeros(()), jnp.arange(n_chunks))[0]

    return draw, mc._rng_key(1, None, rng)


def _best(fns, repeat):
    """Interleaved best-of-``repeat`` wall times of several callables (after one warm-up each)."""
    for fn in fns:
        fn()
    best = [np.inf] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def _best_consecutive(fns, repeat):
    """Best-of-``repeat`` wall times, each callable's calls back to back (``timeit``'s way)."""
    best = []
    for fn in fns:
        fn()
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        best.append(min(ts))
    return best


ROUTES = {  # name -> mc_mse keyword arguments (the default: rbg bits, float64, joint sampler,
    # route "auto": each group's cell counts for a rewards-only estimator such as GRPO's)
    "default": {},
    "responses": dict(route="responses"),
    "splitmix_responses": dict(rng="splitmix", route="responses"),
    "threefry": dict(rng="threefry"),
    "uint32": dict(uniforms="uint32"),
    "float32": dict(uniforms="float32"),
    "separate": dict(sampler="separate"),
    "unsafe_rbg": dict(rng="unsafe_rbg"),
    "splitmix": dict(rng="splitmix"),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--routes", default="default,splitmix,threefry,float32,separate")
    ap.add_argument("--shapes", default="1x8,8x8,4x64", help="B x G pairs, comma-separated")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--md", default=None, help="write the table, machine, load and command here")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    problem = default_bandit().problem()
    R = args.reps
    rows = []
    with jax.enable_x64(True):
        for B, G in [tuple(int(v) for v in bg.split("x")) for bg in args.shapes.split(",")]:
            rng_np = np.random.default_rng(0)
            for route in args.routes.split(","):
                kw = ROUTES[route]
                sampler = kw.get("sampler", "joint")
                per_group = G + 1 if sampler == "joint" else 2 * G + 1
                dtype = jnp.dtype(kw.get("uniforms", mc.DEFAULT_UNIFORMS))
                per_rep = mc._per_rep_bytes(problem, B, G, sampler, False)
                chunk = int(max(1, min(R, mc._CHUNK_BYTES // per_rep)))
                draw, key = _jax_draws(R, B, G, chunk, kw.get("rng", mc.DEFAULT_RNG), dtype,
                                       per_group)

                def run_engine():
                    return gt.mc_mse(problem, "grpo", G, B, n_reps=R, seed=1, **kw).mse

                run_numpy = lambda: numpy_strong(problem, B, G, R, 1)  # noqa: E731
                t_eng, t_np, t_draw, t_npdraw = _best(
                    [run_engine, run_numpy,
                     lambda: float(draw(key)), lambda: numpy_draws(rng_np, R, B * (1 + 2 * G))],
                    args.repeat)
                c_eng, c_np = _best_consecutive([run_engine, run_numpy], args.repeat)
                r = gt.mc_mse(problem, "grpo", G, B, n_reps=R, seed=1, **kw)
                m_np, se_np = numpy_strong(problem, B, G, R, 1)
                exact = float(gt.exact_mse(problem, "grpo", G, B))
                rows.append(dict(
                    B=B, G=G, route=route, reps=R, engine_s=t_eng, numpy_s=t_np,
                    ratio=t_np / t_eng, engine_consecutive_s=c_eng, numpy_consecutive_s=c_np,
                    ratio_consecutive=c_np / c_eng, engine_over_own_draws=t_eng / t_draw,
                    jax_draw_s=t_draw, numpy_draw_s=t_npdraw,
                    numpy_over_own_draws=t_np / t_npdraw,
                    engine_z=(r.mse - exact) / r.se, numpy_z=(m_np - exact) / se_np))
                print(f"B={B} G={G} {route:9s} engine {t_eng:.3f}s numpy {t_np:.3f}s "
                      f"ratio {t_np / t_eng:.2f}x (consecutive {c_np / c_eng:.2f}x) "
                      f"engine/own-draws {t_eng / t_draw:.2f}", flush=True)
    df = pd.DataFrame(rows)
    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"jax {jax.__version__} on {jax.devices()[0]}, numpy {np.__version__}, "
          f"grpo-theory {gt.__version__}")
    with pd.option_context("display.width", 250, "display.float_format", "{:.3g}".format):
        print(df.to_string(index=False))
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.md:
        _write_md(args, df, load0, os.getloadavg())
    return df


def _write_md(args, df, load0, load1):
    """The table as markdown with the machine, its load and the command (``--md``)."""
    import sys

    cmd = "python benchmarks/bench_mc_gradients.py " + " ".join(sys.argv[1:])
    rows = ["| B | G | route | engine s | NumPy s | NumPy / engine | engine s, consecutive | "
            "NumPy s, consecutive | NumPy / engine, consecutive | engine / its own draws | "
            "JAX draws s | NumPy draws s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        rows.append(f"| {r.B} | {r.G} | {r.route} | {r.engine_s:.3f} | {r.numpy_s:.3f} | "
                    f"**{r.ratio:.1f}x** | {r.engine_consecutive_s:.3f} | "
                    f"{r.numpy_consecutive_s:.3f} | **{r.ratio_consecutive:.1f}x** | "
                    f"{r.engine_over_own_draws:.2f} | {r.jax_draw_s:.3f} | {r.numpy_draw_s:.3f} |")
    text = "\n".join([
        "# Monte Carlo gradient MSE: the engine against a strong NumPy program", "",
        f"`{cmd}`: default bandit (P = 4, K = 6, D = 24), GRPO (leave-one-out), R = {args.reps:,} "
        f"replicates. Each time is the best of {args.repeat} calls after one warm-up call: "
        "interleaved (engine, NumPy, the two draw programs, in turn: each call follows the "
        "others' work) and consecutive (each program's calls back to back, as `timeit` runs "
        "them).", "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, jax {jax.__version__} on {jax.devices()[0]}, numpy "
        f"{np.__version__} (OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}), "
        f"grpo-theory {gt.__version__}. Load average at start "
        f"{load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f}, at the end {load1[0]:.2f} "
        "(1/5/15 min; 2 cores: above 2 the cores are shared with other jobs).", "",
        "`engine / its own draws`: the engine's time over the time to draw its random numbers "
        "alone (the same count, dtype, key implementation and chunks): the fraction of the "
        "random-number limit is its inverse.", "", *rows, ""])
    with open(args.md, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
