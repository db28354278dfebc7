r"""The scaling law across a problem family: predicted G* against the best group size.

Theorem 7: under a fixed budget N = BG the GRPO gradient MSE, ``N MSE = c1 G + c2 + c3/(G-1)``,
is minimised at G* = 1 + sqrt(c3/c1) (paper's leading-order form sqrt(c3/c1)) whatever N.

Family (:func:`grpo_theory.problems.scaling_family_bandit`): the scaling-law bandit (4 prompts x
2 responses, theta in R^2) with reward gap delta, at its maximiser theta* (which does not move
with delta because J is affine in delta). Per-prompt gradients scale with delta, so
c1 ∝ delta^2, while c3 keeps the reward variance (about 1/4): G* - 1 grows like 1/delta. The
members' delta are chosen (from exact c1, c3) so that the exact G* is about 2, 4, 8, ..., 128.

Kinds of cells (one table each):

1. ``constants`` (one cell per member): exact c1, c2, c3 at theta* and theta0 = 0, G* in both
   forms, the exact integer argmin of ``G exact_mse(G, B=1)`` (= N MSE at budget N, B = N/G)
   over {G*-1, G*, G*+1} (the fixed-budget MSE is convex in G, so a local integer minimum is
   global), and the grid argmin of the scaling law (the prediction on the G grid).
2. ``mse`` (one cell per member x budget N): for every G of the grid dividing N, the exact MSE
   (``gt.exact_mse``, B = N/G) and a Monte Carlo estimate from per-replicate squared errors
   (``gt.mc_estimates``); the bootstrap over replicates (resampled independently per G) gives
   the distribution of the MC argmin (``boot_freq``: how often G is the argmin).
3. ``train`` (one cell per member x mode x G): Algorithm 1
   (:func:`grpo_theory.optim.train.train_schedules`, GRPO, constant step eta = ETA0/delta so
   that the deterministic part of the dynamics is the same for every member) from theta0 = 0;
   exact final gap Delta_n per seed, under (a) a per-step budget N = BG and (b) a total budget
   T = n B G with B fixed. The report's best G has a bootstrap 95% CI over seeds.
4. ``lm`` (optional; no cell here): rows ``source, label, G_pred, best_G, ci_low, ci_high`` of
   language-model settings from another study; when present they enter the figure and the
   statistics. The LM part below does not write it (its rows come from its own cells).

Language model (``Settings.lm``, :class:`LMPart`; full setting only): the small transformer's
instruct policy (lm-mse's warm-up, shared through ``cache_dir()/lm``). Knob candidates are
measured first (``lm_knob``, one cell per knob, a row per value): the difficulty spread
``hard_fraction``, the sampling ``temperature`` (exact answer-only route,
:func:`grpo_theory.lm.grpo.predicted_group_size`), the response ``format`` (answer vs
reasoning trace, the advisor's sample-based route with a 95% CI) and the prompt
``concentration`` p (:mod:`grpo_theory.lm.mixture`): the training distribution puts mass p on
one fixed question (the candidate whose pass rate at the instruct policy is closest to 1/2)
and 1 − p on the held-out questions. c1 is the between-prompt variance of g(x) = V s*, which
vanishes like (1 − p) as p → 1 while c3 (within-group noise) stays, so G* − 1 grows like
(1 − p)^(−1/2); the difficulty knob does not move G* because unsolvable questions add to
neither c1 nor c3. Concentration is the knob trained (``lm_train``, one cell per p x G x seed):
Algorithm 1 (Adam, :func:`grpo_theory.lm.grpo.train_grpo`) at budget N on a pool of fixed size
holding the fixed question p·n_pool times (uniform draws realise the mixture exactly; one
compiled shape per G for every p), with the mixture's exact objective
J_p = p V(x_F) + (1 − p) mean_R V at every checkpoint (every ``checkpoint_every`` steps, so
the rise of the fixed question's pass rate is resolved; the concentrated runs are shorter,
``steps_concentrated``, since that rise is over well before the end). The report's LM rows
(source ``lm:train``) are computed from these two kinds (:func:`lm_points`): the best G
maximises the mean J_p over seeds at the read step, its 95% CI resamples seeds within each G
(lm-groupsize's ``bootstrap_best_g``), the prediction is the concentration row at the same p.
The read step is fixed per p by a rule that does not look at differences between G
(:func:`read_step`): with g(t) the mean over all runs (every G and seed) of J_p(t) − J_p(0), it
is the first checkpoint with g(t) >= g(T)/2, T the last checkpoint, or T when g(T) <= 0. (Read
at the end of a concentrated run, J_p is saturated at every G — the fixed question is solved —
and best G measures only the drift of the held-out share.) The report also gives best G at
every checkpoint (:func:`lm_checkpoint_table`) and, for p > 0, the steps until V(x_F) >= 0.9
(:func:`lm_reach`, interpolated, lower is better). Cells are kept
in this driver (not a separate one) so that the figure and Spearman's statistics read one set
of tables. Finding of the full run (checkpoints every 2 steps): Adam at lr 1e-3 solves the
fixed question within about 4 steps at every G (V(x_F) 0.56 -> 0.97 at step 4, steps to 0.9
3.6-3.8 at every G), so the concentrated settings' read step is 4 and their best-G CIs still
span most of the grid: Adam's normalised first steps do not depend on the gradient noise that
G* trades off, and a sharper test needs a smaller learning rate or plain SGD. At p = 0 the
across-G mean J_p falls (-0.07 by step 80), so best G there is the G that loses least.
The quick setting has no LM cells (the LM code is tested at a tiny config in
``tests/test_scaling_family.py``).

PASS (what Theorem 7 guarantees): for every member, the exact integer argmin equals the exact
form's prediction; for every member and budget, the exact argmin over the grid equals the
grid argmin of the law, and the Monte Carlo argmin's bootstrap 95% CI contains it. With the LM
part: c1 > 0 at every trained concentration, their predicted G* span a factor >= 4, and every
J_p is a probability. Training agreement (and Spearman's rank correlation between predicted and
best G) is reported, not gated.

Cost: compilation dominates (Monte Carlo: one per (B, G) shape, shared by the members;
training: one per member x G, since the problem is static in the compiled loop), 10-20 s each
on the shared 2-core machine. Quick: 22 s (load 3.5) to 81 s (load 11) measured. Full: 877 s
measured with one worker for the bandit cells, plus 1236 s wall for the 63 LM training cells
(the knob cells and the full warm-up already in ``GRPO_THEORY_CACHE``; 33 s mean per 80-step
p = 0 run, 13 s per 40-step concentrated run, load 8-16) (``FULL_ESTIMATE``), under the 2-hour
target.

    grpo-theory scaling-family [--full] [--workers N]
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import jax
import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments.runner import Cell, Experiment, Section, check, key_seed, float64
from grpo_theory.experiments.stats import bootstrap_argmin, interval_from_freq, spearman
from grpo_theory.lm.warmup import WarmupConfig
from grpo_theory.optim.train import exact_objective, train_schedules
from grpo_theory.problems import scaling_family_bandit

from .lm_groupsize import bootstrap_best_g

__all__ = ["NAME", "CLAIM", "ETA0", "FULL_ESTIMATE", "LMPart", "Settings", "SETTINGS", "SCHEMA",
           "cells", "cell", "lm_cells", "grid_argmin", "read_step", "steps_to_reach",
           "lm_checkpoint_table", "lm_reach", "lm_points", "summaries",
           "checks", "report", "plot", "EXPERIMENT"]

NAME = "scaling-family"
CLAIM = ("across a bandit family with G* from 2 to 128, the fixed-budget MSE argmin is "
         "1 + sqrt(c3/c1) (Thm 7); training's best G reported against it")
ETA0 = 0.05  # constant step eta = ETA0 / delta (0.5 at delta = 0.1, as in scaling-law)
MC_CHUNK = 500  # replicates per mc_estimates call (one compiled shape per (B, G))
LM_KNOBS = ("hard_fraction", "temperature", "format", "concentration")
FIXED_SEED = 4242  # seed of the candidate questions the fixed (concentrated) one is picked from
FULL_ESTIMATE = ("measured: 877 s (133 cells, one worker, shared 2-core machine, load 4-7 observed: "
                 "`grpo-theory scaling-family --full --out results-full`); the estimate from "
                 "cell times at load 12 was about 45 min. The LM training cells (63, "
                 "checkpoints every 2 steps, 80 steps at p = 0 and 40 at p > 0; knob cells and "
                 "full warm-up cached): 1236 s wall, 1225 s of cell time, one worker, load 8-16 "
                 "observed")


@dataclass(frozen=True)
class LMPart:
    """The language-model part (module docstring, "Language model").

    ``warmup``: the starting checkpoints (lm-mse's, shared through ``cache_dir()/lm``);
    ``knobs``: candidate knobs measured at the instruct policy, ``(name, values)`` with name
    in ``hard_fraction``, ``temperature``, ``format`` (advisor route, ``fmt_questions``
    questions), ``concentration``;
    ``ps``: the concentrations trained (each also measured as a knob); ``grid``: G values
    dividing ``N``; ``steps`` Adam steps at rate ``lr`` per run at p = 0 and
    ``steps_concentrated`` (0: ``steps``) at p > 0, a checkpoint every ``checkpoint_every``
    steps (one chunk length, so one compiled GRPO chunk per G), ``seeds`` runs per (p, G);
    ``n_eval`` held-out questions (the mixture's other component R), ``n_pool`` training
    prompts (the fixed one ``p n_pool`` times, the rest from the training pool),
    ``n_candidates`` questions the fixed one is picked from,
    ``gstar_samples`` responses per question for c2, c3 (``fmt_samples`` for the advisor)."""

    warmup: object
    knobs: tuple
    ps: tuple
    grid: tuple
    N: int
    steps: int
    seeds: int
    lr: float = 1e-3
    steps_concentrated: int = 0
    checkpoint_every: int = 0
    n_eval: int = 500
    n_pool: int = 10000
    n_candidates: int = 256
    gstar_samples: int = 32
    fmt_samples: int = 8
    fmt_questions: int = 200


@dataclass(frozen=True)
class Settings:
    deltas: tuple  # the members' reward gaps
    grid: tuple  # group sizes (powers of a base, so the grid argmin is well separated)
    budgets: tuple  # N for the MSE cells
    mc_reps: int  # Monte Carlo replicates per (member, N, G), a multiple of MC_CHUNK
    train_N: int  # per-step budget N = BG
    train_steps: int  # steps under the per-step budget
    train_B_total: int  # B under the total budget (0: no total-budget runs)
    total_steps_at_Gmax: int  # steps at the largest G under the total budget
    n_seeds: int
    n_boot: int
    train_deltas: tuple = ()  # members trained with Algorithm 1 (one compilation per member x G)
    lm: LMPart | None = None  # the language-model part (None: no LM cells)


SETTINGS = {
    "quick": Settings(deltas=(0.5, 0.1, 0.0226), grid=(2, 8, 32), budgets=(64,), mc_reps=2000,
                      train_N=64, train_steps=100, train_B_total=0, total_steps_at_Gmax=0,
                      n_seeds=32, n_boot=1000, train_deltas=(0.1,)),
    "full": Settings(deltas=(0.5, 0.25, 0.1, 0.047, 0.0226, 0.0111, 0.0055),
                     grid=(2, 4, 8, 16, 32, 64, 128, 256), budgets=(256, 1024), mc_reps=20_000,
                     train_N=256, train_steps=400, train_B_total=2, total_steps_at_Gmax=200,
                     n_seeds=128, n_boot=2000,
                     train_deltas=(0.5, 0.25, 0.1, 0.047, 0.0226, 0.0111, 0.0055),
                     lm=LMPart(warmup=WarmupConfig(),
                               knobs=(("concentration", (0.0, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99,
                                                         0.995)),
                                      ("hard_fraction", (0.0, 0.25, 0.75)),
                                      ("temperature", (0.5, 0.7, 1.0, 1.5)),
                                      ("format", ("answer", "trace"))),
                               ps=(0.0, 0.95, 0.99), grid=(2, 4, 8, 16, 32, 64, 128), N=256,
                               steps=80, seeds=3, steps_concentrated=40, checkpoint_every=2)),
}

SCHEMA = {
    "constants": dict(delta="float", c1="float", c2="float", c3="float", c1_initial="float",
                      c3_initial="float", G_paper="float?", G_continuous="float?",
                      G_exact="int", G_exact_initial="int", int_argmin="int", G_grid="int",
                      J_star="float"),
    "mse": dict(delta="float", N="int", G="int", B="int", exact="float", mc="float",
                mc_se="float", boot_freq="float", n_reps="int"),
    "train": dict(delta="float", mode="str", budget="int", G="int", B="int", n_steps="int",
                  eta="float", run_seed="int", final_gap="float", gap0="float"),
    "lm": dict(source="str", label="str", G_pred="float", best_G="int", ci_low="int",
               ci_high="int"),
    "lm_knob": dict(knob="str", value="str", method="str", c1="float", c2="float?", c3="float",
                    G_continuous="float?", G_ci_low="float?", G_ci_high="float?", J="float",
                    p_exact="float?", fixed="str?", V_fixed="float?", n_questions="int"),
    "lm_train": dict(p="float", G="int", B="int", N="int", run_seed="int", step="int",
                     J_mix="float", acc_rest="float", V_fixed="float", train_reward="float?",
                     steps_per_s="float"),
}


def grid_argmin(constants, grid) -> int:
    """The G of ``grid`` minimising ``N MSE = c1 G + c2 + c3/(G-1)`` (Theorem 7, exact form)."""
    vals = [float(gt.budget_mse(constants, G)) for G in grid]
    return int(grid[int(np.argmin(vals))])


def cells(s: Settings) -> list[Cell]:
    out = [Cell(f"constants_d{d}", dict(part="constants", delta=d, grid=s.grid), kind="constants")
           for d in s.deltas]
    out += [Cell(f"mse_d{d}_N{N}", dict(part="mse", delta=d, N=N,
                                        grid=tuple(G for G in s.grid if G <= N),
                                        n_reps=s.mc_reps, n_boot=s.n_boot), kind="mse")
            for d in s.deltas for N in s.budgets]
    runs = [("per_step", s.train_N, G, s.train_N // G, s.train_steps)
            for G in s.grid if G <= s.train_N]
    if s.train_B_total:
        T = s.train_B_total * max(s.grid) * s.total_steps_at_Gmax
        runs += [("total", T, G, s.train_B_total, T // (s.train_B_total * G)) for G in s.grid]
    out += [Cell(f"train_d{d}_{mode}_G{G}", dict(part="train", delta=d, mode=mode, budget=N,
                                                 G=G, B=B, n_steps=n, n_seeds=s.n_seeds),
                 kind="train")
            for d in s.train_deltas for mode, N, G, B, n in runs]
    if s.lm is not None:
        out += lm_cells(s.lm)
    return out


def lm_cells(m: LMPart) -> list[Cell]:
    """The LM part's cells: one ``lm_knob`` per candidate knob (all its values; the trained
    concentrations join the concentration knob's values), then the runs seed-major (an
    interrupted run holds whole G sweeps for the first seeds)."""
    data = dict(warmup=m.warmup, n_eval=m.n_eval, n_pool=m.n_pool, n_candidates=m.n_candidates)
    knobs = dict(m.knobs)
    knobs["concentration"] = tuple(sorted(set(knobs.get("concentration", ())) | set(m.ps)))
    knob_cells = {k: Cell(f"lm_knob_{k}", dict(data, part="lm_knob", knob=k, values=tuple(v),
                                               gstar_samples=m.gstar_samples,
                                               fmt_samples=m.fmt_samples,
                                               fmt_questions=min(m.fmt_questions, m.n_eval)),
                          kind="lm_knob")
                  for k, v in knobs.items()}
    out = [knob_cells.pop("concentration")]  # the prediction of the runs first
    out += [Cell(f"lm_train_p{p}_G{G}_seed{r}", dict(data, part="lm_train", p=p, G=G, N=m.N,
                                                      steps=_lm_steps(m, p), lr=m.lr, run_seed=r,
                                                      checkpoints=_lm_checkpoints(m, p)),
                 kind="lm_train")
            for r in range(m.seeds) for p in m.ps for G in m.grid if m.N % G == 0]
    return out + list(knob_cells.values())  # the other candidate knobs last


def _lm_steps(m: LMPart, p: float) -> int:
    """Steps of a run at concentration ``p`` (``steps_concentrated`` at p > 0 when set)."""
    return m.steps_concentrated if p > 0 and m.steps_concentrated else m.steps


def _lm_checkpoints(m: LMPart, p: float) -> tuple:
    """Checkpoint steps of a run at ``p``: every ``checkpoint_every`` steps (0: half-way and the
    end), the last step always included."""
    n = _lm_steps(m, p)
    if m.checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be >= 0, got {m.checkpoint_every!r}")
    if not m.checkpoint_every:
        return (n // 2, n)
    return tuple(sorted(set(range(m.checkpoint_every, n + 1, m.checkpoint_every)) | {n}))


def _constants(config: dict) -> dict:
    d = config["delta"]
    pol = scaling_family_bandit(d)
    o = gt.optimal_group_size(pol)
    oi = gt.optimal_group_size(scaling_family_bandit(d, at_optimum=False))
    cand = [G for G in (o.exact - 1, o.exact, o.exact + 1) if G >= 2]
    nmse = [G * float(gt.exact_mse(pol, "grpo", G, 1)) for G in cand]  # N MSE at B = N/G
    c = o.constants
    return dict(delta=d, c1=c.c1, c2=c.c2, c3=c.c3, c1_initial=oi.constants.c1,
                c3_initial=oi.constants.c3, G_paper=o.paper, G_continuous=o.continuous,
                G_exact=o.exact, G_exact_initial=oi.exact, int_argmin=cand[int(np.argmin(nmse))],
                G_grid=grid_argmin(c, config["grid"]), J_star=float(exact_objective(pol)))


def _mse(config: dict, key) -> list[dict]:
    d, N, n_reps = config["delta"], config["N"], config["n_reps"]
    pol = scaling_family_bandit(d)
    grad = np.asarray(gt.exact_gradient(pol))
    grid = config["grid"]
    n_chunks = max(1, -(-n_reps // MC_CHUNK))
    err = {}
    for G, kG in zip(grid, jax.random.split(key, len(grid))):
        parts = [np.sum((np.asarray(gt.mc_estimates(pol, "grpo", G, N // G, n_reps=MC_CHUNK,
                                                    key=k)) - grad) ** 2, axis=1)
                 for k in jax.random.split(kG, n_chunks)]
        err[G] = np.concatenate(parts)
    freq = bootstrap_argmin(err, n_boot=config["n_boot"], seed=key).freq  # grid is increasing
    return [dict(delta=d, N=N, G=G, B=N // G, exact=float(gt.exact_mse(pol, "grpo", G, N // G)),
                 mc=float(err[G].mean()), mc_se=float(err[G].std(ddof=1) / np.sqrt(err[G].size)),
                 boot_freq=float(freq[j]), n_reps=int(err[G].size))
            for j, G in enumerate(grid)]


def _train(config: dict, key) -> list[dict]:
    d, G, B, n = config["delta"], config["G"], config["B"], config["n_steps"]
    start = scaling_family_bandit(d, at_optimum=False)
    jstar = float(exact_objective(scaling_family_bandit(d)))
    eta = ETA0 / d
    seeds = np.random.default_rng(key_seed(key)).choice(2**31, size=config["n_seeds"],
                                                        replace=False)
    r, = train_schedules(start, "grpo", B, G, n, [("constant", eta, 0.0)], seeds=seeds,
                         log_every=n, max_objective=jstar)
    return [dict(delta=d, mode=config["mode"], budget=config["budget"], G=G, B=B, n_steps=n,
                 eta=eta, run_seed=int(sd), final_gap=float(gap), gap0=float(g0))
            for sd, gap, g0 in zip(r.seeds, r.final_gap, r.gap[:, 0])]


def _lm_setup(config: dict):
    """Instruct policy, held-out questions R, training questions and the fixed question (the
    candidate whose pass rate at the instruct policy is closest to 1/2)."""
    from grpo_theory.lm.mixture import pick_fixed_question
    from grpo_theory.lm.task import eval_set, train_pool

    from .lm_mse import policies

    w = config["warmup"]
    pol = policies(w)["instruct"][0]
    rest = eval_set(w.task).subset(np.arange(config["n_eval"]))
    cand = train_pool(w.task, n=config["n_candidates"], seed=FIXED_SEED)
    fixed = cand.subset([pick_fixed_question(pol, cand)])
    return pol, rest, fixed


def _lm_knob(config: dict, key) -> list[dict]:
    """G* at the instruct policy for every value of one candidate knob (module docstring)."""
    from grpo_theory.lm import mixture as mx
    from grpo_theory.lm.grpo import predicted_group_size
    from grpo_theory.lm.task import eval_set

    pol, rest, fixed = _lm_setup(config)
    knob, values = config["knob"], config["values"]
    if knob not in LM_KNOBS:
        raise ValueError(f"knob must be one of {LM_KNOBS}, got {knob!r}")
    base = dict(knob=knob, method="exact (answer-only)", G_ci_low=np.nan, G_ci_high=np.nan,
                p_exact=np.nan, fixed="", V_fixed=np.nan, n_questions=len(rest))
    if knob == "concentration":  # one set of per-question pieces serves every p
        parts = mx.mixture_parts(pol, fixed, rest, config["gstar_samples"], key)
        v0 = float(mx.pass_rates(pol, fixed)[0])
        rows = []
        for value in values:
            _, _, pe = mx.pool_counts(float(value), 1, config["n_pool"])
            c = mx.mixture_constants(parts, pe)
            rows.append(dict(base, value=str(value), c1=c["c1"], c2=c["c2"], c3=c["c3"],
                             G_continuous=c["G_continuous"], J=c["J"], p_exact=pe,
                             fixed=fixed.text[0], V_fixed=v0))
        return rows
    rows = []
    for value, k in zip(values, jax.random.split(key, len(values))):
        if knob == "hard_fraction":
            task = dataclasses.replace(config["warmup"].task, hard_fraction=float(value))
            q = eval_set(task).subset(np.arange(config["n_eval"]))
            c = predicted_group_size(pol, q, config["gstar_samples"], seed=key_seed(k))
        elif knob == "temperature":
            c = predicted_group_size(dataclasses.replace(pol, temperature=float(value)), rest,
                                     config["gstar_samples"], seed=key_seed(k))
        else:  # format: the advisor's sample-based route (the trace reward is not enumerable)
            rows.append(dict(base, value=str(value), **_format_constants(
                pol, rest.subset(np.arange(config["fmt_questions"])), value,
                config["fmt_samples"], k)))
            continue
        rows.append(dict(base, value=str(value), c1=c["c1"], c2=c["c2"], c3=c["c3"],
                         G_continuous=c["G_continuous"], J=c["J"]))
    return rows


def _format_constants(pol, questions, fmt: str, n_samples: int, key) -> dict:
    """c1, c2, c3 and G* with its 95% CI from the advisor (``n_samples`` responses per
    question, every question once) in response format ``fmt``."""
    from grpo_theory.advisor.estimate import estimate_scaling_constants
    from grpo_theory.lm.task import RESPONSE_LEN, encode_prompts, reward, target_responses

    ans = np.asarray(questions.answer)
    canon = target_responses(questions, "answer") if fmt == "answer" else None

    def rew(rows, y):
        return np.asarray(reward(fmt, y, ans[rows], None if canon is None else canon[rows]),
                          np.float64)

    e = estimate_scaling_constants(pol, None, n_samples, key,
                                   prompts=encode_prompts(questions, fmt), reward=rew,
                                   response_len=RESPONSE_LEN[fmt])
    lo, hi = e.g_star_ci
    return dict(method=f"advisor ({n_samples} samples, {len(questions)} questions, 95% CI)",
                c1=e.c1, c2=e.c2, c3=e.c3, G_continuous=e.g_star, G_ci_low=lo, G_ci_high=hi,
                J=float(np.mean(e.prompt_values)), n_questions=len(questions))


def _lm_train(config: dict, key) -> list[dict]:
    """One GRPO run (Algorithm 1, Adam) on the concentrated pool; the mixture's exact objective
    ``J_p = p V(x_F) + (1 - p) mean_R V`` at every checkpoint."""
    from grpo_theory.lm import mixture as mx
    from grpo_theory.lm.grpo import train_grpo
    from grpo_theory.lm.task import train_pool

    pol, rest, fixed = _lm_setup(config)
    pool, pe = mx.concentrated_pool(fixed, train_pool(config["warmup"].task,
                                                      n=config["n_pool"]), config["p"],
                                    config["n_pool"])
    v_fixed = {}
    n, g, steps = config["N"], config["G"], config["steps"]
    t0 = time.perf_counter()
    rows = train_grpo(pol, pool, rest, n, g, steps, config["checkpoints"], config["lr"],
                      seed=key_seed(key),
                      on_checkpoint=lambda k, p: v_fixed.__setitem__(
                          k, float(mx.pass_rates(p, fixed)[0])))
    dt = time.perf_counter() - t0
    return [dict(p=config["p"], G=g, B=n // g, N=n, run_seed=config["run_seed"], step=r["step"],
                 J_mix=pe * v_fixed[r["step"]] + (1 - pe) * r["accuracy"],
                 acc_rest=r["accuracy"], V_fixed=v_fixed[r["step"]],
                 train_reward=r["train_reward"], steps_per_s=steps / dt) for r in rows]


@float64
def cell(config: dict, key):
    """One cell: a member's constants, its fixed-budget MSE over G at one N, one training G, an
    LM knob's G*, or one LM training run."""
    part = config["part"]
    if part == "constants":
        return _constants(config)
    if part == "mse":
        return _mse(config, key)
    if part == "lm_knob":
        return _lm_knob(config, key)
    if part == "lm_train":
        return _lm_train(config, key)
    return _train(config, key)


def summaries(tables, n_boot: int = 2000) -> dict:
    """One row per (member, source[, N]): predicted and empirical best G with its CI.

    Args:
        tables: the experiment's tables (``constants``, ``mse``, ``train``, optional ``lm``).
        n_boot: bootstrap resamples for the training CI.
    Returns:
        ``{"constants": ..., "points": DataFrame(delta, source, N, G_pred, G_grid, best_G,
        ci_low, ci_high, in_ci)}`` (sources: exact, mc, train_per_step, train_total, lm).
    """
    const = tables["constants"].set_index("delta")
    rows = []
    for (d, N), e in tables["mse"].groupby(["delta", "N"]):
        e = e.sort_values("G")
        grid = [int(g) for g in e.G]
        c = gt.ScalingConstants(*(float(const.loc[d, k]) for k in ("c1", "c2", "c3")))
        pred = grid_argmin(c, grid)
        ex = grid[int(np.argmin(e.exact.values))]
        rows.append(dict(delta=d, source="exact", N=int(N), G_pred=float(const.loc[d,
                         "G_continuous"]), G_grid=pred, best_G=ex, ci_low=ex, ci_high=ex))
        lo, hi = interval_from_freq(grid, e.boot_freq.values)
        rows.append(dict(delta=d, source="mc", N=int(N), G_pred=float(const.loc[d,
                         "G_continuous"]), G_grid=pred, best_G=grid[int(np.argmin(e.mc.values))],
                         ci_low=lo, ci_high=hi))
    for (d, mode, N), e in tables["train"].groupby(["delta", "mode", "budget"]):
        by = {int(G): g.final_gap.values for G, g in e.groupby("G")}
        b = bootstrap_argmin(by, n_boot=n_boot, seed=int(N))
        best, lo, hi = int(b.best), int(b.lo), int(b.hi)
        c = gt.ScalingConstants(*(float(const.loc[d, k]) for k in ("c1", "c2", "c3")))
        rows.append(dict(delta=d, source=f"train_{mode}", N=int(N),
                         G_pred=float(const.loc[d, "G_continuous"]),
                         G_grid=grid_argmin(c, sorted(by)), best_G=best, ci_low=lo, ci_high=hi))
    lm = tables.get("lm")
    if lm is not None and len(lm):
        for r in lm.itertuples():
            rows.append(dict(delta=float("nan"), source=f"lm:{r.source}", label=str(r.label),
                             N=0, G_pred=float(r.G_pred), G_grid=-1, best_G=int(r.best_G),
                             ci_low=int(r.ci_low), ci_high=int(r.ci_high)))
    if len(tables.get("lm_train", ())):
        for r in lm_points(tables, n_boot).itertuples():
            rows.append(dict(delta=float("nan"), source="lm:train", label=f"p={r.p:g}", N=r.N,
                             G_pred=r.G_pred, G_grid=r.G_grid, best_G=r.best_G,
                             ci_low=r.ci_low, ci_high=r.ci_high))
    pts = pd.DataFrame(rows, columns=["delta", "source", "label", "N", "G_pred", "G_grid",
                                      "best_G", "ci_low", "ci_high"])
    pts["label"] = pts.label.astype(object).where(pts.label.notna(), "")
    # the grid prediction (training, MSE) or, for LM rows without a grid, the real G* itself
    target = np.where(pts.G_grid > 0, pts.G_grid, pts.G_pred)
    pts["in_ci"] = (pts.ci_low <= target) & (target <= pts.ci_high)
    return {"constants": tables["constants"], "points": pts}


def read_step(runs: pd.DataFrame) -> int:
    """The checkpoint at which an LM setting's best G is read, fixed before comparing G.

    Rule (independent of G, so not chosen from the G-differences): with the gain
    ``g(t) = mean over all runs (every G and seed) of J_p(t) - J_p(0)``, the read step is the
    first checkpoint t > 0 with ``g(t) >= g(T)/2``, T the last checkpoint (the half-rise of the
    across-G mean objective); when ``g(T) <= 0`` (no mean gain) it is T.

    Args:
        runs: the ``lm_train`` rows of one (p, N) (columns ``step``, ``J_mix``).
    Returns:
        The read step (an int checkpoint).
    """
    if not len(runs):
        raise ValueError("runs must hold at least one lm_train row")
    g = runs.groupby("step").J_mix.mean()
    if 0 not in g.index:
        raise ValueError("runs must hold step 0 (the starting policy)")
    g = g - g.loc[0]
    last = int(g.index.max())
    if g.loc[last] <= 0:
        return last
    return int(g[(g.index > 0) & (g >= g.loc[last] / 2)].index.min())


def steps_to_reach(steps, values, level: float = 0.9) -> float:
    """First step at which ``values`` reaches ``level``, linearly interpolated between
    checkpoints (``values[0] >= level``: ``steps[0]``; never reached: inf).

    Args:
        steps: increasing checkpoint steps; values: the measured quantity at those steps.
        level: the threshold.
    Returns:
        The interpolated step (float).
    """
    t, v = np.asarray(steps, np.float64), np.asarray(values, np.float64)
    if t.shape != v.shape or t.ndim != 1 or not len(t):
        raise ValueError(f"steps and values must be 1-d of one non-zero length, got {t.shape} "
                         f"and {v.shape}")
    if np.any(np.diff(t) <= 0):
        raise ValueError("steps must be strictly increasing")
    hit = np.flatnonzero(v >= level)
    if not len(hit):
        return float("inf")
    j = int(hit[0])
    if j == 0:
        return float(t[0])
    return float(t[j - 1] + (level - v[j - 1]) / (v[j] - v[j - 1]) * (t[j] - t[j - 1]))


def _best_g(acc: pd.DataFrame, seed: int, n_boot: int) -> dict:
    """:func:`bootstrap_best_g` on a G x seed table (maximised); seeds with a gap dropped."""
    acc = acc.dropna(axis=1)
    if acc.shape[1] == 0 or acc.shape[0] < 2:
        return {}
    return dict(bootstrap_best_g(acc, n_boot=n_boot, seed=seed), seeds=int(acc.shape[1]))


def lm_checkpoint_table(tables, n_boot: int = 2000) -> pd.DataFrame:
    """Best G of every trained LM concentration at every checkpoint (as lm-groupsize).

    Returns:
        DataFrame ``p, N, step, seeds, best_G, ci_low, ci_high, p_best, gain, V_fixed,
        mean_by_G`` (gain: across-G mean of J_p(step) - J_p(0); V_fixed: its mean over runs).
    """
    cols = ["p", "N", "step", "seeds", "best_G", "ci_low", "ci_high", "p_best", "gain",
            "V_fixed", "mean_by_G"]
    tr = tables["lm_train"]
    out = []
    for (p, N), e in tr.groupby(["p", "N"]):
        j0 = e[e.step == 0].J_mix.mean()
        for step, d in e[e.step > 0].groupby("step"):
            acc = d.pivot_table(index="G", columns="run_seed", values="J_mix")
            bs = _best_g(acc, int(N) + int(round(1000 * p)) + int(step), n_boot)
            if not bs:
                continue
            out.append(dict(p=float(p), N=int(N), step=int(step), seeds=bs["seeds"],
                            best_G=bs["best"], ci_low=bs["lo"], ci_high=bs["hi"],
                            p_best=bs["p_best"], gain=float(d.J_mix.mean() - j0),
                            V_fixed=float(d.V_fixed.mean()),
                            mean_by_G={int(g): float(a) for g, a in acc.mean(axis=1).items()}))
    return pd.DataFrame(out, columns=cols)


def lm_reach(tables, level: float = 0.9, n_boot: int = 2000) -> pd.DataFrame:
    """Steps until the fixed question's pass rate reaches ``level`` (:func:`steps_to_reach`,
    lower is better), per concentrated run; best G (smallest mean over seeds; a G with a run
    that never reaches it has mean inf) with a bootstrap 95% CI over seeds.

    Returns:
        DataFrame ``p, N, best_G, ci_low, ci_high, mean_by_G, reached`` (reached: runs that got
        there / runs); one row per (p > 0, N).
    """
    cols = ["p", "N", "best_G", "ci_low", "ci_high", "mean_by_G", "reached"]
    tr = tables["lm_train"]
    out = []
    for (p, N), e in tr[tr.p > 0].groupby(["p", "N"]):
        hits = [dict(G=int(G), run_seed=int(r), t=steps_to_reach(d.step, d.V_fixed, level))
                for (G, r), d in e.sort_values("step").groupby(["G", "run_seed"])]
        h = pd.DataFrame(hits).pivot_table(index="G", columns="run_seed", values="t",
                                           dropna=False)
        bs = _best_g(-h, int(N) + int(round(1000 * p)) + 7, n_boot)
        if not bs:
            continue
        fin = np.isfinite(h.to_numpy())
        out.append(dict(p=float(p), N=int(N), best_G=bs["best"], ci_low=bs["lo"],
                        ci_high=bs["hi"], reached=f"{int(fin.sum())}/{fin.size}",
                        mean_by_G={int(g): float(a) for g, a in h.mean(axis=1).items()}))
    return pd.DataFrame(out, columns=cols)


def lm_points(tables, n_boot: int = 2000) -> pd.DataFrame:
    """Predicted and best G of every trained LM concentration, read at :func:`read_step`.

    The best G maximises the mean over seeds of the mixture's exact objective ``J_p`` at the
    read step; its 95% CI resamples seeds within each G
    (:func:`simulations.lm_groupsize.bootstrap_best_g`). The prediction is the
    ``concentration`` knob row at the same p (c1, c2, c3 at the instruct policy):
    ``G_pred = 1 + sqrt(c3/c1)`` and ``G_grid``, the law's argmin on the trained grid.

    Returns:
        DataFrame ``p, N, G_pred, G_grid, best_G, ci_low, ci_high, seeds, p_best, step,
        last_step, last_best_G, last_ci_low, last_ci_high`` (step: the read step; last_*: the
        same at the last checkpoint); empty when there is no run.
    """
    cols = ["p", "N", "G_pred", "G_grid", "best_G", "ci_low", "ci_high", "seeds", "p_best",
            "step", "last_step", "last_best_G", "last_ci_low", "last_ci_high"]
    tr, kn = tables["lm_train"], tables["lm_knob"]
    if not len(tr):
        return pd.DataFrame(columns=cols)
    kn = kn[kn.knob == "concentration"]
    ck = lm_checkpoint_table(tables, n_boot)
    out = []
    for (p, N), e in tr.groupby(["p", "N"]):
        k = kn[np.isclose(kn.value.astype(float), p)]
        c = ck[(ck.p == p) & (ck.N == N)].set_index("step")
        if not len(k) or not len(c) or 0 not in set(e.step):
            continue
        rs, last = read_step(e), int(c.index.max())
        if rs not in c.index:
            continue
        k, r, z = k.iloc[0], c.loc[rs], c.loc[last]
        grid = sorted(int(g) for g in r.mean_by_G)
        const = gt.ScalingConstants(float(k.c1), float(k.c2), float(k.c3))
        out.append(dict(p=float(p), N=int(N), G_pred=float(k.G_continuous),
                        G_grid=grid_argmin(const, grid), best_G=int(r.best_G),
                        ci_low=int(r.ci_low), ci_high=int(r.ci_high), seeds=int(r.seeds),
                        p_best=float(r.p_best), step=rs, last_step=last,
                        last_best_G=int(z.best_G), last_ci_low=int(z.ci_low),
                        last_ci_high=int(z.ci_high)))
    return pd.DataFrame(out, columns=cols)


def checks(sm: dict) -> list:
    """The PASS rule (module docstring) as checks on :func:`summaries`."""
    c, p = sm["constants"], sm["points"]
    ex, mc = p[p.source == "exact"], p[p.source == "mc"]
    return [
        check("exact integer argmin of the fixed-budget MSE = exact-form G* (every member)",
              len(c) > 0 and bool((c.int_argmin == c.G_exact).all()), c.int_argmin, c.G_exact,
              detail=", ".join(f"δ={r.delta}: {r.int_argmin} vs {r.G_exact}"
                               for r in c.itertuples())),
        check("exact argmin over the grid = grid argmin of the law (every member and N)",
              len(ex) > 0 and bool((ex.best_G == ex.G_grid).all()), ex.best_G, ex.G_grid,
              detail=", ".join(f"δ={r.delta} N={r.N}: {r.best_G} vs {r.G_grid}"
                               for r in ex.itertuples())),
        check("Monte Carlo argmin's bootstrap 95% CI contains the prediction (every member and N)",
              len(mc) > 0 and bool(mc.in_ci.all()), mc.ci_low, mc.ci_high,
              detail=", ".join(f"δ={r.delta} N={r.N}: [{r.ci_low}, {r.ci_high}] ∋ {r.G_grid}?"
                               for r in mc.itertuples())),
    ]


def report(tables, s: Settings) -> Section:
    sm = summaries(tables, n_boot=s.n_boot)
    c, p = sm["constants"], sm["points"]
    lines = ["Scaling-law bandit with reward gap δ (`scaling_family_bandit(δ)`, at θ*; "
             "c1 ∝ δ², c3 ≈ const, so G* − 1 ∝ 1/δ).", "",
             "| δ | c1 | c2 | c3 | √(c3/c1) | 1+√(c3/c1) | exact G* | integer argmin of N·MSE "
             "| grid prediction | G* at θ0 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in c.itertuples():
        lines.append(f"| {r.delta} | {r.c1:.4g} | {r.c2:.4g} | {r.c3:.4g} | {r.G_paper:.2f} | "
                     f"{r.G_continuous:.2f} | {r.G_exact} | {r.int_argmin} | {r.G_grid} | "
                     f"{r.G_exact_initial} |")
    lines += ["", "**Best G by source** (exact: argmin of the exact MSE on the grid; mc: Monte "
              "Carlo argmin with a bootstrap 95% CI over replicates; train: Algorithm 1's best "
              "mean final gap with a bootstrap 95% CI over seeds):", "",
              "| δ | source | N | 1+√(c3/c1) | grid prediction | best G [95% CI] | prediction "
              "in CI |", "|---|---|---|---|---|---|---|"]
    for r in p.itertuples():
        lines.append(f"| {r.delta} | {r.source} {r.label} | {r.N} | {r.G_pred:.2f} | {r.G_grid} | "
                     f"{r.best_G} [{r.ci_low}, {r.ci_high}] | {'PASS' if r.in_ci else 'FAIL'} |")
    lines += ["", "| source | members | Spearman ρ (predicted, best G) (p-value) | share of CIs containing "
              "the prediction |", "|---|---|---|---|"]
    for src, e in p.groupby("source", sort=False):
        rho_s = _rho(e.G_pred, e.best_G)
        lines.append(f"| {src} | {len(e)} | {rho_s} | {e.in_ci.mean():.0%} |")
    both = p[(p.source == "train_per_step") | p.source.str.startswith("lm:")]
    if both.source.str.startswith("lm:").any() and (both.source == "train_per_step").any():
        rho_s = _rho(both.G_pred, both.best_G)
        lines.append(f"| training at a fixed per-step budget: bandit members + LM settings | "
                     f"{len(both)} | {rho_s} | {both.in_ci.mean():.0%} |")
    lm_lines, lm_checks = _lm_report(tables, s, p)
    lines += lm_lines
    tr = p[p.source.str.startswith("train")]
    miss = p[~p.in_ci]
    lines += ["", "Rows whose CI misses the prediction: " + (", ".join(
        f"{r.source} {r.label or f'δ={r.delta}'} (best {r.best_G} [{r.ci_low}, {r.ci_high}] "
        f"vs {r.G_grid if r.G_grid > 0 else round(r.G_pred, 1)})"
        for r in miss.itertuples()) or "none") + "."]
    lines += ["", f"Training agrees with the prediction (prediction inside the CI) in "
              f"{int(tr.in_ci.sum())} of {len(tr)} member/mode rows; this is measured, not "
              "gated. Where it fails, the reasons are the ones Theorem 7 does not cover: under a "
              "per-step budget the final gap is a noise floor ∝ η·MSE(B, G) only once θ is near "
              "θ*, and for small δ the N·MSE curve is nearly flat around G* (c2 dominates), so "
              "the seeds cannot resolve neighbouring G; under a total budget with B fixed, larger "
              "G means fewer, less noisy steps and the stationary floor keeps falling with G, so "
              "the best G there need not be G*.", "", "![](predicted_vs_best_G.png)"]
    return Section("The scaling law across a problem family (Theorem 7)", "\n".join(lines),
                   checks(sm) + lm_checks)


def _rho(x, y) -> str:
    """Spearman's rho (p-value) as report text; n/a below 3 distinct points."""
    r = spearman(x, y)
    return "n/a (< 3 members)" if np.isnan(r.rho) else f"{r.rho:.3f} (p = {r.pvalue:.2g})"


def _lm_report(tables, s: Settings, points: pd.DataFrame) -> tuple[list, list]:
    """The LM part's markdown (knob table, training table) and its checks."""
    kn, tr = tables["lm_knob"], tables["lm_train"]
    if s.lm is None and not len(kn) and not len(tr):
        if not len(tables["lm"]):
            return ["", "No language-model settings in this run (no LM cells in this "
                    "setting)."], []
        return [], []
    lines = ["", "**Language model** (the small transformer's instruct policy, lm-mse's warm-up; "
             "knob candidates measured there, the concentration p trained):", "",
             "| knob | value | method | c1 | c3 | G* = 1+√(c3/c1) [95% CI] | J |",
             "|---|---|---|---|---|---|---|"]
    for r in kn.itertuples():
        ci = (f" [{r.G_ci_low:.1f}, {r.G_ci_high:.1f}]" if np.isfinite(r.G_ci_low) else "")
        lines.append(f"| {r.knob} | {r.value} | {r.method} | {r.c1:.4g} | {r.c3:.4g} | "
                     f"{r.G_continuous:.1f}{ci} | {r.J:.3f} |")
    conc = kn[kn.knob == "concentration"]
    if len(conc):
        r0 = conc.iloc[0]
        lines += ["", f"Concentration: mass p on the fixed question `{r0.fixed}` (pass rate "
                  f"{r0.V_fixed:.3f} at the instruct policy, the closest to 1/2 of "
                  f"{s.lm.n_candidates if s.lm else 'the'} candidates), 1 − p on "
                  f"{int(r0.n_questions)} held-out questions; J is the mixture's objective."]
    pts = lm_points(tables, s.n_boot)
    ok_ps = [float(p) for p in (s.lm.ps if s.lm else ())]
    if len(tr):
        ck = lm_checkpoint_table(tables, s.n_boot)
        gs = sorted(int(g) for g in tr.G.unique())
        lines += ["", f"GRPO training (Algorithm 1, Adam) at N = {int(tr.N.iloc[0])}, 95% "
                  "bootstrap CIs over seeds. The step at which best G is read is fixed by a "
                  "rule that does not look at G (`read_step`): the first checkpoint where the "
                  "across-G mean gain of J_p over step 0 reaches half of its gain at the last "
                  "checkpoint (the last checkpoint when that gain is <= 0).", "",
                  "| p | seeds | predicted G* | grid prediction | read step | best G [95% CI] "
                  "at the read step | prediction in CI | best G [95% CI] at the last step |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in pts.itertuples():
            inside = r.ci_low <= r.G_grid <= r.ci_high
            lines.append(f"| {r.p:g} | {r.seeds} | {r.G_pred:.1f} | {r.G_grid} | {r.step} of "
                         f"{r.last_step} | {r.best_G} [{r.ci_low}, {r.ci_high}] | "
                         f"{'PASS' if inside else 'FAIL'} | {r.last_best_G} [{r.last_ci_low}, "
                         f"{r.last_ci_high}] |")
        lines += ["", f"Per checkpoint (mean J_p over seeds by G = {', '.join(map(str, gs))}; "
                  "gain: across-G mean of J_p − J_p(0); V(x_F): mean pass rate of the fixed "
                  "question; checkpoints up to 20 and every 10th shown, the read step in "
                  "bold):", "",
                  "| p | step | gain | V(x_F) | mean J_p by G | best G [95% CI] | grid prediction "
                  "in CI |", "|---|---|---|---|---|---|---|"]
        for r in pts.itertuples():
            for c in ck[(ck.p == r.p) & (ck.N == r.N)].itertuples():
                if not (c.step <= 20 or c.step % 10 == 0 or c.step == r.step):
                    continue
                st = f"**{c.step}**" if c.step == r.step else str(c.step)
                accs = " ".join(f"{c.mean_by_G.get(g, float('nan')):.3f}" for g in gs)
                inside = c.ci_low <= r.G_grid <= c.ci_high
                lines.append(f"| {r.p:g} | {st} | {c.gain:+.3f} | {c.V_fixed:.3f} | {accs} | "
                             f"{c.best_G} [{c.ci_low}, {c.ci_high}] | "
                             f"{'PASS' if inside else 'FAIL'} |")
        reach = lm_reach(tables, 0.9, s.n_boot)
        if len(reach):
            lines += ["", "A metric closer to the fixed question's learning speed (`lm_reach`): "
                      "steps until its pass rate V(x_F) reaches 0.9, interpolated between "
                      "checkpoints, lower is better (inf: a run that never reaches it).", "",
                      f"| p | runs reaching 0.9 | mean steps by G = {', '.join(map(str, gs))} | "
                      "best G [95% CI] | grid prediction in CI |", "|---|---|---|---|---|"]
            for r in reach.itertuples():
                gp = pts[pts.p == r.p].G_grid
                inside = ("PASS" if len(gp) and r.ci_low <= int(gp.iloc[0]) <= r.ci_high
                          else "FAIL" if len(gp) else "n/a")
                m = " ".join(f"{r.mean_by_G.get(g, float('nan')):.1f}" for g in gs)
                lines.append(f"| {r.p:g} | {r.reached} | {m} | {r.best_G} [{r.ci_low}, "
                             f"{r.ci_high}] | {inside} |")
        lines += ["", "Reading the LM rows (a CI that holds the prediction is agreement only "
                  "when it is narrow):"]
        for r in pts.itertuples():
            c = ck[(ck.p == r.p) & (ck.N == r.N)].set_index("step")
            n_in = sum(r.ci_low <= g <= r.ci_high for g in gs)
            last = c.loc[r.last_step]
            held = ("contains" if r.ci_low <= r.G_grid <= r.ci_high else "misses")
            rc = reach[reach.p == r.p] if len(reach) else reach
            hit = (f"; mean steps to V(x_F) >= 0.9 from {min(rc.mean_by_G.iloc[0].values()):.1f}"
                   f" to {max(rc.mean_by_G.iloc[0].values()):.1f} across G" if len(rc) else "")
            lines.append(f"- p = {r.p:g}: read at step {r.step} (gain {c.loc[r.step].gain:+.3f}"
                         f" of {last.gain:+.3f} at step {r.last_step}; V(x_F) "
                         f"{c.loc[r.step].V_fixed:.3f}, {last.V_fixed:.3f} at the end{hit}); the "
                         f"CI [{r.ci_low}, {r.ci_high}] covers {n_in} of {len(gs)} grid values "
                         f"and {held} the grid prediction {r.G_grid}.")
    pr = conc[np.isin(np.round(conc.value.astype(float), 9), np.round(ok_ps, 9))]
    span = (float(pr.G_continuous.max() / pr.G_continuous.min()) if len(pr) else float("nan"))
    ch = [check("LM: c1 > 0 (finite G*) at every trained concentration",
                len(pr) > 0 and bool((pr.c1 > 0).all()), pr.c1,
                detail=", ".join(f"p={r.value}: c1={r.c1:.3g}" for r in pr.itertuples())),
          check("LM: the trained concentrations' predicted G* span a factor >= 4",
                len(pr) > 0 and span >= 4, span,
                detail=f"G* {pr.G_continuous.min():.1f} to {pr.G_continuous.max():.1f} "
                       f"(x{span:.1f})" if len(pr) else "no prediction"),
          check("LM: every J_p is a probability", len(tr) > 0 and bool(tr.J_mix.between(0,
                1).all()), tr.J_mix.to_numpy(), detail=f"{len(tr)} values")]
    return lines, ch


MARKERS = {"exact": ("s", "exact MSE argmin"), "mc": ("o", "Monte Carlo argmin"),
           "train_per_step": ("^", "training, per-step budget"),
           "train_total": ("v", "training, total budget"),
           "lm:train": ("D", "language model, training (concentration p)")}


def plot(tables, s: Settings, out_dir) -> None:
    p = summaries(tables, n_boot=s.n_boot)["points"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    src = list(dict.fromkeys(p.source))
    n = max(1, len(src))
    for i, name in enumerate(src):
        e = p[p.source == name]
        mk, lab = MARKERS.get(name, ("D", f"language model ({name[3:]})"))
        jit = 1.0 + 0.04 * (i - (n - 1) / 2)  # small horizontal offset so markers do not overlap
        ax.errorbar(e.G_pred * jit, e.best_G, yerr=[e.best_G - e.ci_low, e.ci_high - e.best_G],
                    fmt=mk, ms=6 if name.startswith("lm:") else 5, capsize=2, label=lab,
                    alpha=0.85)
        if name.startswith("lm:"):
            for r in e.itertuples():
                ax.annotate(r.label, (r.G_pred * jit, r.best_G), fontsize=6,
                            xytext=(4, -8), textcoords="offset points")
    lo = max(1.5, 0.7 * float(np.nanmin(p[["G_pred", "ci_low"]].values)))
    hi = 1.4 * float(np.nanmax(p[["G_pred", "ci_high"]].values))
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="y = x")
    from matplotlib.ticker import NullLocator

    ticks = [2**k for k in range(1, 11) if lo <= 2**k <= hi]
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel="predicted G* = 1 + √(c3/c1)", ylabel="empirical best G (95% CI)",
           title="Scaling law across the δ family" + (" and LM concentrations" if any(
               x.startswith("lm:") for x in src) else ""))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_locator(NullLocator())
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))  # off the points
    save_figure(fig, out_dir / "predicted_vs_best_G")


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=23)
