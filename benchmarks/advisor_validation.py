"""The advisor guide's validation tables (``docs/advisor.md``), regenerated from one command.

1. ``transformer``: the quick setting's instruct warm-up checkpoint, the first 100 evaluation
   questions of ``lm-groupsize --quick`` (``eval_set(QUICK_WARMUP.task).subset(range(100))``,
   written as ``quick_eval.jsonl`` by ``write_prompts``), reward = exact canonical answer
   (``grpo_theory.advisor.advise:exact_answer_reward``, under which V(x) = pi(y*|x) exactly).
   The warm-up cache (``<cache-dir>/lm``, as ``GRPO_THEORY_CACHE=<cache-dir>`` sets it) holds one
   entry per precision, each trained in it: ``grpo-theory advise --model instruct --warmup
   quick`` runs without x64 and loads the float32 entry; ``lm-groupsize`` (float64 cells) the
   float64 one.

   * exact route: :func:`grpo_theory.lm.training.grpo.predicted_group_size` (what
     ``lm-groupsize`` uses: exact V(x) and g(x), ``--exact-samples`` responses per question for
     E[||s||^2|x]), computed in float64 (``jax.enable_x64``) on each entry;
   * the advisor: :func:`grpo_theory.advisor.advise.advise` (the function behind
     ``grpo-theory advise``) on the entry it loads, m prompts drawn with replacement from the
     100, n responses each, one seed per row (:data:`RUNS`), all in one process (the first call
     and the first of a new shape compile);
   * the trace format (no exact route there): ``advise(..., fmt="trace")`` with the default
     reward at :data:`TRACE_RUNS`.

2. ``bandits``: ``gt.estimate_scaling_constants(policy, n_prompts=m, n_samples=8, seed=0)``
   against the exact ``gt.scaling_constants(policy)`` on ``SoftmaxBandit.random(3, 5, 4)`` and
   ``problems.scaling_bandit()``.

    python benchmarks/advisor_validation.py                 # every table (about a minute,
                                                            # plus the warm-ups' first training)
    python benchmarks/advisor_validation.py --tables bandits

Writes ``benchmarks/results/advisor_validation.md`` (machine, date, command, times, the tables
and how many intervals hold the exact values; ``tests/contracts/test_doc_tables.py`` checks
that the guide's tables equal it) and the raw rows as ``advisor_validation.json``. The cache
is ``--cache-dir`` (default ``benchmarks/.cache``, ignored by git).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
#: (m prompts, n responses, seed) of the advisor's rows
RUNS = ((64, 16, 0), (64, 16, 1), (64, 16, 2), (128, 32, 0))
#: (m, n, seed) of the trace format's rows (the first: advise's defaults)
TRACE_RUNS = ((64, 16, 0), (128, 32, 0))
#: the bandits of the second table and the prompts m of its rows
BANDITS = ("SoftmaxBandit.random(3, 5, 4)", "problems.scaling_bandit()")
BANDIT_PROMPTS = (200, 2000)
N_QUESTIONS = 100
BUDGET = 1024
REWARD = "grpo_theory.advisor.advise:exact_answer_reward"
#: heading of each table in the results file (and of its section in the guide)
TITLES = {"transformer": "Validation on the small transformer (answer-only format)",
          "bandits": "Enumerable bandits: estimates against exact values",
          "trace": "The trace format: the advisor alone"}


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    import jax

    return (f"{cpu}, {os.cpu_count()} cores visible, Python {platform.python_version()}, "
            f"jax {jax.__version__}, {jax.default_backend().upper()} backend")


def _inside(lo, value, hi) -> bool:
    return lo <= value <= hi


def transformer_rows(cache_dir: Path, exact_samples: int, progress: bool = True) -> dict:
    """The exact route and the advisor's rows on the quick instruct checkpoint."""
    import jax

    from grpo_theory._cache import precision
    from grpo_theory.advisor.advise import advise, write_prompts
    from grpo_theory.advisor.progress import Progress, warmup_log
    from grpo_theory.lm import QUICK_WARMUP, eval_set, predicted_group_size
    from grpo_theory.lm.checkpoints import load_policy

    questions = eval_set(QUICK_WARMUP.task).subset(range(N_QUESTIONS))
    prompts = write_prompts(Path(cache_dir) / "quick_eval.jsonl", questions)  # the guide's file
    folder = Path(cache_dir) / "lm"  # where GRPO_THEORY_CACHE=cache_dir puts them
    dtype = precision()  # what advise loads in: the cache entry it reads

    def exact_route(x64: bool) -> dict:
        """The exact route on the checkpoint of the float64 (x64) or float32 entry, computed
        in float64."""
        t0 = time.perf_counter()
        with jax.enable_x64(x64):
            policy = load_policy("instruct", cache_dir=folder, warmup="quick",
                                 log=warmup_log(Progress(progress)))
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        with jax.enable_x64(True):
            ex = predicted_group_size(policy, questions, exact_samples, seed=0)
        return dict(c1=ex["c1"], c2=ex["c2"], c3=ex["c3"], g_star=ex["G_continuous"],
                    g_int=ex["G_exact"], J=ex["J"], load_s=t_load,
                    seconds=time.perf_counter() - t0)

    exact = exact_route(dtype == "float64")
    other = exact_route(dtype != "float64")  # the entry advise does not read
    rows = []
    for m, n, seed in RUNS:
        t0 = time.perf_counter()
        res = advise(prompts, "instruct", REWARD, n_prompts=m, n_samples=n, seed=seed,
                     cache_dir=folder, warmup="quick", progress=progress, figure=False)
        dt = time.perf_counter() - t0
        e = res.estimate
        b = res.budgets.set_index("N")
        g = b.loc[BUDGET, "G"]
        rows.append(dict(m=m, n=n, seed=seed, c1=e.c1, c1_ci=list(e.c1_ci), c2=e.c2,
                         c2_ci=list(e.c2_ci), c3=e.c3, c3_ci=list(e.c3_ci), g_star=e.g_star,
                         g_star_ci=list(e.g_star_ci),
                         G=None if math.isnan(g) else int(g), seconds=dt))
        print(f"advise {m} x {n} seed {seed}: {dt:.1f}s", file=sys.stderr, flush=True)
    trace = []
    for m, n, seed in TRACE_RUNS:
        t0 = time.perf_counter()
        res = advise(prompts, "instruct", None, n_prompts=m, n_samples=n, seed=seed, fmt="trace",
                     cache_dir=folder, warmup="quick", progress=progress, figure=False)
        e = res.estimate
        trace.append(dict(m=m, n=n, seed=seed, v_mean=float(res.prompt_values.mean()),
                          c1=e.c1, c1_ci=list(e.c1_ci), c2=e.c2, c2_ci=list(e.c2_ci), c3=e.c3,
                          c3_ci=list(e.c3_ci), g_star=e.g_star, g_star_ci=list(e.g_star_ci),
                          budgets={int(b): (None if math.isnan(g) else int(g))
                                   for b, g in zip(res.budgets.N, res.budgets.G)},
                          seconds=time.perf_counter() - t0))
    return dict(dtype=dtype, exact_samples=exact_samples, exact=exact, other=other, trace=trace,
                other_dtype="float32" if dtype == "float64" else "float64", rows=rows)


