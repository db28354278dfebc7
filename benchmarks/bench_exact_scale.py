"""Scale of the exact routines: tabular SoftmaxBandit with P prompts and K responses.

Each size runs in a fresh process (so compilation is included and the peak RSS is that size's):
four exact MSEs (vanilla, oracle, grpo, grpo_mean; G = 8, B = 1) plus ``optimal_group_size``,
then the binary route for ``grpo_std``. Before the score structures (core/gram.py) the exact
routines built a dense (P, K, P K) score tensor: P = 200, K = 50 took 23 s and 2.9 GB, and
P = 1000, K = 100 tried to allocate 80 GB.

    python benchmarks/bench_exact_scale.py            # P in (200, 1000, 10000), K = 100
    python benchmarks/bench_exact_scale.py --sizes 1000 --K 100
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _one(P: int, K: int, G: int) -> dict:
    import resource

    t0 = time.perf_counter()
    import jax

    import grpo_theory as gt

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    bandit = gt.SoftmaxBandit.random(jax.random.PRNGKey(0), P, K, logit_scale=1.5)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    mses = {name: gt.exact_mse(bandit, name, G) for name in ("vanilla", "oracle", "grpo",
                                                             "grpo_mean")}
    opt = gt.optimal_group_size(bandit)
    t_four = time.perf_counter() - t0
    t0 = time.perf_counter()
    std = gt.exact_mse(bandit, "grpo_std", G)
    t_std = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    return dict(P=P, K=K, G=G, import_s=t_import, build_s=t_build, four_mse_and_gstar_s=t_four,
                grpo_std_binary_s=t_std, peak_rss_mib=rss, g_star=opt.exact, mse=mses,
                grpo_std=std)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 10_000])
    ap.add_argument("--K", type=int, default=100)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_one(args.sizes[0], args.K, args.G)))
        return
    print(f"{'P':>6} {'K':>4} {'4 MSEs + G* (s)':>16} {'grpo_std (s)':>13} {'build (s)':>10} "
          f"{'peak RSS (MiB)':>15} {'G*':>5}")
    for P in args.sizes:
        out = subprocess.run([sys.executable, __file__, "--child", "--sizes", str(P), "--K",
                              str(args.K), "--G", str(args.G)], capture_output=True, text=True,
                             check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{P:>6} {args.K:>4} {r['four_mse_and_gstar_s']:>16.2f} "
              f"{r['grpo_std_binary_s']:>13.2f} {r['build_s']:>10.2f} {r['peak_rss_mib']:>15.0f} "
              f"{r['g_star']:>5}", flush=True)


if __name__ == "__main__":
    main()
