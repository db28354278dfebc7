"""Benchmark of the small-LM stack on CPU: sampling tokens/s (KV cache vs full recompute) and
GRPO steps/s (sample + reward + update) at budgets N = B G.

Run: ``python benchmarks/bench_lm.py [--quick]``. Prints one line per measurement; times are
the median of ``--repeats`` runs after one warm-up (compilation) run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

import grpo_theory  # noqa: F401  (x64 on; the model itself runs in float32)
from grpo_theory.lm import model, policy, task
from grpo_theory.lm.training import grpo


def _time(fn, repeats):
    jax.block_until_ready(fn())
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller batches")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    cfg = model.ModelConfig()
    params = model.init_params(jax.random.PRNGKey(0), cfg)
    pol = policy.LMPolicy(params, model.make_apply(cfg), model.make_sampler(cfg))
    q = task.eval_set()
    n = 256 if args.quick else 1024
    print(f"model: d={cfg.d_model} L={cfg.n_layers} params={model.n_params(params)} "
          f"devices={jax.devices()}")
    for fmt in ("answer", "trace"):
        x = np.resize(task.encode_prompts(q, fmt), (n, task.PROMPT_LEN))
        r = task.RESPONSE_LEN[fmt]
        key = jax.random.PRNGKey(1)
        t_kv = _time(lambda: pol.sample(key, x, r), args.repeats)
        t_full = _time(lambda: policy.generic_sample(pol.apply_fn, params, key, x, r),
                       args.repeats)
        print(f"sampling {fmt}: batch {n} x {r} tokens: KV cache {n * r / t_kv:,.0f} tok/s "
              f"({t_kv:.3f}s), full recompute {n * r / t_full:,.0f} tok/s ({t_full:.3f}s)")
    pool = task.train_pool(n=2000)
    for budget in ((256,) if args.quick else (256, 1024)):
        steps = 5
        t0 = time.perf_counter()
        grpo.train_grpo(pol, pool, q.subset(np.arange(50)), budget, 16, steps, [], 1e-3, 0)
        t_first = time.perf_counter() - t0  # includes compilation
        t0 = time.perf_counter()
        grpo.train_grpo(pol, pool, q.subset(np.arange(50)), budget, 16, steps, [], 1e-3, 1)
        dt = time.perf_counter() - t0
        print(f"GRPO N={budget} (G=16): {steps / dt:.2f} steps/s "
              f"({budget * steps / dt:,.0f} sampled responses/s; first call {t_first:.1f}s)")


if __name__ == "__main__":
    main()