def bandit_rows() -> list:
    """``estimate_scaling_constants`` against ``scaling_constants`` on the two bandits."""
    import grpo_theory as gt
    from grpo_theory import problems

    policies = {BANDITS[0]: gt.SoftmaxBandit.random(3, 5, 4),
                BANDITS[1]: problems.scaling_bandit()}
    rows = []
    for name, pol in policies.items():
        ex = gt.scaling_constants(pol)
        g_exact = 1 + math.sqrt(ex.c3 / ex.c1)
        for m in BANDIT_PROMPTS:
            t0 = time.perf_counter()
            e = gt.estimate_scaling_constants(pol, n_prompts=m, n_samples=8, seed=0)
            rows.append(dict(policy=name, m=m, c1_exact=ex.c1, c2_exact=ex.c2, c3_exact=ex.c3,
                             g_exact=g_exact, c1=e.c1, c1_ci=list(e.c1_ci), c2=e.c2,
                             c2_ci=list(e.c2_ci), c3=e.c3, c3_ci=list(e.c3_ci), g_star=e.g_star,
                             g_star_ci=list(e.g_star_ci), seconds=time.perf_counter() - t0))
    return rows


# --- the report ------------------------------------------------------------------------------------

def _g(x) -> str:
    return f"{x:.4g}"


def _ci(ci, fmt=_g) -> str:
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def _g4(x) -> str:
    return f"{x:#.4g}"


def _f2(x) -> str:
    return f"{x:.2f}"


def _f3(x) -> str:
    return f"{x:.3f}"


def _coverage(rows, exact_of) -> tuple:
    """(intervals holding the exact value, intervals, the misses as 'param row' texts)."""
    hit, total, miss = 0, 0, []
    for r in rows:
        for p in ("c1", "c2", "c3", "g_star"):
            ok = _inside(r[p + "_ci"][0], exact_of(r)[p], r[p + "_ci"][1])
            hit, total = hit + ok, total + 1
            if not ok:
                miss.append((p, r))
    return hit, total, miss


