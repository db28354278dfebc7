r"""``grpo-theory advise``: which group size G to use, from rollouts of a given policy.

Prompts (JSONL, one ``{"question": ..., "answer": ...}`` per line), a model (a checkpoint of the
package's small transformer, or a Hugging Face checkpoint directory,
:func:`grpo_theory.lm.from_pretrained`) and a reward (``reward(text, answer) -> float``; default the integer-answer reward
:func:`grpo_theory.lm.task.reward_text`) give ``n_samples`` responses for each of ``n_prompts``
prompts drawn from the file, hence (:func:`.estimate.estimate_scaling_constants`):

* the distribution of the per-prompt pass rates ``V-hat(x)``;
* the share of zero-variance (all-equal) groups of size G, predicted from ``V-hat`` as
  ``mean_x [V-hat^G + (1 - V-hat)^G]`` (binary rewards) and empirical: the share of all-equal
  G-subsets of the sampled responses (the unbiased estimate of ``E[V^G + (1-V)^G]``, G <= n).
  The plug-in prediction is biased upwards (``E[V-hat^G] >= V^G``, most for G near n), so
  trust the empirical column where it exists;
* c1, c2, c3 with 95% jackknife intervals, ``G* = 1 + sqrt(c3/c1)`` with its Fieller interval;
* the predicted GRPO / oracle MSE ratio per G,
  ``(c1 + c2/G + c3/(G(G-1))) / (c1 + c2/G)`` (Theorem 7);
* the recommended integer G for each budget N = BG: the minimiser of ``c1 G + c2 + c3/(G-1)``
  on ``[2, N]``, with the range the G* interval allows.
"""

from __future__ import annotations

import csv
import inspect
import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .. import _validation as V
from .._records import jsonl_records
from ..core import ResultMixin
from ..lm import (ModelOptions, integer_answer as _integer, load_policy, reward_answer_text,
                  reward_text)
from ..lm.budget import out_of_memory_as_value_error
from .pieces import MIN_PROMPTS, MIN_SAMPLES, t_quantile
from .estimate import estimate_scaling_constants
from .progress import Progress as _Progress, training_note, warmup_log
from .reward_spec import import_reward
from .result import ScalingEstimate


DEFAULT_GROUP_SIZES = (2, 4, 8, 16, 32, 64)
DEFAULT_BUDGETS = (256, 1024, 4096)


# --- inputs ---------------------------------------------------------------------------------------

