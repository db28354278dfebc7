r"""GRPO training of the language model (Algorithm 1) and the predicted optimal group size.

One step: draw B prompts uniformly from the training pool, G responses each (budget N = B G),
rewards, advantages from the registry estimator (``grpo`` = leave-one-out, or any other name,
e.g. ``grpo_std`` for the practical variant), and an Adam step on the surrogate
``-(1/BG) sum_bg A_bg log pi(y_bg|x_b)`` whose gradient is minus the estimator of Algorithm 1.
The practical variant (``estimator="grpo_std"``, ``epochs > 1``, ``clip_eps``) reuses each batch
for ``epochs`` full-batch Adam updates of the clipped surrogate
:func:`~grpo_theory.lm.training.loop.clipped_objective`
(token-level ratios to the sampling policy, summed over the response's tokens, as in PPO/GRPO
implementations without per-sequence length normalisation). Steps run under ``lax.scan``
between checkpoints; at each checkpoint the held-out accuracy is the *exact* expected reward
of the answer-only format, ``J = mean_x pi(y*|x)`` (teacher forcing, no sampling noise).

Predicted G* (Theorem 7) at the starting policy, answer-only format where
``g(x) = V(x) s*(x)`` exactly: ``c1 = mean_x V^2 ||s*||^2 - ||grad J||^2``,
``c2 = mean_x tr Sigma_or(x)``, ``c3 = mean_x [E||s||^2 V (1 - V) + V^2 ||s*||^2]``
(``E||s||^2`` from samples), ``G* = 1 + sqrt(c3 / c1)`` (the paper's form ``sqrt(c3/c1)``).
:func:`grpo_theory.experiments.lm_support.advised.advised_group_size` gives the same constants for
any policy, a Hugging Face checkpoint included, from the advisor's sample-based unbiased estimators,
with 95% intervals.

A Hugging Face checkpoint (:class:`~grpo_theory.lm.checkpoints.hf.HFPolicy`) trains on text prompts
in its own tokenization (:func:`task_tokens`); the reward inside the jitted loop is the exact-token
match of the canonical tokenization of the answer followed by the checkpoint's EOS.
"""

from __future__ import annotations

from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ... import _validation as V
from ...core import ScalingConstants, budget_mse
from ..checkpoints.hf import HFPolicy
from .loop import LMVariant, train_chunk
from ..policy import LMPolicy
from ..task import RESPONSE_LEN, encode_prompts, target_responses


#: the user message for a Hugging Face checkpoint with a chat template (``{question}``: the
#: question's text, e.g. ``12+5-3``)
CHAT_PROMPT = "Compute {question}. Reply with the integer only."
#: the prompt text for a Hugging Face checkpoint without a chat template (the package's
#: answer-only prompt)
PLAIN_PROMPT = "{question}="
#: rows per teacher-forced block of a Hugging Face model (its logits are (rows, T, vocab))
_HF_BLOCK = 64


def _is_hf(policy) -> bool:
    return isinstance(policy, HFPolicy)


def task_tokens(policy: LMPolicy, questions) -> tuple[np.ndarray, np.ndarray]:
    """Prompts (N, P) and canonical answer-only responses (N, R) of ``questions`` for ``policy``.

    The package's transformer: its character tokenizer (:func:`~grpo_theory.lm.task.encode_prompts`,
    :func:`~grpo_theory.lm.task.target_responses`; ``R = RESPONSE_LEN["answer"]``). A Hugging Face
    checkpoint (:class:`~grpo_theory.lm.checkpoints.hf.HFPolicy`): the text :data:`CHAT_PROMPT`
    rendered by the checkpoint's chat template when it has one
    (:meth:`~grpo_theory.lm.checkpoints.hf.HFPolicy.chat`), else :data:`PLAIN_PROMPT`, tokenized by
    :meth:`~grpo_theory.lm.checkpoints.hf.HFPolicy.encode` (left-padded with ``pad_id``, masked out
    of attention); the canonical response ``y*(x)`` is the tokenizer's ids of ``str(answer)`` (no
    special tokens) followed by the first EOS id, right-padded with ``pad_id`` (what the sampler
    writes after EOS) to the longest, so ``R = max len + 1``. The exact-token reward
    (:func:`~grpo_theory.lm.task.reward_exact_tokens`) is then a match of this canonical
    tokenization: the correct response is unique and ``V(x) = pi(y*|x)``.

    Args:
        policy: an :class:`~grpo_theory.lm.policy.LMPolicy` (the package's) or an
            :class:`~grpo_theory.lm.checkpoints.hf.HFPolicy`.
        questions: :class:`~grpo_theory.lm.task.Questions`.

    Returns:
        ``(prompts, canonical)`` int32 arrays.
    """
    if not _is_hf(policy):
        return encode_prompts(questions, "answer"), target_responses(questions, "answer")
    if policy.chat_template is not None:
        texts = policy.chat([CHAT_PROMPT.format(question=q) for q in questions.text])
    else:
        texts = [PLAIN_PROMPT.format(question=q) for q in questions.text]
    x = policy.encode(texts)
    ids = [policy.tokenizer.encode(str(int(a)), add_special_tokens=False).ids + [
        policy.eos_ids[0]] for a in np.asarray(questions.answer).tolist()]
    canon = np.full((len(ids), max(len(i) for i in ids)), policy.pad_id, np.int32)
    for row, i in zip(canon, ids):
        row[:len(i)] = i
    return x, canon


