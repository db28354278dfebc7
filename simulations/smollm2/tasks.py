r"""The SmolLM2 study's prompt families and pass rates (the study: ``study``).

Candidate families of one-digit and two-digit arithmetic questions (:data:`CANDIDATES`), each
question "What is a op b?" (plus the family's instruction) sent in the checkpoint's chat
template with the assistant's turn prefilled with "a op b ="; :func:`sample_pass_rates` samples
responses without gradients and :func:`choose_task` picks the family with the most prompts in
the pass-rate window.
"""

from __future__ import annotations

import sys

import jax
import numpy as np
import pandas as pd

from grpo_theory import _validation as V
from grpo_theory.lm.checkpoints import response_texts
from grpo_theory.lm import reward_answer_text

__all__ = ["NUMBER_ONLY", "CANDIDATES", "family_size", "candidate_questions", "sample_pass_rates",
           "choose_task"]

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
_ADD1 = [("+", a, b) for a in range(1, 10) for b in range(1, 10)]
_SUB1 = [("-", a, b) for a in range(1, 10) for b in range(1, a + 1)]
#: the instruction appended to the user turn of the ``-n`` families
NUMBER_ONLY = " Answer with the number only."
#: candidate families: name -> (questions (op, a, b), instruction appended to the user turn);
#: one-digit +, -, x, one-digit + two-digit, two-digit + two-digit, and the one-digit
#: additions and subtractions with the instruction :data:`NUMBER_ONLY` (``addsub1-n``: both)
_FAMILIES = {
    "add1": (_ADD1, ""),
    "sub1": (_SUB1, ""),
    "mul1": ([("*", a, b) for a in range(2, 10) for b in range(2, 10)], ""),
    "add12": ([("+", a, b) for a in range(2, 10) for b in range(11, 99, 7)], ""),
    "add2": ([("+", a, b) for a in range(11, 99, 6) for b in range(11, 99, 7)], ""),
    "add1-n": (_ADD1, NUMBER_ONLY),
    "sub1-n": (_SUB1, NUMBER_ONLY),
    "addsub1-n": (_ADD1 + _SUB1, NUMBER_ONLY),
}
#: candidate prompt families (:data:`_FAMILIES`); every prompt is the user turn "What is a op b?"
#: (plus the family's instruction) with the assistant's turn opened by the chat template and
#: prefilled with "a op b =", so the response starts at the answer
CANDIDATES = tuple(_FAMILIES)


def family_items(name):
    """(user questions, assistant prefills, answers) of a candidate family, in a fixed order."""
    if name not in _FAMILIES:
        raise ValueError(f"task must be one of {list(CANDIDATES)}, got {name!r}")
    items, instruction = _FAMILIES[name]
    return ([f"What is {a} {op} {b}?{instruction}" for op, a, b in items],
            [f"{a} {op} {b} =" for op, a, b in items], [_OPS[op](a, b) for op, a, b in items])


def family_size(name: str) -> int:
    """How many distinct questions family ``name`` has."""
    return len(family_items(name)[0])


def candidate_questions(name: str, n_prompts: int, seed: int):
    """``n_prompts`` distinct questions of family ``name`` drawn without replacement.

    Args:
        name: one of :data:`CANDIDATES`.
        n_prompts: how many (at most the family's size, :func:`family_size`).
        seed: integer seed (the same seed gives the same questions).

    Returns:
        ``(questions list[str], prefills list[str], answers (n,) int)``.
    """
    qs, pre, ans = family_items(name)
    n = V.integer("n_prompts", n_prompts, 1, len(qs))
    rows = np.sort(np.random.default_rng(seed).choice(len(qs), n, replace=False))
    return [qs[i] for i in rows], [pre[i] for i in rows], np.asarray(ans)[rows]


def chat_prompts(policy, questions, prefills):
    """Chat-template prompts (left-padded ids): the user turn, the assistant's turn opened and
    prefilled (plain ``question prefill`` text without a template)."""
    if getattr(policy, "chat_template", None):
        texts = [c + p for c, p in zip(policy.chat(questions), prefills)]
    else:
        texts = [f"{q} {p}" for q, p in zip(questions, prefills)]
    return policy.encode(texts)


def text_rewards(texts, answers, reward=reward_answer_text):
    return np.asarray([float(reward(t, int(a))) for t, a in zip(texts, answers)], np.float64)


def sample_pass_rates(policy, questions, prefills, answers, n_samples: int, response_len: int, seed,
                      block: int = 64, progress: bool = True, reward=reward_answer_text):
    """Per-prompt pass rates of ``policy`` sampled at its temperature (no gradients).

    Args:
        policy: an :class:`grpo_theory.lm.checkpoints.hf.HFPolicy` (chat template used when it has
            one).
        questions: list of n question texts; prefills: the assistant turn's opening texts;
            answers: (n,) integers.
        n_samples: responses per question (>= 1).
        response_len: tokens per response (>= 1).
        seed: integer seed.
        block: rows sampled per call (a fixed shape: one compilation).
        progress: a tqdm bar on stderr.
        reward: ``reward(text, answer) -> 0.0 or 1.0`` (default
            :func:`grpo_theory.lm.task.reward_answer_text`).

    Returns:
        ``(rewards (n, n_samples), texts list of n lists)``.
    """
    n = V.positive_int("n_samples", n_samples)
    R = V.positive_int("response_len", response_len)
    block = V.positive_int("block", block)
    answers = np.asarray(answers)
    if len(questions) != answers.shape[0]:
        raise ValueError(f"questions and answers must have the same length, got "
                         f"{len(questions)} and {answers.shape[0]}")
    x = np.repeat(chat_prompts(policy, questions, prefills), n, axis=0)
    total = x.shape[0]
    block = min(block, total)
    pad = (-total) % block  # the last block filled up with copies of row 0 (one shape)
    xs = np.concatenate([x, np.repeat(x[:1], pad, axis=0)]) if pad else x
    keys = jax.random.split(jax.random.PRNGKey(int(seed)), xs.shape[0] // block)
    from tqdm.auto import tqdm

    ys = []
    with tqdm(total=total, desc="pass rates: responses", disable=not progress,
              file=sys.stderr) as bar:
        for b, k in enumerate(keys):
            ys.append(np.asarray(policy.sample(k, xs[b * block:(b + 1) * block], R)))
            bar.update(min(block, total - b * block))
    y = np.concatenate(ys)[:total]
    texts = response_texts(policy, y)
    z = text_rewards(texts, np.repeat(answers, n), reward)
    return z.reshape(-1, n), [texts[i * n:(i + 1) * n] for i in range(len(questions))]


def choose_task(summary: pd.DataFrame) -> str:
    """The family with the most prompts whose pass rate lies in :data:`WINDOW` (``n_in_window``;
    the prompts that carry the signal of c1; ties: the larger share, then the mean pass rate
    closest to 1/2)."""
    s = summary.assign(_d=(summary.mean_pass_rate - 0.5).abs())
    s = s.sort_values(["n_in_window", "share_in_window", "_d"], ascending=[False, False, True])
    return str(s.task.iloc[0])


# --- the study ---------------------------------------------------------------------------------