def read_prompts(path, integer_answers: bool = False) -> list[dict]:
    """Read a JSONL prompt file: one JSON object with ``question`` (str) and ``answer`` per line.

    Blank lines are skipped.

    Args:
        path: the file (UTF-8).
        integer_answers: every answer must be an integer (a JSON integer, an integral number
            such as ``7.0``, or a string such as ``"7"``; returned as an int), as the default
            integer-answer reward needs: ``7.9`` is refused, not truncated.

    Returns:
        A list of ``{"question": str, "answer": ...}`` dicts.

    Raises:
        ValueError: a missing file, an empty file, or a bad line (its 1-based line number).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"prompts file {str(p)!r} does not exist")
    out = []
    for no, row in jsonl_records(p):
        if not isinstance(row, dict) or "question" not in row or "answer" not in row:
            raise ValueError(f"{p}:{no}: each line must be a JSON object with keys "
                             f"'question' and 'answer'")
        if not isinstance(row["question"], str) or not row["question"]:
            raise ValueError(f"{p}:{no}: 'question' must be a non-empty string")
        answer = row["answer"]
        if integer_answers:
            answer = integer_answer(answer, f"{p}:{no}")
        out.append({"question": row["question"], "answer": answer})
    if not out:
        raise ValueError(f"prompts file {str(p)!r} has no prompts")
    return out


#: the largest |reward| the advisor takes: squared rewards times squared score norms, summed
#: over pairs, stay inside float64 (a rescaled reward leaves G* unchanged)
MAX_REWARD = 1e150


def integer_answer(answer, where: str) -> int:
    """``answer`` as an int (an int, an integral float, a string of an integer), else a
    ``ValueError`` naming ``where`` (``7.9`` is refused, not truncated)."""
    try:
        return _integer(answer)
    except ValueError:
        raise ValueError(f"{where}: 'answer' must be an integer for the integer-answer "
                         f"reward, got {answer!r} (give --reward for other answers)") from None


def write_prompts(path, questions) -> Path:
    """Write the arithmetic task's questions (:class:`grpo_theory.lm.task.Questions`) as a
    JSONL prompt file (``{"question": text, "answer": int}`` per line); returns the path."""
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8") as fh:
        for t, a in zip(questions.text, np.asarray(questions.answer).tolist()):
            fh.write(json.dumps({"question": t, "answer": int(a)}) + "\n")
    return p


def exact_answer_reward(text, answer) -> float:
    """The answer-only format's reward: 1 iff ``text`` is the canonical integer (no sign ``+``,
    no leading zeros), so the correct response is unique and ``V(x) = pi(y*|x)``
    (:func:`grpo_theory.lm.task.reward_exact_tokens` on text)."""
    return 1.0 if text == str(_integer(answer)) else 0.0


#: the package's rewards of an integer answer (a prompts file's answers checked for them)
INTEGER_REWARDS = (reward_text, reward_answer_text, exact_answer_reward)


def load_reward(spec=None):
    """The reward ``reward(text, answer) -> float``: the integer-answer reward by default
    (:func:`grpo_theory.lm.task.reward_text`; :func:`advise` takes the model's own,
    :meth:`grpo_theory.lm.policy.LMPolicy.default_reward`), a callable, or a function named
    named ``"path/to/file.py:function"`` (that file, imported from its location) or
    ``"module:function"`` (from the normal import path, else the current folder's
    ``module.py``, which never shadows an installed module; :mod:`.reward_spec`).

    Raises:
        ValueError: a malformed spec, a module that cannot be imported, a missing or
            non-callable attribute.
    """
    if spec is None:
        return reward_text
    fn = spec if callable(spec) else import_reward(spec)
    _check_arity(fn, spec)
    return fn


def _check_arity(fn, spec) -> None:
    """Refuse a reward that cannot be called as ``reward(text, answer)``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: called as it is
        return
    try:
        sig.bind("text", "answer")
    except TypeError as e:
        name = spec if isinstance(spec, str) else getattr(fn, "__name__", repr(fn))
        raise ValueError(f"reward {name!r} must take two arguments (text, answer), its "
                         f"signature is {name.split(':')[-1]}{sig} ({e})") from None


def _integer_answers(reward_fn) -> bool:
    """Whether the reward compares the response with an integer answer (the package's
    integer-answer rewards): then every prompt's answer must be an integer."""
    return reward_fn is None or any(reward_fn is f for f in INTEGER_REWARDS)


# --- the result -----------------------------------------------------------------------------------

class FigureWarning(RuntimeWarning):
    """The advice figure could not be drawn (the result and its tables are unaffected)."""


def c1_warning(est: ScalingEstimate) -> str | None:
    """A warning when the recommendation rests on a c1 that is not clearly positive, else None.

    The between-prompt term c1 sets G* = 1 + sqrt(c3/c1); when its interval reaches 0 the
    data show no between-prompt spread and there is no recommended G
    (:meth:`~.result.ScalingEstimate.recommended_group_size` is ``None``). The jackknife standard error shrinks as 1/sqrt(m), so c1 is resolved
    (lower end of its interval above 0) from about ``m (t se / c)^2`` prompts if its true value
    is c: the estimate when it is positive, else the interval's upper end (a lower bound on the
    prompts needed).

    Args:
        est: the :class:`~.estimate.ScalingEstimate`.

    Returns:
        The warning text, or None when the c1 interval lies above 0.
    """
    lo, hi = est.c1_ci
    if lo > 0:
        return None
    m, se = est.n_prompts, float(est.bse[0])
    t = t_quantile(est.alpha, m)
    c = est.c1 if est.c1 > 0 else hi
    need = (f"about {math.ceil(m * (t * se / c) ** 2)} prompts would resolve it"
            + ("" if est.c1 > 0 else " even if c1 were at the upper end of its interval")
            if c > 0 and se > 0 else "no number of prompts can be read from this interval")
    return (f"WARNING: c1 is not resolved above 0 from {m} prompts (estimate {est.c1:.4g}, "
            f"{100 * (1 - est.alpha):g}% CI [{lo:.4g}, {hi:.4g}]): no G is recommended and "
            f"G* says only that these rollouts show no between-prompt spread; {need} (at "
            f"{est.n_samples} samples per prompt)")


