r"""Arithmetic task of the main paper's Figure 4, a character tokenizer and the reward.

Five categories (``CATEGORIES``): two-step +/- (``a+b-c``), three-step +/- (``a-b+c+d``), one
multiplication (``a*b``), integer division with an exact result (``a/b``) and +/- with parentheses
(``a-(b+c)``). Each question is *easy* (small operands) or, with probability ``hard_fraction``,
*hard* (two-digit operands; easy ones are single-digit): the documented difficulty knob that sets the spread of per-question
pass rates (a hard tail of prompts with low pass rates is what makes large groups useful).

Two response formats, chosen by the prompt's last character:

* ``answer`` (prompt ends with ``=``): the response is the final integer, e.g. ``12+5-3=`` -> ``14|``;
  the reward asks for the integer alone in canonical form (:func:`reward_exact_tokens`), so the
  correct completion ``y*(x)`` is unique.
* ``trace`` (prompt ends with ``:``): a scratchpad of partial results, ``>``, then the integer,
  e.g. ``12+5-3:`` -> ``17>14|`` or ``2>14|`` (terms may be combined in any order), so many
  completions are correct.

The reward parses the *final integer* of the response (the maximal trailing ``-?[0-9]+`` not
preceded by a digit or ``-``) and is 1 for an exact match, 0 otherwise, including malformed output;
it never raises. :func:`reward_tokens` is the same rule on token arrays in JAX (jit-able).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import jax.numpy as jnp
import numpy as np

from .. import _validation as V


VOCAB = "_|0123456789+-*/()=:,;>"
PAD, EOS = 0, 1
VOCAB_SIZE = len(VOCAB)
_ID = {c: i for i, c in enumerate(VOCAB)}
DIGIT0 = _ID["0"]
MINUS = _ID["-"]
CATEGORIES = ("add2", "add3", "mul", "div", "paren")
PROMPT_LEN = 12  # longest question, e.g. "99-99+99-99=" (12 chars)
SHOT_LEN = 12  # longest easy solved example, e.g. "9-9-9-9=-18;" (in-context shots are easy)
ICL_PROMPT_LEN = PROMPT_LEN + 2 * SHOT_LEN  # two shots
RESPONSE_LEN = {"answer": 5, "trace": 16}  # incl. EOS; "-396|" and "-123,-45>-89|" fit
"""The response length (tokens, EOS included) of each task format."""


def encode(text: str) -> list[int]:
    """Characters to token ids; raises ``ValueError`` naming a character outside ``VOCAB``."""
    try:
        return [_ID[c] for c in text]
    except KeyError as e:  # pragma: no cover - message path
        raise ValueError(f"text must use characters of {VOCAB!r}, got {e.args[0]!r}") from None


def decode(ids, stop_at_eos: bool = True) -> str:
    """Token ids to text (PAD dropped); stops at the first EOS unless ``stop_at_eos=False``."""
    out = []
    for i in np.asarray(ids).tolist():
        if i == EOS and stop_at_eos:
            break
        if i != PAD and 0 <= i < VOCAB_SIZE:
            out.append(VOCAB[i])
    return "".join(out)


def response_mask(responses, eos=EOS):
    """1 for response tokens up to and including the first EOS, else 0 (N, R).

    Args:
        responses: (N, R) integer token ids.
        eos: the end-of-sequence id, or a sequence of ids any of which ends a response.

    Returns:
        (N, R) float32 mask.
    """
    responses = jnp.asarray(V.token_array("responses", responses, 2))
    eos = V.eos_ids(eos)
    is_eos = jnp.isin(responses, jnp.asarray(eos, responses.dtype)).astype(jnp.int32)
    before = jnp.cumsum(is_eos, axis=1) - is_eos  # EOS strictly before position t
    return (before == 0).astype(jnp.float32)


_FINAL_INT = re.compile(r"(?<![0-9-])(-?[0-9]+)$")


def parse_final_integer(text) -> int | None:
    """The integer that ends ``text`` (after stripping whitespace), or ``None`` if malformed."""
    if not isinstance(text, str):
        return None
    m = _FINAL_INT.search(text.strip())
    if m is None:
        return None
    return int(m.group(1))


class TokenReward(Protocol):
    """The reward contract of the language-model layer, on token arrays (in JAX).

    ``reward(tokens, answers) -> (N,) float`` in {0, 1}: ``tokens`` (N, R) response tokens,
    ``answers`` (N,) the integer answers (or canonical target tokens). :func:`reward_tokens`
    and :func:`reward_exact_tokens` satisfy it; :func:`reward` selects one by format.
    """

    def __call__(self, tokens, answers): ...


class TextReward(Protocol):
    """The reward contract on decoded text (the advisor's ``--reward module:function``).

    ``reward(text, answer) -> float``: one response's text and its prompt's answer; it should
    never raise. :func:`reward_text` and :func:`reward_answer_text` satisfy it.
    """

    def __call__(self, text, answer) -> float: ...


def integer_answer(answer) -> int:
    """``answer`` as an int: an integer, an integral float or a string of an integer; anything
    else (``7.9``, ``"seven"``) a ``ValueError`` naming ``answer`` (never truncated)."""
    if isinstance(answer, (bool, np.bool_)):
        raise ValueError(f"answer must be an integer, got {answer!r}")
    if isinstance(answer, (int, np.integer)):
        return int(answer)
    if isinstance(answer, (float, np.floating)) and np.isfinite(answer) and \
            float(answer).is_integer():
        return int(answer)
    if isinstance(answer, str) and answer.strip().lstrip("+-").isdigit():
        return int(answer.strip())
    raise ValueError(f"answer must be an integer for the integer-answer reward, got {answer!r}")


def reward_text(text, answer: int) -> float:
    """1.0 if the final integer of ``text`` equals ``answer`` else 0.0 (never raises for a
    text; a non-integer ``answer``, e.g. ``7.9``, is a ``ValueError``, never truncated)."""
    want = integer_answer(answer)
    try:
        val = parse_final_integer(text)
    except Exception:  # pragma: no cover - defensive: the reward must never raise
        return 0.0
    return 1.0 if (val is not None and val == want) else 0.0


#: what may follow the final integer of a natural-language answer: whitespace, sentence
#: punctuation, closing brackets and quotes, Markdown emphasis and LaTeX math delimiters
_TRAILING = " \t\r\n.!?;:)]}*_$\"'`"


def reward_answer_text(text, answer: int) -> float:
    """The integer-answer reward for a pretrained model's free text: 1.0 if the last integer of
    ``text``, once trailing punctuation and markup are stripped (``"42."``, ``"**42**"``,
    ``"$42$"``, ``"\\boxed{42}"``), equals ``answer``, else 0.0 (never raises).

    :func:`reward_text` is the strict rule of the package's own task (the response must end in
    the integer); a chat model's answer usually ends a sentence.
    """
    want = integer_answer(answer)
    if not isinstance(text, str):
        return 0.0
    return reward_text(text.rstrip(_TRAILING), want)


def reward_tokens(tokens, answers, max_digits: int = 12):
    """JAX version of :func:`reward_text` for responses ``tokens`` (N, R) and ``answers`` (N,).

    The response is the token string up to the first EOS (or all R tokens); PAD tokens before the
    EOS count as malformed characters. Returns float (N,) rewards in {0, 1}.
    """
    tokens = jnp.asarray(tokens)
    n, r = tokens.shape
    pos = jnp.arange(r)
    is_eos = tokens == EOS
    end = jnp.where(is_eos.any(-1), jnp.argmax(is_eos, -1), r)  # (N,) exclusive end
    is_digit = (tokens >= DIGIT0) & (tokens <= DIGIT0 + 9)
    inside = pos[None, :] < end[:, None]
    nondigit = inside & ~is_digit
    last_nd = jnp.max(jnp.where(nondigit, pos[None, :], -1), axis=-1)  # last non-digit before end
    start = last_nd + 1
    ndig = end - start
    run = inside & (pos[None, :] >= start[:, None])
    expo = jnp.where(run, end[:, None] - 1 - pos[None, :], 0)
    digit_val = jnp.where(run, tokens - DIGIT0, 0).astype(jnp.int64)
    mag = jnp.sum(digit_val * (10 ** jnp.minimum(expo, 18)).astype(jnp.int64), axis=-1)
    tok_at = lambda i: jnp.take_along_axis(tokens, jnp.clip(i, 0, r - 1)[:, None], 1)[:, 0]
    has_minus = (last_nd >= 0) & (tok_at(last_nd) == MINUS)
    # the minus sign (if any) must itself not be preceded by a digit or another minus
    before = last_nd - 1
    tb = tok_at(before)
    minus_ok = (before < 0) | ~(((tb >= DIGIT0) & (tb <= DIGIT0 + 9)) | (tb == MINUS))
    # without a minus, the run is preceded by a non-digit that is not '-' (or nothing): always ok
    ok = (ndig >= 1) & (ndig <= max_digits) & jnp.where(has_minus, minus_ok, True)
    val = jnp.where(has_minus, -mag, mag)
    return (ok & (val == jnp.asarray(answers, jnp.int64))).astype(jnp.float32)


def reward_exact_tokens(tokens, canonical):
    """Answer-only format: 1 iff the response is exactly the canonical integer (then EOS).

    This is the final-integer rule restricted to responses consisting of the integer alone in
    canonical form (no sign ``+``, no leading zeros), so the correct completion ``y*(x)`` is
    unique and ``V(x) = pi(y*|x)`` holds exactly.
    """
    return jnp.all(jnp.asarray(tokens) == jnp.asarray(canonical), axis=-1).astype(jnp.float32)


def reward(fmt: str, tokens, answers, canonical=None):
    """The reward of format ``fmt``: exact canonical match (``answer``) or final integer (``trace``)."""
    if fmt == "answer":
        if canonical is None:
            raise ValueError("canonical targets are needed for fmt='answer'")
        return reward_exact_tokens(tokens, canonical)
    if fmt == "trace":
        return reward_tokens(tokens, answers)
    raise ValueError(f"fmt must be one of {sorted(RESPONSE_LEN)}, got {fmt!r}")


# --- question generation -----------------------------------------------------------------------


@dataclass(frozen=True)
class TaskConfig:
    """Task knobs. ``hard_fraction``: share of questions with two-digit operands (hard tail)."""

    hard_fraction: float = 0.25
    category_probs: tuple = (0.2, 0.2, 0.2, 0.2, 0.2)

    def __post_init__(self):
        if not (0.0 <= self.hard_fraction <= 1.0):
            raise ValueError(f"hard_fraction must lie in [0, 1], got {self.hard_fraction!r}")
        p = np.asarray(self.category_probs, float)
        if p.shape != (5,) or np.any(p < 0) or abs(p.sum() - 1) > 1e-9:
            raise ValueError("category_probs must be 5 non-negative numbers summing to 1")


@dataclass
class Questions:
    """A set of questions: text without the format marker, category, answer, hard flag, terms.

    ``terms`` (N, 4) are the signed terms whose sum is the answer for the +/- categories
    (unused slots 0); for ``mul``/``div`` they hold the operands. ``shots`` (N,) are two easy
    solved examples ``"q=a;q=a;"`` of the same category used by in-context prompts.
    """

    text: list
    category: np.ndarray
    answer: np.ndarray
    hard: np.ndarray
    terms: np.ndarray
    n_terms: np.ndarray
    shots: list

    def __len__(self):
        return len(self.text)

    def subset(self, idx) -> "Questions":
        idx = np.asarray(idx)
        return Questions([self.text[i] for i in idx], self.category[idx], self.answer[idx],
                         self.hard[idx], self.terms[idx], self.n_terms[idx],
                         [self.shots[i] for i in idx])


def _one(rng, cat: int, hard: bool):
    """(text, answer, terms, n_terms) of one question of category ``cat``."""
    lo, hi = (10, 99) if hard else (0, 9)
    name = CATEGORIES[cat]
    if name in ("add2", "add3"):
        k = 3 if name == "add2" else 4
        ops = rng.integers(0, 2, size=k - 1)
        vals = rng.integers(lo, hi + 1, size=k)
        text = str(vals[0]) + "".join(("+" if o == 0 else "-") + str(v) for o, v in zip(ops, vals[1:]))
        terms = [int(vals[0])] + [int(v) if o == 0 else -int(v) for o, v in zip(ops, vals[1:])]
    elif name == "paren":
        a, b, c = (int(v) for v in rng.integers(lo, hi + 1, size=3))
        o1, o2 = rng.integers(0, 2, size=2)
        s1, s2 = (1 if o1 == 0 else -1), (1 if o2 == 0 else -1)
        text = f"{a}{'+' if s1 > 0 else '-'}({b}{'+' if o2 == 0 else '-'}{c})"
        terms = [a, s1 * b, s1 * s2 * c]
    elif name == "mul":
        a = int(rng.integers(13, 100) if hard else rng.integers(2, 10))
        b = int(rng.integers(2, 10))
        text, terms = f"{a}*{b}", [a, b]
        return text, a * b, terms + [0, 0], 2
    else:  # div
        q = int(rng.integers(13, 100) if hard else rng.integers(1, 10))
        b = int(rng.integers(2, 10))
        text, terms = f"{q * b}/{b}", [q * b, b]
        return text, q, terms + [0, 0], 2
    return text, int(sum(terms)), terms + [0] * (4 - len(terms)), len(terms)


def generate_questions(n: int, seed: int, config: TaskConfig = TaskConfig()) -> Questions:
    """``n`` questions from a seeded generator (deterministic for a given seed and config)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    cats = rng.choice(5, size=n, p=np.asarray(config.category_probs))
    hard = rng.random(n) < config.hard_fraction
    rows = [_one(rng, int(c), bool(h)) for c, h in zip(cats, hard)]
    shots = []
    for c in cats:
        s = ""
        for _ in range(2):
            t, a, _, _ = _one(rng, int(c), False)
            s += f"{t}={a};"
        shots.append(s)
    return Questions([r[0] for r in rows], cats.astype(np.int32),
                     np.array([r[1] for r in rows], np.int64), hard,
                     np.array([r[2] for r in rows], np.int64),
                     np.array([r[3] for r in rows], np.int32), shots)


