"""Seconds per identical call of the training loops (the first call compiles, later ones reuse).

Usage: python benchmarks/bench_train_cache.py
Prints, for three identical calls in one process, the wall time of each call and the compile
cache size of the shared loop after it (it must stay at 1 for equal configurations).
"""

import time

from grpo_theory import problems
from grpo_theory.companions import MLPSequencePolicy, credit as C
from grpo_theory.companions import length_weighting as LW
from grpo_theory.optim import train as T


def _time3(label, call):
    times, sizes = [], []
    for _ in range(3):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
        sizes.append(T._run_batch._cache_size())
    print(f"{label}: seconds per identical call {[round(x, 2) for x in times]}, "
          f"loop compile cache {sizes}")


if __name__ == "__main__":
    _time3("length_weighting.train_length_weighted (20 steps, 4 seeds, B=G=8)",
           lambda: LW.train_length_weighted(problems.stop_or_run_policy(), 0.0, 20, 8, 8, 2.0,
                                            [0, 1, 2, 3]))
    pol = MLPSequencePolicy(lambda p, t, L: float(t[0] == (p % 2)), 3, 2, 4, hidden=8, seed=1)
    _time3("credit.train_grpo_records (20 steps, 2 seeds, MLP, B=8, G=4)",
           lambda: C.train_grpo_records(pol, 20, 8, 4, 0.2, [0, 1]))