@dataclass(frozen=True, eq=False)
class AdviceResult(ResultMixin):
    """What :func:`advise` found (``conf_int``/``summary``: those of ``estimate``).

    Attributes:
        estimate: the :class:`~.estimate.ScalingEstimate` (c1, c2, c3, G*, intervals).
        constants: ``pandas.DataFrame`` (c1, c2, c3, g_star, ...) with estimate and interval.
        by_group: ``pandas.DataFrame`` per G: zero-variance share (predicted, empirical) and the
            GRPO / oracle MSE ratio.
        budgets: ``pandas.DataFrame`` per budget N: recommended G (NaN, with B, when c1 is
            not resolved above 0: no recommendation) and the range allowed by the G* interval.
        prompt_values: (m,) the per-prompt pass rates ``V-hat``.
        files: paths written (CSV, figure).
        seconds: wall time.
        prompt_format: how the questions were turned into prompts (the checkpoint's chat
            template, raw text, or the package's character tokenizer).
        chunk: per-sample scores held at once (from the memory budget unless given).
    """

    estimate: ScalingEstimate
    constants: object
    by_group: object
    budgets: object
    prompt_values: np.ndarray = field(repr=False)
    files: tuple = ()
    seconds: float = 0.0
    prompt_format: str = ""
    chunk: int | None = None

    def _params(self):
        return self.estimate._params()

    def _bounds(self, alpha):
        return self.estimate._bounds(alpha)

    def text(self) -> str:
        """A plain-text report (what the command prints)."""
        e, v = self.estimate, self.prompt_values
        qs = np.quantile(v, [0.1, 0.5, 0.9])
        lines = [f"advise: {e.n_prompts} prompts x {e.n_samples} responses "
                 f"({self.seconds:.1f}s)"
                 + (f", {self.chunk} responses per block of the score pass" if self.chunk
                    else ""),
                 f"V-hat: mean {v.mean():.3f}, q10/median/q90 {qs[0]:.3f}/{qs[1]:.3f}/"
                 f"{qs[2]:.3f}, share V-hat=0 {np.mean(v == 0):.3f}, V-hat=1 {np.mean(v == 1):.3f}",
                 "constants (95% CI):"]
        if self.prompt_format:
            lines.insert(1, f"prompts: {self.prompt_format}")
        for name, r in self.constants.iterrows():
            lines.append(f"  {name:<12} {r.estimate:.4g}  [{r.ci_low:.4g}, {r.ci_high:.4g}]")
        lines.append("per G: zero-variance share (predicted | empirical), grpo/oracle MSE ratio, "
                     "noise scale B_noise (responses at which MSE = ||grad J||^2)")
        for _, r in self.by_group.iterrows():
            emp = "   -  " if np.isnan(r.zero_var_empirical) else f"{r.zero_var_empirical:.3f}"
            ns = getattr(r, "noise_scale", float("nan"))
            lines.append(f"  G={int(r.G):<4} {r.zero_var_predicted:.3f} | {emp}   "
                         f"{r.mse_ratio_grpo_oracle:.4g}   "
                         + ("-" if np.isnan(ns) else f"{ns:.4g}"))
        lines.append("recommended G per budget N = B G:")
        reason = e.no_recommendation_reason
        for _, r in self.budgets.iterrows():
            rec = "G=- (none)" if np.isnan(r.G) else f"G={int(r.G)} (B={int(r.B)})"
            lines.append(f"  N={int(r.N):<6} {rec}; G* interval allows "
                         f"G in [{int(r.G_low)}, {int(r.G_high)}]")
        if reason:
            lines.append(f"  no recommendation: {reason}")
        warning = c1_warning(e)
        if warning:
            lines.append(warning)
        if self.files:
            lines.append("wrote: " + ", ".join(str(f) for f in self.files))
        return "\n".join(lines)


def _range_for_budget(lo, hi, N):
    """Integer G in [2, N] allowed by a G* interval (lo, hi): floor(lo) .. ceil(hi), clipped."""
    g_lo = 2 if not math.isfinite(lo) else min(max(2, math.floor(lo)), N)
    g_hi = N if not math.isfinite(hi) else min(max(2, math.ceil(hi)), N)
    return g_lo, g_hi