def pass_rates(policy: LMPolicy, x, canon) -> np.ndarray:
    """``V(x) = pi(y*|x)`` per prompt by teacher forcing (in blocks of rows for a Hugging Face
    model): the exact pass rates of the answer-only format.

    Args:
        policy: an :class:`~grpo_theory.lm.policy.LMPolicy` or
            :class:`~grpo_theory.lm.checkpoints.hf.HFPolicy`.
        x: (N, P) prompts; canon: (N, R) canonical responses (:func:`task_tokens`).

    Returns:
        (N,) float64 pass rates.
    """
    block = _HF_BLOCK if _is_hf(policy) else len(x)
    lp = [np.asarray(policy.log_probs(x[i:i + block], canon[i:i + block]), np.float64)
          for i in range(0, len(x), block)]
    return np.exp(np.concatenate(lp))


def exact_answer_quantities(policy: LMPolicy, x, canon, chunk=256):
    """Answer-only: ``V = pi(y*|x)`` (B,), ``||s*||^2`` (B,) and ``grad J = mean_x V s*`` (D,)."""
    b = x.shape[0]
    v = np.exp(np.asarray(policy.log_probs(x, canon), np.float64))
    gj, sq = policy.score_contractions(x, canon, (v / b)[None, :], chunk=chunk)
    return v, sq, gj[0]


def exact_accuracy(policy: LMPolicy, x, canon) -> float:
    """``mean_x pi(y*|x)``: the exact expected reward on the questions (answer-only)."""
    return float(np.mean(pass_rates(policy, x, canon)))


def predicted_group_size(policy: LMPolicy, questions, n_samples: int, seed: int,
                         chunk: int = 256, *, key=None) -> dict:
    """c1, c2, c3 and G* at the policy (module doc); ``n_samples`` responses per question.

    Also the spread of the per-question pass rates ``V(x)`` (quantiles, share below 5% and
    above 95%): the difficulty spread that decides how often a group is all-wrong or all-right.
    ``key`` (a JAX key or an integer) is used instead of the integer ``seed`` when given.
    """
    x = encode_prompts(questions, "answer")
    canon = target_responses(questions, "answer")
    b = len(questions)
    v, s_star_sq, gj = exact_answer_quantities(policy, x, canon, chunk)
    xs = np.repeat(x, n_samples, axis=0)
    y = np.asarray(policy.sample(V.random_key(seed, key), xs, RESPONSE_LEN["answer"]))
    _, sq = policy.score_contractions(xs, y, np.zeros((1, xs.shape[0])), chunk=chunk)
    s2 = sq.reshape(b, n_samples).mean(1)
    gx2 = v**2 * s_star_sq
    m = s2 - v * s_star_sq  # M: E||s||^2 over wrong answers
    tr_or = v * (1 - v) ** 2 * s_star_sq + v**2 * m - gx2
    c1 = float(gx2.mean() - gj @ gj)
    c2 = float(tr_or.mean())
    c3 = float((s2 * v * (1 - v) + gx2).mean())
    r = np.sqrt(c3 / c1) if c1 > 0 else np.inf
    return dict(c1=c1, c2=c2, c3=c3, G_paper=float(r), G_continuous=float(1 + r),
                G_exact=best_integer_group_size(ScalingConstants(c1, c2, c3)),
                **pass_rate_spread(v))


def best_integer_group_size(consts: ScalingConstants) -> int:
    """Integer G in [2, 4096] minimising the budget MSE ``c1 G + c2 + c3/(G - 1)`` (Theorem 7;
    4096 when c1 <= 0)."""
    grid = np.arange(2, 4097)
    return int(grid[np.argmin(budget_mse(consts, grid))]) if consts.c1 > 0 else int(grid[-1])