def _exact_row(label, ex, t) -> str:
    return (f"| {label} | {N_QUESTIONS} questions x {t['exact_samples']} | 0 | {_g4(ex['c1'])} | "
            f"{_g4(ex['c2'])} | {_g4(ex['c3'])} | {_f2(ex['g_star'])} | {ex['g_int']} | "
            f"{ex['seconds']:.1f} s |")


def transformer_table(t: dict) -> list:
    """The markdown lines of the small transformer's table: the exact route on the checkpoint
    advise loads, the advisor's rows, then the exact route on the other precision's entry."""
    lines = [f"| route | m x n | seed | c1 [95% CI] | c2 [95% CI] | c3 [95% CI] | G* [95% CI] | "
             f"G for N = {BUDGET} | time |", "|---|---|---|---|---|---|---|---|---|",
             _exact_row(f"exact, {t['dtype']} entry", t["exact"], t)]
    for i, r in enumerate(t["rows"]):
        note = ""
        if i == 0:
            note = " (first call, compiles)"
        elif (r["m"], r["n"]) != (t["rows"][i - 1]["m"], t["rows"][i - 1]["n"]):
            note = " (new shapes, compiles)"
        lines.append(f"| advisor, {t['dtype']} entry | {r['m']} x {r['n']} | {r['seed']} | "
                     f"{_f3(r['c1'])} {_ci(r['c1_ci'], _f3)} | {_g4(r['c2'])} "
                     f"{_ci(r['c2_ci'], _g4)} | {_g4(r['c3'])} {_ci(r['c3_ci'], _g4)} | "
                     f"{_f2(r['g_star'])} {_ci(r['g_star_ci'], _f2)} | "
                     f"{r['G'] if r['G'] is not None else '-'} | {r['seconds']:.1f} s{note} |")
    lines.append(_exact_row(f"exact, {t['other_dtype']} entry", t["other"], t))
    return lines


def transformer_coverage(t: dict) -> str:
    hit, total, miss = _coverage(t["rows"], lambda r: t["exact"])
    names = {"c1": "c1", "c2": "c2", "c3": "c3", "g_star": "G*"}
    text = (f"Intervals holding the exact-route value of the same ({t['dtype']}) entry: {hit} "
            f"of {total}")
    if miss:
        text += " (missed: " + ", ".join(f"{names[p]} at {r['m']} x {r['n']} seed {r['seed']}"
                                         for p, r in miss) + ")"
    return text + "."


def trace_table(rows: list) -> list:
    """The trace format's rows: the advisor's constants and its G per budget."""
    budgets = sorted(rows[0]["budgets"], key=int)
    lines = ["| m x n | seed | mean V-hat | c1 [95% CI] | c2 [95% CI] | c3 [95% CI] | G* [95% CI] | "
             + " | ".join(f"G for N = {b}" for b in budgets) + " | time |",
             "|---|---|---|---|---|---|---|" + "---|" * len(budgets) + "---|"]
    for r in rows:
        lines.append(f"| {r['m']} x {r['n']} | {r['seed']} | {r['v_mean']:.3f} | {_f3(r['c1'])} "
                     f"{_ci(r['c1_ci'], _f3)} | {_g4(r['c2'])} {_ci(r['c2_ci'], _g4)} | "
                     f"{_g4(r['c3'])} {_ci(r['c3_ci'], _g4)} | {_f2(r['g_star'])} "
                     f"{_ci(r['g_star_ci'], _f2)} | "
                     + " | ".join("-" if r["budgets"][b] is None else str(r["budgets"][b])
                                  for b in budgets) + f" | {r['seconds']:.1f} s |")
    return lines


def bandit_table(rows: list) -> list:
    lines = ["| policy | m | c1 exact | c1 est [CI] | c2 exact | c2 est [CI] | c3 exact | "
             "c3 est [CI] | G* exact | G* est [CI] |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['m']} | {_g(r['c1_exact'])} | {_g(r['c1'])} "
                     f"{_ci(r['c1_ci'])} | {_g(r['c2_exact'])} | {_g(r['c2'])} {_ci(r['c2_ci'])} | "
                     f"{_g(r['c3_exact'])} | {_g(r['c3'])} {_ci(r['c3_ci'])} | "
                     f"{_g(r['g_exact'])} | {_f3(r['g_star'])} {_ci(r['g_star_ci'], _f3)} |")
    return lines


def bandit_coverage(rows: list) -> str:
    exact = lambda r: dict(c1=r["c1_exact"], c2=r["c2_exact"], c3=r["c3_exact"],
                           g_star=r["g_exact"])
    hit, total, miss = _coverage(rows, exact)
    text = f"Intervals holding the exact value: {hit} of {total}"
    if miss:
        text += " (missed: " + ", ".join(f"{p} of {r['policy']} at m = {r['m']}"
                                         for p, r in miss) + ")"
    return text + "."