def eval_set(config: TaskConfig = TaskConfig(), n: int = 500, seed: int = 12345) -> Questions:
    """The fixed, seeded evaluation set (500 questions by default)."""
    return generate_questions(n, seed, config)


def train_pool(config: TaskConfig = TaskConfig(), n: int = 20000, seed: int = 777) -> Questions:
    """The training stream's pool (disjoint seed from the evaluation set)."""
    return generate_questions(n, seed, config)


def encode_prompts(q: Questions, fmt: str = "answer", icl: bool = False) -> np.ndarray:
    """Prompts, left-padded with PAD to ``PROMPT_LEN`` (or ``ICL_PROMPT_LEN`` with shots)."""
    if fmt not in RESPONSE_LEN:
        raise ValueError(f"fmt must be one of {sorted(RESPONSE_LEN)}, got {fmt!r}")
    mark = "=" if fmt == "answer" else ":"
    plen = ICL_PROMPT_LEN if icl else PROMPT_LEN
    out = np.full((len(q), plen), PAD, np.int32)
    for i, t in enumerate(q.text):
        s = (q.shots[i] if icl else "") + t + mark
        ids = encode(s)
        out[i, plen - len(ids):] = ids
    return out


def _trace(terms, n_terms, cat, rng) -> str:
    """A random valid scratchpad for one question (see module doc)."""
    name = CATEGORIES[cat]
    if name == "mul":
        a, b = int(terms[0]), int(terms[1])
        parts = [(a // 10) * 10 * b, (a % 10) * b]
        rng.shuffle(parts)
        return ",".join(str(p) for p in parts)
    if name == "div":
        a, b = int(terms[0]), int(terms[1])
        q = a // b
        parts = [(q // 10) * 10, q % 10]
        rng.shuffle(parts)
        return ",".join(str(p) for p in parts)
    t = [int(v) for v in terms[:n_terms]]
    order = rng.permutation(n_terms)
    partial, s = [], t[order[0]]
    for j in order[1:-1]:
        s += t[j]
        partial.append(s)
    return ",".join(str(p) for p in partial)


def target_responses(q: Questions, fmt: str, answers=None, seed: int = 0) -> np.ndarray:
    """Supervised targets (N, R): the response text for ``answers`` (default: the correct ones).

    In the trace format the scratchpad is drawn at random among the valid ones (seeded).
    """
    if fmt not in RESPONSE_LEN:
        raise ValueError(f"fmt must be one of {sorted(RESPONSE_LEN)}, got {fmt!r}")
    answers = q.answer if answers is None else np.asarray(answers)
    rlen = RESPONSE_LEN[fmt]
    rng = np.random.default_rng(seed)
    out = np.full((len(q), rlen), PAD, np.int32)
    for i in range(len(q)):
        s = str(int(answers[i]))
        if fmt == "trace":
            s = _trace(q.terms[i], int(q.n_terms[i]), int(q.category[i]), rng) + ">" + s
        ids = encode(s)[: rlen - 1] + [EOS]
        out[i, : len(ids)] = ids
    return out
