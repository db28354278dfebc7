"""XLA compilations and seconds per member when scaling-family trains a family of bandits.

Usage: python benchmarks/bench_family_compiles.py [n_members]
Runs scaling-family's ``train`` cell (quick setting: N = 64, G = 8, 100 steps, 32 seeds) for the
first ``n_members`` reward gaps of the full setting and prints, per member, the wall time and
the number of backend compilations it triggered (``jax.monitoring``'s compile-duration event).
With the problems hashed into jit's static arguments every member compiled the loop again; with
the problems as traced pytrees only the first member compiles it.
"""

import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: COMPILES.append(secs)
    if event == "/jax/core/compile/backend_compile_duration" else None)

from grpo_theory.studies.scaling_family import SETTINGS  # noqa: E402
from grpo_theory.studies.scaling_family.bandit import train_cell  # noqa: E402

if __name__ == "__main__":
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    q = SETTINGS["quick"]
    G = 8
    total = 0.0
    for d in SETTINGS["full"].train_deltas[:k]:
        n0, t = len(COMPILES), time.perf_counter()
        train_cell(dict(delta=d, mode="per_step", budget=q.train_N, G=G, B=q.train_N // G,
                        n_steps=q.train_steps, n_seeds=q.n_seeds), jax.random.PRNGKey(0))
        dt = time.perf_counter() - t
        total += dt
        print(f"delta={d}: {dt:.2f} s, {len(COMPILES) - n0} compilations "
              f"({sum(COMPILES[n0:]):.2f} s compiling)")
    print(f"{k} members: {total:.2f} s, {len(COMPILES)} compilations in all")