def report(saved: dict) -> str:
    lines = ["# The advisor guide's validation tables", "",
             f"`{saved['command']}` on {saved['date']}.", "",
             f"Machine: {saved['machine']}. Load average at start {saved['load'][0]:.2f} / "
             f"{saved['load'][1]:.2f} / {saved['load'][2]:.2f} (1/5/15 min). Total "
             f"{saved['seconds']:.1f} s.", ""]
    t = saved.get("transformer")
    if t is not None:
        lines += [f"## {TITLES['transformer']}", "",
                  f"The quick setting's instruct warm-up checkpoint, the first {N_QUESTIONS} "
                  f"evaluation questions of `lm-groupsize --quick` (`quick_eval.jsonl`, written by "
                  f"`write_prompts`), reward `{REWARD}`. The warm-up cache holds one entry per "
                  f"precision, trained in that precision: `grpo-theory advise --model instruct "
                  f"--warmup quick` loads the {t['dtype']} one (it runs without x64; loaded or "
                  f"trained in {t['exact']['load_s']:.1f} s), `lm-groupsize` (float64 cells) the "
                  f"float64 one. Exact route: `grpo_theory.lm.training.grpo.predicted_group_size("
                  f"policy, questions, {t['exact_samples']}, seed=0)` computed in float64, on "
                  f"each entry (mean exact pass rate J = {t['exact']['J']:.4f} on the "
                  f"{t['dtype']} entry, {t['other']['J']:.4f} on the {t['other_dtype']} one); "
                  f"G* = 1 + sqrt(c3/c1), the G column its integer argmin. The advisor: "
                  f"`grpo_theory.advisor.advise.advise(\"quick_eval.jsonl\", \"instruct\", "
                  f"reward, n_prompts=m, n_samples=n, seed=seed, warmup=\"quick\")` (what "
                  f"`grpo-theory advise --n-prompts m --n-samples n --seed seed` calls; prompts "
                  f"drawn with replacement from the {N_QUESTIONS}), all rows in one process; its "
                  f"G column is the recommended G for N = {BUDGET} ('-': none, c1 not resolved "
                  f"above 0).", "", *transformer_table(t), "", transformer_coverage(t), ""]
    if t is not None:
        lines += [f"## {TITLES['trace']}", "",
                  f"Same checkpoint and questions, the trace format (reasoning trace then the "
                  f"final integer, 16 tokens; no exact route exists there), the default "
                  f"integer-answer reward: `advise(\"quick_eval.jsonl\", \"instruct\", "
                  f"n_prompts=m, n_samples=n, seed=seed, fmt=\"trace\", warmup=\"quick\")` "
                  f"(`grpo-theory advise --format "
                  f"trace --n-prompts m --n-samples n`; the first row is its default); G '-': none "
                  f"recommended (c1 not resolved above 0):", "",
                  *trace_table(t["trace"]), ""]
    b = saved.get("bandits")
    if b is not None:
        lines += [f"## {TITLES['bandits']}", "",
                  "`gt.estimate_scaling_constants(policy, n_prompts=m, n_samples=8, seed=0)` "
                  "against `gt.scaling_constants(policy)` (exact; G* = 1 + sqrt(c3/c1)):", "",
                  *bandit_table(b), "", bandit_coverage(b), ""]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="+", choices=("transformer", "bandits"),
                    default=["transformer", "bandits"])
    ap.add_argument("--exact-samples", type=int, default=64,
                    help="responses per question for E[||s||^2|x] of the exact route")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".cache",
                    help="the warm-up checkpoints' cache (trained there on first use)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "advisor_validation.md")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the markdown from the .json next to --out; nothing is run")
    args = ap.parse_args(argv)
    if args.report_only:
        text = report(json.loads(args.out.with_suffix(".json").read_text()))
        args.out.write_text(text)
        print(text)
        return
    flags = [] if args.tables == ["transformer", "bandits"] else ["--tables", *args.tables]
    if args.exact_samples != 64:
        flags += ["--exact-samples", str(args.exact_samples)]
    saved = dict(command=" ".join(["python benchmarks/advisor_validation.py", *flags]),
                 date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                 machine=_machine(), load=os.getloadavg())
    t0 = time.perf_counter()
    if "transformer" in args.tables:
        saved["transformer"] = transformer_rows(args.cache_dir, args.exact_samples,
                                                not args.no_progress)
    if "bandits" in args.tables:
        saved["bandits"] = bandit_rows()
    saved["seconds"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(saved, indent=1) + "\n")
    text = report(saved)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