def pass_rate_spread(v) -> dict:
    """Mean pass rate ``J`` and the spread of the per-prompt pass rates ``v``: quantiles 10 / 50 /
    90% and the shares below 5% and above 95% (the prompts whose groups are nearly always
    all-wrong or all-right)."""
    return dict(J=float(v.mean()), V_q10=float(np.quantile(v, 0.1)),
                V_median=float(np.median(v)), V_q90=float(np.quantile(v, 0.9)),
                frac_V_below_5pct=float(np.mean(v < 0.05)),
                frac_V_above_95pct=float(np.mean(v > 0.95)))


#: the optimisers :func:`train_grpo` accepts (each after global-norm clipping at 1)
OPTIMIZERS = {"adam": optax.adam, "sgd": optax.sgd}


@lru_cache(maxsize=None)
def cached_optimizer(lr: float, name: str = "adam"):
    """One optimiser object per (learning rate, name): it is a static argument of the jitted
    chunk, so a fresh object per run would recompile (and keep) a new executable for every
    run."""
    return optax.chain(optax.clip_by_global_norm(1.0), OPTIMIZERS[name](lr))


def train_grpo(policy: LMPolicy, pool, eval_questions, budget: int, group_size: int,
               n_steps: int, checkpoints, lr: float, seed: int, estimator: str = "grpo",
               epochs: int = 1, clip_eps: float | None = None, log=None,
               on_checkpoint=None, *, key=None, optimizer: str = "adam") -> list[dict]:
    """Algorithm 1 (Adam) from ``policy`` at budget ``N = B G``; returns one row per checkpoint
    (step, exact held-out accuracy, mean training reward since the last checkpoint).
    ``optimizer="sgd"`` takes plain SGD steps instead of Adam (both after clipping the update's
    global norm at 1, :data:`OPTIMIZERS`).
    ``epochs > 1`` or ``clip_eps`` select the practical clipped multi-epoch variant.
    Integers may be Python, NumPy or JAX integers; the seed becomes a key as everywhere else
    (:func:`grpo_theory._validation.seed_key`); ``key`` (a JAX key or an integer) is used instead
    of ``seed`` when given. Calls with equal shapes, estimator and
    learning rate reuse the compiled steps. Sampling and log-probs use the policy's
    ``temperature`` and ``eos_ids``. ``on_checkpoint(step, policy)``, when given, is called at
    step 0 and at every checkpoint with the policy at that step (e.g. to measure the gradient's
    rank along the run). Prompts and canonical responses come from :func:`task_tokens`, so a
    Hugging Face checkpoint trains on its own tokenization (exact-token reward: a match of the
    canonical tokenization of the answer followed by the checkpoint's EOS)."""
    budget = V.integer("budget", budget, 2)
    group_size = V.integer("group_size", group_size, 2)
    n_steps = V.integer("n_steps", n_steps, 1)
    if budget % group_size:
        raise ValueError(f"group_size must be >= 2 and divide budget={budget}, got {group_size}")
    if policy.sample_fn is None:
        raise ValueError("policy needs a jit-able sample_fn for GRPO training")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
    batch = budget // group_size
    checkpoints = sorted({int(c) for c in checkpoints if 0 < c <= n_steps} | {n_steps})
    px, pc = task_tokens(policy, pool)
    pool_x, pool_c = jnp.asarray(px), jnp.asarray(pc)
    ex, ec = task_tokens(policy, eval_questions)
    opt = cached_optimizer(float(lr), optimizer)
    variant = LMVariant(estimator, group=group_size, epochs=epochs, clip_eps=clip_eps)
    params = policy.params
    opt_state = opt.init(params)
    state = variant.est.initial_state(len(px))
    key = V.random_key(seed, key)
    rows = [dict(step=0, accuracy=exact_accuracy(policy, ex, ec), train_reward=float("nan"))]
    if on_checkpoint is not None:
        on_checkpoint(0, policy)
    done = 0
    for c in checkpoints:
        key, k = jax.random.split(key)
        params, opt_state, state, out = train_chunk(
            policy.apply_fn, policy.sample_fn, opt, variant, params, opt_state, state, k,
            pool_x, pool_c, ex, ec, batch, c - done, policy.temperature, policy.eos_ids)
        rew = out["reward"]
        done = c
        now = policy.with_params(params)
        acc = exact_accuracy(now, ex, ec)
        if on_checkpoint is not None:
            on_checkpoint(c, now)
        rows.append(dict(step=c, accuracy=acc, train_reward=float(np.mean(rew))))
        if log is not None:
            log(f"N={budget} G={group_size} step {c}/{n_steps} reward {np.mean(rew):.3f} "
                f"held-out accuracy {acc:.3f}")
    return rows
