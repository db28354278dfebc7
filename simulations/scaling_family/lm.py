r"""scaling-family's language-model cells: candidate knobs' G* and GRPO runs at a concentration.

The small transformer's instruct policy (lm-mse's warm-up, shared through ``cache_dir()/lm``).
``lm_knob`` cells (:func:`knob_cell`, one per knob, a row per value) measure G* for: the
difficulty spread ``hard_fraction``, the sampling ``temperature`` (exact answer-only route,
:func:`grpo_theory.lm.training.grpo.predicted_group_size`), the response ``format`` (answer vs
reasoning trace, the advisor's sample-based route with a 95% CI) and the prompt ``concentration`` p
(:mod:`grpo_theory.experiments.lm_support.mixture`): the training distribution puts mass p on one
fixed question (the candidate whose pass rate at the instruct policy is closest to 1/2) and 1 − p on
the held-out questions. c1 is the between-prompt variance of g(x) = V s*, which vanishes like (1 −
p) as p → 1 while c3 (within-group noise) stays, so G* − 1 grows like (1 − p)^(−1/2).

``lm_train`` cells (:func:`train_cell`, one per p x G x seed): Algorithm 1 (Adam,
:func:`grpo_theory.lm.training.grpo.train_grpo`) at budget N on a pool of fixed size holding the
fixed question p·n_pool times (uniform draws realise the mixture exactly; one compiled shape per G
for every p), with the mixture's exact objective J_p = p V(x_F) + (1 − p) mean_R V at every
checkpoint (every ``checkpoint_every`` steps; the concentrated runs are ``steps_concentrated``
long). Their analysis is in ``lm_report``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import jax
import numpy as np

from grpo_theory.advisor import estimate_scaling_constants
from grpo_theory.experiments import Cell, key_seed
from grpo_theory.experiments.lm_support import mixture as mx
from grpo_theory.lm import (RESPONSE_LEN, encode_prompts, eval_set, predicted_group_size, reward,
                            study_policies as policies, target_responses, train_grpo, train_pool)


__all__ = ["LM_KNOBS", "FIXED_SEED", "LMPart", "lm_cells", "setup", "knob_cell", "train_cell"]

LM_KNOBS = ("hard_fraction", "temperature", "format", "concentration")
FIXED_SEED = 4242  # seed of the candidate questions the fixed (concentrated) one is picked from


@dataclass(frozen=True)
class LMPart:
    """The language-model part of scaling-family (this module's docstring).

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


def setup(config: dict):
    """Instruct policy, held-out questions R, training questions and the fixed question (the
    candidate whose pass rate at the instruct policy is closest to 1/2)."""
    w = config["warmup"]
    pol = policies(w)["instruct"][0]
    rest = eval_set(w.task).subset(np.arange(config["n_eval"]))
    cand = train_pool(w.task, n=config["n_candidates"], seed=FIXED_SEED)
    fixed = cand.subset([mx.pick_fixed_question(pol, cand)])
    return pol, rest, fixed


def knob_cell(config: dict, key) -> list[dict]:
    """G* at the instruct policy for every value of one candidate knob (module docstring)."""
    pol, rest, fixed = setup(config)
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


def train_cell(config: dict, key) -> list[dict]:
    """One GRPO run (Algorithm 1, Adam) on the concentrated pool; the mixture's exact objective
    ``J_p = p V(x_F) + (1 - p) mean_R V`` at every checkpoint."""
    pol, rest, fixed = setup(config)
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