def _tables(est: ScalingEstimate, group_sizes, budgets):
    import pandas as pd

    v = est.prompt_values
    z = np.asarray(est.rewards)
    binary = bool(np.all((z == 0) | (z == 1)))
    rows = []
    for G in group_sizes:
        pred = float(np.mean(v**G + (1 - v) ** G)) if binary else float("nan")
        emp = est.zero_variance_share(G) if binary and G <= est.n_samples else float("nan")
        orc = est.mse(1, G, "oracle")
        ratio = est.mse(1, G, "grpo") / orc if orc > 0 else float("nan")
        rows.append(dict(G=G, zero_var_predicted=pred, zero_var_empirical=emp,
                         mse_ratio_grpo_oracle=ratio,
                         budget_mse_N_times=est.c1 * G + est.c2 + est.c3 / (G - 1),
                         noise_scale=_noise_scale(est, G)))
    lo, hi = est.g_star_ci
    brows = []
    for N in budgets:
        G = est.recommended_group_size(N)  # None: no recommendation (c1 not resolved above 0)
        g_lo, g_hi = _range_for_budget(lo, hi, N)
        brows.append(dict(N=N, G=float("nan") if G is None else G,
                          B=float("nan") if G is None else N // G, G_low=g_lo, G_high=g_hi))
    return pd.DataFrame(rows), pd.DataFrame(brows)


def _noise_scale(est, G) -> float:
    """GRPO's noise scale B_noise(G) in responses (NaN while ||grad J||^2 is not estimated
    above 0)."""
    try:
        return est.noise_scale(G).value
    except ValueError:
        return float("nan")


def _figure(res: AdviceResult, stem):
    from ..plotting import plt, save_figure

    e = res.estimate
    fig, ax = plt.subplots(1, 4, figsize=(17, 3.6))
    ax[0].hist(res.prompt_values, bins=np.linspace(0, 1, 21), color="C0")
    ax[0].set(xlabel="V-hat(x) (per-prompt pass rate)", ylabel="prompts",
              title="prompt difficulty")
    t = res.by_group
    ax[1].plot(t.G, t.zero_var_predicted, "o-", label="predicted from V-hat")
    ax[1].plot(t.G, t.zero_var_empirical, "s--", label="empirical")
    ax[1].set(xlabel="G", ylabel="share", title="zero-variance groups")
    ax[1].legend()
    ax[2].plot(t.G, t.mse_ratio_grpo_oracle, "o-")
    ax[2].axhline(1, color="k", lw=0.5)
    ax[2].set(xlabel="G", title="predicted MSE ratio grpo / oracle")
    grid = np.unique(np.geomspace(2, max(t.G.max(), 64), 200).astype(int))
    ax[3].plot(grid, e.c1 * grid + e.c2 + e.c3 / (grid - 1), "-")
    lo, hi = e.g_star_ci
    if math.isfinite(e.g_star):
        ax[3].axvline(e.g_star, color="C3", label=f"G* = {e.g_star:.1f}")
    ax[3].axvspan(max(lo, 1) if math.isfinite(lo) else 1,
                  hi if math.isfinite(hi) else grid[-1], color="C3", alpha=0.15,
                  label="95% CI")
    ax[3].set(xlabel="G", ylabel="N x MSE(N/G, G)",
              title="GRPO MSE at a fixed budget N")
    ax[3].legend()
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for a in ax[1:]:
        a.set_xscale("log", base=2)
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        a.xaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    return save_figure(fig, stem)


def _write_csv(path, rows, header):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


# --- the command's logic --------------------------------------------------------------------------

def advise(prompts, model="instruct", reward=None, *, n_prompts: int = 64, n_samples: int = 16,
           budgets=DEFAULT_BUDGETS, group_sizes=DEFAULT_GROUP_SIZES, out=None, seed: int = 0,
           fmt: str = "answer", response_len: int | None = None, chunk: int | None = None,
           progress: bool = True, cache_dir=None, warmup=None, figure: bool = True,
           memory_budget: int | None = None, dtype: str | None = None,
           pad_id: int | None = None, chat_template: bool = True,
           options: ModelOptions | None = None) -> AdviceResult:
    """Estimate c1, c2, c3 and G* of ``model`` on ``prompts`` and recommend G per budget.

    The model's own capabilities make the prompts, the default reward and response length and
    the memory per sequence (the contract of :class:`grpo_theory.lm.policy.LMPolicy`); this
    function checks the inputs and writes the report.

    Args:
        prompts: a JSONL file (:func:`read_prompts`) or a list of ``{"question", "answer"}``.
        model: see :func:`grpo_theory.lm.checkpoints.load.load_policy` (package name, ``.npz``
            checkpoint, Hugging Face directory, ``.gguf`` file or an ``LMPolicy``).
        reward: ``reward(text, answer) -> float``, ``"module:function"``, or None (the model's
            :meth:`~grpo_theory.lm.policy.LMPolicy.default_reward`: the integer-answer reward
            :func:`grpo_theory.lm.task.reward_text` for the package's model,
            :func:`grpo_theory.lm.task.reward_answer_text`, which allows trailing punctuation
            and markup such as ``"42."``, for a Hugging Face model).
        n_prompts: m >= 3 prompts, drawn uniformly with replacement from the file.
        n_samples: n >= 3 responses per prompt.
        budgets: budgets N >= 2 (responses per step).
        group_sizes: G >= 2 at which the tables are given.
        out: folder for ``advice_constants.csv``, ``advice_groups.csv``, ``advice_budgets.csv``,
            ``advice_prompts.csv`` and ``advice.png``/``.pdf`` (None: write nothing).
        seed: integer seed.
        fmt: ``"answer"`` or ``"trace"``: the package model's format marker (``=`` or ``:``),
            appended to questions that do not end with one; ignored for Hugging Face models.
        response_len: tokens sampled per response (default: the model's
            :meth:`~grpo_theory.lm.policy.LMPolicy.default_response_len`: the package format's
            length, 32 for a Hugging Face model).
        chunk, memory_budget, dtype, pad_id: the fields of ``options`` when it is not given
            (:class:`~grpo_theory.lm.budget.options.ModelOptions`).
        progress: progress bars (terminal) or plain lines (stderr) for loading, sampling,
            per-sample scores and pass 2 (per-prompt dot products or gradients).
        cache_dir, warmup: the package checkpoints' cache
            (:func:`grpo_theory.lm.checkpoints.load.load_policy`).
        figure: draw the figure when ``out`` is given.
        chat_template: a Hugging Face checkpoint with a chat template gets each question as a
            user message rendered by it (:meth:`grpo_theory.lm.checkpoints.hf.HFPolicy.chat`, the
            assistant's turn opened), as the ``lm-*`` studies do; False (or a checkpoint
            without one): the raw question text. Stated in the result's ``prompt_format``.
        options: the model options, built once (e.g. by the command line): ``chunk``
            (sequences per block of the score pass; None: the largest that fits in
            ``memory_budget``, None: half the available memory), ``dtype`` and ``pad_id`` (a
            checkpoint's). Give either ``options`` or the four keywords.

    Raises:
        ValueError: bad input, a budget too small for chunk 1, or an out-of-memory error of
            XLA (naming ``--memory-budget`` and ``--chunk``).

    Returns:
        :class:`AdviceResult`.
    """
    t0 = time.time()
    n = V.integer("n_samples", n_samples)
    m = V.integer("n_prompts", n_prompts)
    if n < MIN_SAMPLES:
        raise ValueError(f"n_samples must be >= {MIN_SAMPLES}, got {n}")
    if m < MIN_PROMPTS:
        raise ValueError(f"n_prompts must be >= {MIN_PROMPTS}, got {m}")
    budgets = tuple(V.integer("budgets", b, 2) for b in budgets)
    group_sizes = tuple(V.integer("group_sizes", g, 2) for g in group_sizes)
    if not budgets or not group_sizes:
        raise ValueError("budgets and group_sizes must be non-empty")
    if fmt not in ("answer", "trace"):
        raise ValueError(f"fmt must be 'answer' or 'trace', got {fmt!r}")
    reward_fn = None if reward is None else load_reward(reward)  # fails before loading
    if isinstance(prompts, (str, os.PathLike)):
        rows = read_prompts(prompts, integer_answers=_integer_answers(reward_fn))
    else:
        rows = list(prompts)
        if _integer_answers(reward_fn):
            rows = [dict(r, answer=integer_answer(r["answer"], f"prompts[{i}]"))
                    for i, r in enumerate(rows)]
    if not rows:
        raise ValueError("prompts must be non-empty")
    if options is None:
        options = ModelOptions(memory_budget=memory_budget, chunk=chunk, dtype=dtype,
                               pad_id=pad_id)
    elif not isinstance(options, ModelOptions):
        raise ValueError(f"options must be a ModelOptions, got {type(options).__name__}")
    elif any(v is not None for v in (chunk, memory_budget, dtype, pad_id)):
        raise ValueError("give options or (chunk, memory_budget, dtype, pad_id), not both")
    chat_template = V.boolean("chat_template", chat_template)
    if response_len is not None:
        response_len = V.positive_int("response_len", response_len)
    bar = _Progress(progress)
    note = training_note(model, cache_dir, warmup)  # a package model not yet trained
    if note is not None and progress:
        print(note, file=sys.stderr, flush=True)
    bar.stage("loading", 0, 1)
    with out_of_memory_as_value_error("loading the model"):
        policy = load_policy(model, options, cache_dir=cache_dir, warmup=warmup,
                             log=warmup_log(bar))
    bar.stage("loading", 1, 1)
    if reward_fn is None:  # a chat model's answer may end a sentence: "42."
        reward_fn = policy.default_reward()
    questions = [r["question"] for r in rows]
    answers = [r["answer"] for r in rows]
    pool, prompt_format = policy.question_prompts(questions, fmt=fmt, chat_template=chat_template)
    R = policy.default_response_len(fmt) if response_len is None else response_len

    # before any sampling: a budget too small for chunk 1 fails now (a checkpoint on the
    # ghost-norm route is budgeted by its activations per sequence)
    chunk = options.resolve_chunk(policy, m * n, seq_len=pool.shape[1] + R, response_len=R,
                                  group_size=n)

    def tok_reward(rws, y):
        out = np.empty(len(rws))
        for i, (r, t) in enumerate(zip(np.asarray(rws).tolist(), policy.response_texts(y))):
            val = reward_fn(t, answers[r])
            try:
                out[i] = float(val)
            except (TypeError, ValueError):
                raise ValueError(f"reward must return a number, got {val!r}") from None
            if not abs(out[i]) <= MAX_REWARD:
                raise ValueError(f"reward returned {val!r} for prompt {r}: rewards must be "
                                 f"finite with |r| <= {MAX_REWARD:g} (the advisor's constants "
                                 f"are products of squared rewards, beyond float64 past that); "
                                 f"rescale the reward (G* does not change)")
        return out

    if progress:
        print(f"advise: {m} x {n} responses of {R} tokens, {chunk} responses per block of the "
              f"score pass; prompts: {prompt_format}", file=sys.stderr, flush=True)
    # the chunk fixed, the budget kept (the sampler's blocks are sized by it)
    est = estimate_scaling_constants(policy, m, n, seed, prompts=pool, reward=tok_reward,
                                     response_len=R, progress=bar, stage=bar.stage,
                                     options=replace(options, chunk=chunk))
    warning = c1_warning(est)
    if warning:
        warnings.warn(warning, stacklevel=2)
    constants = est.summary()
    by_group, by_budget = _tables(est, group_sizes, budgets)
    res = AdviceResult(est, constants, by_group, by_budget, est.prompt_values, (),
                       time.time() - t0, prompt_format, chunk)
    if out is None:
        return res
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    p = out / "advice_constants.csv"
    constants.to_csv(p, index_label="parameter")
    files.append(p)
    for name, table in (("advice_groups.csv", by_group), ("advice_budgets.csv", by_budget)):
        table.to_csv(out / name, index=False)
        files.append(out / name)
    p = out / "advice_prompts.csv"
    _write_csv(p, [(i, float(v)) for i, v in enumerate(est.prompt_values)],
               ["sampled_prompt", "V_hat"])
    files.append(p)
    if figure:
        try:
            files += _figure(res, out / "advice")
        except Exception as e:  # the numbers are written; a figure is not worth losing them
            warnings.warn(f"the figure was not drawn ({type(e).__name__}: "
                          f"{' '.join(str(e).split())})", FigureWarning, stacklevel=2)
    return AdviceResult(est, constants, by_group, by_budget, est.prompt_values, tuple(files),
                        time.time() - t0, prompt_format, chunk)
