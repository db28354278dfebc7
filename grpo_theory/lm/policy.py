r"""Language-model policy interface: any model given as ``(params, apply_fn)``.

``apply_fn(params, tokens (N, T), prompt_len) -> logits (N, T, V)`` (next-token logits). The
policy is ``pi(y|x) = prod_t softmax(logits_t / temperature)[y_t]`` over the response tokens up to
and including the first EOS; its score ``s(x, y) = grad_theta log pi(y|x)`` is the quantity every
estimator of the package multiplies by an advantage (the main paper, Algorithm 1):

.. math:: \hat g = \frac{1}{BG}\sum_{b,g} A_{bg}\, s(x_b, y_{bg}).

``sample_fn(params, key, prompts, response_len, temperature)`` is optional: without it sampling
recomputes the full forward pass at each position (works for any ``apply_fn``, slower); the
package's transformer supplies a KV-cached one (:func:`grpo_theory.lm.model.make_sampler`).

:func:`score_contractions` returns ``W S`` for a weight matrix ``W`` (K, N) and the per-sample
scores ``S`` (N, D), plus every ``||s_n||^2``, chunk by chunk under ``lax.scan`` so the (N, D)
matrix is never stored: one pass gives all estimators at all group sizes from the same samples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Callable, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .. import _validation as V
from .budget.memory import acc_dtype, pad_to_chunk
from .budget.statistics import per_sample_statistics
from .task import EOS, PAD, PROMPT_LEN, RESPONSE_LEN, response_mask, reward_text
from .task import decode as task_decode
from .task import encode as task_encode


def check_prompts(prompts, vocab_size=None, pad=None):
    """Checked (N, P) prompts: integer ids in ``[0, vocab_size)``, or, when ``pad`` is given
    (a value outside the vocabulary, e.g. -1), left padding marked by ``pad``.

    ``pad`` is an explicit mask carried in the array: it may only fill a run at the start of a
    row, every row keeps at least one token, and every other entry is a token id in range, so
    no token id (the checkpoint's pad or EOS id included) is ever taken for padding.

    Args:
        prompts: (N, P) integer array (NumPy, JAX or a tracer: values are checked when
            concrete).
        vocab_size: the vocabulary size, or None (no range check).
        pad: the padding marker, or None (prompts hold token ids only).

    Returns:
        The prompts (a NumPy array when concrete).
    """
    if pad is None:
        return V.token_array("prompts", prompts, 2, vocab_size)
    x = V.token_array("prompts", prompts, 2)
    if not isinstance(x, np.ndarray):
        return x
    is_pad = x == pad
    if np.any(is_pad[:, 1:] & ~is_pad[:, :-1]):
        raise ValueError(f"prompts may hold the padding marker {pad} only as left padding (a "
                         f"run at the start of a row), got it after a token in row(s) "
                         f"{np.flatnonzero(np.any(is_pad[:, 1:] & ~is_pad[:, :-1], 1))[:5].tolist()}")
    if np.any(is_pad[:, -1]):
        raise ValueError(f"prompts must keep at least one token per row; row(s) "
                         f"{np.flatnonzero(is_pad[:, -1])[:5].tolist()} are all padding "
                         f"({pad})")
    real = x[~is_pad]
    if vocab_size is not None and real.size and (real.min() < 0 or real.max() >= vocab_size):
        raise ValueError(f"prompts must hold token ids in [0, {vocab_size}) (and the left "
                         f"padding marker {pad}), got values in [{int(real.min())}, "
                         f"{int(real.max())}]")
    return x


def checked_tokens(prompts, responses, vocab_size=None, pad=None):
    """Checked (prompts (N, P), responses (N, R)): integer ids, rank 2, same N, ids in range
    (prompts may carry the left padding marker ``pad``, :func:`check_prompts`)."""
    prompts = check_prompts(prompts, vocab_size, pad)
    responses = V.token_array("responses", responses, 2, vocab_size)
    if prompts.shape[0] != responses.shape[0]:
        raise ValueError(f"prompts and responses must have the same number of rows, got "
                         f"{prompts.shape[0]} and {responses.shape[0]}")
    return prompts, responses


def _temperature(temperature):
    """A finite temperature > 0 (left alone when traced)."""
    if not V.is_concrete(temperature):
        return temperature
    return V.real_scalar("temperature", temperature, positive=True)


_eos_ids = V.eos_ids


def token_log_probs(apply_fn, params, prompts, responses, temperature=1.0, eos=EOS):
    """``log pi(y_t | x, y_<t)`` (N, R) by teacher forcing, 0 after the first EOS.

    Args:
        apply_fn: ``apply_fn(params, tokens, prompt_len) -> logits (N, T, V)``.
        params: the model's parameters.
        prompts: (N, P) integer ids, P >= 1.
        responses: (N, R) integer ids, R >= 1.
        temperature: > 0.
        eos: the end-of-sequence id(s) (see :func:`response_mask`).

    Returns:
        (N, R) per-token log-probabilities.
    """
    prompts, responses = checked_tokens(prompts, responses)
    temperature = _temperature(temperature)
    prompts, responses = jnp.asarray(prompts), jnp.asarray(responses)
    p = prompts.shape[1]
    tokens = jnp.concatenate([prompts, responses], axis=1)
    logits = apply_fn(params, tokens, p)[:, p - 1: -1].astype(jnp.float32) / temperature
    lp = jax.nn.log_softmax(logits, axis=-1)
    tok_lp = jnp.take_along_axis(lp, responses[..., None], axis=-1)[..., 0]
    return tok_lp * response_mask(responses, eos)


def seq_log_probs(apply_fn, params, prompts, responses, temperature=1.0, eos=EOS):
    """``log pi(y|x)`` (N,) by teacher forcing: one forward pass over prompt + response.

    Args and shapes as :func:`token_log_probs`; returns (N,).
    """
    return jnp.sum(token_log_probs(apply_fn, params, prompts, responses, temperature, eos),
                   axis=1)


def generic_sample(apply_fn, params, key, prompts, response_len: int, temperature=1.0,
                   eos=EOS, pad: int = PAD):
    """Autoregressive sampling for any ``apply_fn`` (full forward per position; no cache).

    Args:
        apply_fn, params: the model.
        key: a JAX PRNG key or an integer seed.
        prompts: (N, P) integer ids.
        response_len: R >= 1 tokens to draw.
        temperature: > 0.
        eos: the end-of-sequence id(s) (see :func:`response_mask`).
        pad: the id written after the first EOS (>= 0).

    Returns:
        (N, R) token ids, ``pad`` after the first EOS.
    """
    key = V.key_or_seed(key)
    prompts = V.token_array("prompts", prompts, 2)
    response_len = V.positive_int("response_len", response_len)
    temperature = _temperature(temperature)
    eos, pad = _eos_ids(eos), V.integer("pad", pad, 0)
    return _generic_sample(apply_fn, params, key, prompts, response_len, temperature, eos, pad)


@partial(jax.jit, static_argnames=("apply_fn", "response_len", "eos", "pad"))
def _generic_sample(apply_fn, params, key, prompts, response_len: int, temperature=1.0,
                    eos=(EOS,), pad=PAD):
    prompts = jnp.asarray(prompts)
    n, p = prompts.shape
    keys = jax.random.split(key, response_len)

    def step(carry, inp):
        seq, done = carry
        i, k = inp
        logits = apply_fn(params, seq, p)
        lg = jax.lax.dynamic_index_in_dim(logits, p + i - 1, axis=1, keepdims=False)
        tok = jax.random.categorical(k, lg.astype(jnp.float32) / temperature, axis=-1)
        tok = jnp.where(done, pad, tok).astype(seq.dtype)
        seq = jax.lax.dynamic_update_slice_in_dim(seq, tok[:, None], p + i, axis=1)
        return (seq, done | jnp.isin(tok, jnp.asarray(eos, seq.dtype))), None

    seq0 = jnp.concatenate([prompts, jnp.full((n, response_len), pad, prompts.dtype)], axis=1)
    (seq, _), _ = jax.lax.scan(step, (seq0, jnp.zeros(n, bool)), (jnp.arange(response_len), keys))
    return seq[:, p:]


@partial(jax.jit, static_argnames=("apply_fn", "chunk", "eos"))
def _contract(apply_fn, params, prompts, responses, weights, temperature, chunk, eos=(EOS,)):
    flat, unravel = ravel_pytree(params)

    def lp_one(theta, x, y):
        return seq_log_probs(apply_fn, unravel(theta), x[None], y[None], temperature, eos)[0]

    grad_one = jax.grad(lp_one)
    dt = acc_dtype()
    n = prompts.shape[0]
    nc = n // chunk
    xs = prompts.reshape(nc, chunk, -1)
    ys = responses.reshape(nc, chunk, -1)
    ws = weights.reshape(weights.shape[0], nc, chunk).transpose(1, 0, 2)

    def body(acc, inp):
        x, y, w = inp
        s = jax.vmap(grad_one, in_axes=(None, 0, 0))(flat, x, y).astype(dt)  # (C, D)
        return acc + w.astype(dt) @ s, jnp.sum(s * s, axis=1)

    acc0 = jnp.zeros((weights.shape[0], flat.shape[0]), dt)
    acc, sq = jax.lax.scan(body, acc0, (xs, ys, ws))
    return acc, sq.reshape(-1)


def score_contractions(apply_fn, params, prompts, responses, weights, temperature=1.0,
                       chunk: int = 256, eos=EOS):
    """``(W @ S, ||s_n||^2)`` with ``S`` the (N, D) per-sample scores (never materialised).

    Args:
        apply_fn, params: the model.
        prompts: (N, P) integer ids; responses: (N, R) integer ids.
        weights: (K, N) (or (N,)) finite real weights.
        temperature: > 0.
        chunk: samples per scanned block (>= 1).
        eos: the end-of-sequence id(s) (see :func:`response_mask`).

    Returns:
        ``(acc, sq)``: (K, D) ``W S`` and (N,) squared score norms as NumPy float64 arrays;
        the sums over samples are accumulated in float64 when JAX's 64-bit mode is on
        (``jax.config.update("jax_enable_x64", True)``), else in float32 (JAX's default; the
        scores themselves are computed in the model's dtype either way).
    """
    prompts, responses = checked_tokens(prompts, responses)
    prompts, responses = np.asarray(prompts), np.asarray(responses)
    temperature = _temperature(temperature)
    chunk = V.positive_int("chunk", chunk)
    eos = _eos_ids(eos)
    w = V.real_array("weights", weights)
    if w.ndim not in (1, 2):
        raise ValueError(f"weights must have shape (K, N) or (N,), got {w.shape}")
    weights = np.atleast_2d(w)
    n = prompts.shape[0]
    if weights.shape[1] != n:
        raise ValueError(f"weights must have shape (K, {n}), got {weights.shape}")
    prompts, responses, weights, chunk = pad_to_chunk(prompts, responses, weights, chunk)
    acc, sq = _contract(apply_fn, params, jnp.asarray(prompts), jnp.asarray(responses),
                        jnp.asarray(weights, acc_dtype()), temperature, chunk, eos)
    return np.asarray(acc, np.float64), np.asarray(sq, np.float64)[:n]


@dataclass
class LMPolicy:
    """A language-model policy: parameters, an apply function and (optionally) a fast sampler.

    Token arrays passed to the methods must be integer (N, T) arrays (N, T >= 1) with ids in
    ``[0, vocab_size)``; ``vocab_size`` is read from the model's output shape (``jax.eval_shape``,
    no computation) unless given. Violations are ``ValueError``s naming the argument.
    ``eos_ids`` (an id or a sequence of ids, stored as a tuple) end a response; ``pad_id`` fills
    a sampled response after its first EOS (defaults: the arithmetic task's EOS and PAD).

    The contract (as distrax's ``Distribution``: a small core, every other capability derived
    with a default). Callers (the advisor, the studies) use these methods and never test the
    policy's class or attributes.

    Core: the fields ``params`` and ``apply_fn`` (``apply_fn(params, tokens (N, T),
    prompt_len) -> logits (N, T, V)``; optionally ``sample_fn``), from which :meth:`sample`,
    :meth:`log_probs`, :meth:`score_contractions` and :meth:`weighted_score` are derived.

    Derived, with defaults for the package's transformer and its character tokenizer
    (:mod:`grpo_theory.lm.task`):

    * ``prompt_pad`` (class attribute): the left-padding marker of prompt arrays, outside the
      vocabulary (e.g. -1), or None (default: prompts hold token ids only, padded with PAD);
    * :meth:`pad_prompts`: token-id lists to a left-padded (N, P) array (default: PAD, at least
      ``PROMPT_LEN`` wide);
    * :meth:`encode`: texts to padded prompts (default: the character tokenizer);
    * :meth:`question_prompts`: questions to prompts and a description of the format (default:
      the format marker ``=`` or ``:`` appended, then :meth:`encode`);
    * :meth:`decode`: response ids to texts (default: characters up to the first EOS);
    * :meth:`response_texts`: the texts a reward reads (default: :meth:`decode`);
    * :meth:`default_response_len`: tokens per response (default: the format's length,
      :data:`grpo_theory.lm.task.RESPONSE_LEN`);
    * :meth:`default_reward`: ``reward(text, answer) -> float`` (default: the integer-answer
      reward :func:`grpo_theory.lm.task.reward_text`);
    * :meth:`sample_blocked`: sampling in blocks that bound the prefill's memory;
    * :meth:`sample_row_bytes`: bytes one row adds to the sampler (default: None, not known;
      the memory budget then leaves the sampler's blocks alone);
    * :meth:`row_bytes`: bytes one sequence adds to the score pass (default: None, the
      per-sample scores' ``D (b + 8)``, :func:`grpo_theory.lm.budget.memory.chunk_for_budget`;
      a policy that gives one runs blocks of whole groups and per-sample scores below one
      group, :func:`grpo_theory.lm.budget.memory.chunk_for_groups`);
    * :meth:`score_statistics`: the advisor's statistics of given rollouts (default: the
      per-sample route, :func:`grpo_theory.lm.budget.statistics.per_sample_statistics`).

    :class:`grpo_theory.lm.checkpoints.hf.HFPolicy` (a Hugging Face checkpoint) overrides:
    ``prompt_pad``, ``pad_prompts``, ``encode``, ``question_prompts``, ``decode``,
    ``response_texts``, ``default_response_len``, ``default_reward``, ``sample_blocked``,
    ``sample_row_bytes``, ``row_bytes``, ``score_contractions``, ``score_statistics`` (the
    tokenizer and chat template, the KV cache's bytes, the ghost-norm route and its activation
    bytes).
    """

    prompt_pad: ClassVar[int | None] = None

    params: dict
    apply_fn: Callable
    sample_fn: Callable | None = None
    temperature: float = 1.0
    vocab_size: int | None = None
    eos_ids: tuple = (EOS,)
    pad_id: int = PAD

    def __post_init__(self):
        if not callable(self.apply_fn):
            raise ValueError(f"apply_fn must be callable, got {type(self.apply_fn).__name__}")
        if self.sample_fn is not None and not callable(self.sample_fn):
            raise ValueError(f"sample_fn must be callable or None, got "
                             f"{type(self.sample_fn).__name__}")
        self.temperature = _temperature(self.temperature)
        if self.vocab_size is not None:
            self.vocab_size = V.positive_int("vocab_size", self.vocab_size)
        try:
            self.eos_ids = _eos_ids(self.eos_ids)
        except ValueError as e:
            raise ValueError(str(e).replace("eos", "eos_ids", 1)) from None
        self.pad_id = V.integer("pad_id", self.pad_id, 0)

    def _vocab(self):
        """The model's vocabulary size (from its logits' shape), or None if it cannot be read."""
        if self.vocab_size is None and "_vocab_cache" not in self.__dict__:
            try:
                out = jax.eval_shape(lambda p, t: self.apply_fn(p, t, 1), self.params,
                                     jax.ShapeDtypeStruct((1, 2), jnp.int32))
                self.__dict__["_vocab_cache"] = int(out.shape[-1])
            except Exception:  # an apply_fn that cannot be traced abstractly: skip the range check
                self.__dict__["_vocab_cache"] = None
        return self.vocab_size if self.vocab_size is not None else self.__dict__["_vocab_cache"]

    def check_prompts(self, prompts):
        """:func:`check_prompts` with this policy's vocabulary and padding marker."""
        return check_prompts(prompts, self._vocab(), self.prompt_pad)

    def sample(self, key, prompts, response_len: int):
        """Responses (N, R) drawn from the policy (PAD after the first EOS).

        Args:
            key: a JAX PRNG key or an integer seed.
            prompts: (N, P) integer ids.
            response_len: R >= 1.

        Returns:
            (N, R) integer token ids.
        """
        key = V.key_or_seed(key)
        prompts = self.check_prompts(prompts)
        response_len = V.positive_int("response_len", response_len)
        if self.sample_fn is not None:
            return self.sample_fn(self.params, key, jnp.asarray(prompts), response_len,
                                  self.temperature)
        return generic_sample(self.apply_fn, self.params, key, jnp.asarray(prompts),
                              response_len, self.temperature, self.eos_ids, self.pad_id)

    def sample_blocked(self, key, prompts, response_len: int, max_elems: float = 5e7, *,
                       progress=None, max_rows: int | None = None):
        """:meth:`sample` in blocks of prompts so that ``rows x prompt_len^2 <= max_elems``
        (the prefill attention's memory); one block (then identical to :meth:`sample` with the
        same key) when the whole batch fits, else block ``i`` uses ``fold_in(key, i)``.

        Args as :meth:`sample`, plus ``max_elems`` > 0 and ``progress``: an optional
        ``progress(done, total)`` callback over the k blocks, called with ``(0, k)`` before the
        first and ``(i, k)`` after block i (the samples do not depend on it), and ``max_rows``:
        None or at most that many rows a block (the memory budget's,
        :meth:`~grpo_theory.lm.budget.options.ModelOptions.sample_rows`). Returns a NumPy
        (N, R) array."""
        key = V.key_or_seed(key)
        prompts = np.asarray(self.check_prompts(prompts))
        max_elems = V.real_scalar("max_elems", max_elems, positive=True)
        n, p = prompts.shape
        k = max(1, int(np.ceil(n * p * p / max_elems)))
        if max_rows is not None:
            k = max(k, -(-n // V.positive_int("max_rows", max_rows)))
        report = progress if progress is not None else (lambda done, total: None)
        report(0, k)
        if k == 1:
            out = np.asarray(self.sample(key, prompts, response_len))
            report(1, 1)
            return out
        out = []
        for i, blk in enumerate(np.array_split(prompts, k)):
            out.append(np.asarray(self.sample(jax.random.fold_in(key, i), blk, response_len)))
            report(i + 1, k)
        return np.concatenate(out)

    def log_probs(self, prompts, responses):
        """``log pi(y|x)`` (N,) for (N, P) prompts and (N, R) responses (integer ids)."""
        prompts, responses = checked_tokens(prompts, responses, self._vocab(), self.prompt_pad)
        return _logp_jit(self.apply_fn, self.params, jnp.asarray(prompts),
                         jnp.asarray(responses), self.temperature, self.eos_ids)

    def score_contractions(self, prompts, responses, weights, chunk: int = 256):
        """:func:`score_contractions` for this policy (token ids checked against the vocabulary)."""
        checked_tokens(prompts, responses, self._vocab(), self.prompt_pad)
        return score_contractions(self.apply_fn, self.params, prompts, responses, weights,
                                  self.temperature, chunk, self.eos_ids)

    def weighted_score(self, prompts, responses, weights) -> np.ndarray:
        """``grad_theta sum_i w_i log pi(y_i | x_i)`` as a flat (D,) vector (one backward pass).

        Args:
            prompts: (N, P) ids; responses: (N, R) ids; weights: (N,) finite reals.
        """
        prompts, responses = checked_tokens(prompts, responses, self._vocab(), self.prompt_pad)
        w = V.real_array("weights", weights)
        if w.shape != (prompts.shape[0],):
            raise ValueError(f"weights must have shape ({prompts.shape[0]},), got {w.shape}")
        return np.asarray(weighted_grad(self.apply_fn, self.params, jnp.asarray(prompts),
                                         jnp.asarray(responses), jnp.asarray(w),
                                         self.temperature, tuple(self.eos_ids)))

    # -- derived capabilities (class docstring); a checkpoint overrides them ------------------

    def pad_prompts(self, ids) -> np.ndarray:
        """Token-id lists to an (N, P) int32 array, each row left-padded with PAD up to the
        longest row and at least ``PROMPT_LEN`` (the package's prompts' width).

        Raises:
            ValueError: no rows, or a row with no token.
        """
        ids = [list(i) for i in ids]
        if not ids or not all(ids):
            raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
        width = max(PROMPT_LEN, max(len(i) for i in ids))
        out = np.full((len(ids), width), PAD, np.int32)
        for row, i in zip(out, ids):
            row[width - len(i):] = i
        return out

    def encode(self, texts) -> np.ndarray:
        """Texts to left-padded (N, P) prompts (:meth:`pad_prompts`) by the character
        tokenizer (:func:`grpo_theory.lm.task.encode`).

        Raises:
            ValueError: no texts, a non-string, an empty text or a character outside the
                vocabulary.
        """
        return self.pad_prompts([task_encode(t) for t in text_list(texts)])

    def question_prompts(self, questions, fmt: str = "answer",
                         chat_template: bool = True) -> tuple[np.ndarray, str]:
        """Questions to prompts, and how they were made (for a report).

        Args:
            questions: a string or a sequence of strings.
            fmt: ``"answer"`` or ``"trace"``: the marker (``=`` or ``:``) appended to a
                question that does not end with one.
            chat_template: unused by the default (a checkpoint's chat template).

        Returns:
            ``(prompts (N, P), description)``.
        """
        if fmt not in RESPONSE_LEN:
            raise ValueError(f"fmt must be one of {sorted(RESPONSE_LEN)}, got {fmt!r}")
        mark = "=" if fmt == "answer" else ":"
        qs = [q if q.endswith(("=", ":")) else q + mark for q in text_list(questions)]
        return self.encode(qs), f"the package's character tokenizer ({fmt} format)"

    def decode(self, responses) -> list[str]:
        """Response ids (N, R) to texts: characters up to the first EOS, PAD dropped
        (:func:`grpo_theory.lm.task.decode`)."""
        responses = np.asarray(V.token_array("responses", responses, 2, self._vocab()))
        return [task_decode(row) for row in responses]

    def response_texts(self, responses) -> list[str]:
        """The texts a reward reads from response ids (N, R) (default: :meth:`decode`)."""
        return self.decode(responses)

    def default_response_len(self, fmt: str = "answer") -> int:
        """Tokens per sampled response: the format's length (EOS included)."""
        if fmt not in RESPONSE_LEN:
            raise ValueError(f"fmt must be one of {sorted(RESPONSE_LEN)}, got {fmt!r}")
        return RESPONSE_LEN[fmt]

    def default_reward(self):
        """The reward ``reward(text, answer) -> float`` used when none is given: 1 iff the text
        ends with the integer answer (:func:`grpo_theory.lm.task.reward_text`)."""
        return reward_text

    def sample_row_bytes(self, prompt_len: int, response_len: int) -> int | None:
        """Bytes one row adds to :meth:`sample_blocked`; None (the default): not known, the
        sampler's blocks are not limited by the memory budget."""
        V.positive_int("prompt_len", prompt_len)
        V.positive_int("response_len", response_len)
        return None

    def row_bytes(self, seq_len: int, response_len: int) -> int | None:
        """Bytes one sequence of ``seq_len`` positions (``response_len`` of them a response)
        adds to the score pass; None (the default): the per-sample scores, ``D (b + 8)``,
        counted by :func:`grpo_theory.lm.budget.memory.chunk_for_budget` itself."""
        V.positive_int("seq_len", seq_len)
        V.integer("response_len", response_len, 1, seq_len)
        return None

    def score_statistics(self, prompts, responses, rewards, chunk: int = 64, *, stage=None,
                         progress=None):
        """The advisor's statistics of given rollouts by per-sample scores
        (:func:`grpo_theory.lm.budget.statistics.per_sample_statistics`).

        Args:
            prompts: (m, P) prompt ids; responses: (m, n, R) ids, n per prompt; rewards: (m, n).
            chunk: per-sample scores held at once (>= 1).
            stage, progress: optional callbacks (:func:`~grpo_theory.lm.budget.statistics.
                per_sample_statistics`).

        Returns:
            :class:`~grpo_theory.core.rollouts.RolloutStatistics`.
        """
        return per_sample_statistics(self, prompts, responses, rewards, chunk, stage=stage,
                                     progress=progress)

    @property
    def dim(self) -> int:
        return int(ravel_pytree(self.params)[0].shape[0])

    def with_params(self, params) -> "LMPolicy":
        """The same policy (same class and fields) at new parameters (a pytree of the same
        structure)."""
        if jax.tree_util.tree_structure(params) != jax.tree_util.tree_structure(self.params):
            raise ValueError("params must have the structure of the policy's parameters, got "
                             f"{jax.tree_util.tree_structure(params)}")
        new = dataclasses.replace(self, params=params)
        if "_vocab_cache" in self.__dict__:
            new.__dict__["_vocab_cache"] = self.__dict__["_vocab_cache"]
        return new


@partial(jax.jit, static_argnames=("apply_fn", "eos"))
def _logp_jit(apply_fn, params, prompts, responses, temperature, eos=(EOS,)):
    return seq_log_probs(apply_fn, params, prompts, responses, temperature, eos)


@partial(jax.jit, static_argnames=("apply_fn", "eos"))
def weighted_grad(apply_fn, params, prompts, responses, weights, temperature, eos):
    """``grad_theta sum_i w_i log pi(y_i | x_i)`` as a flat vector (one backward pass)."""
    flat, unravel = ravel_pytree(params)

    def obj(theta):
        lp = seq_log_probs(apply_fn, unravel(theta), prompts, responses, temperature, eos)
        return jnp.dot(weights.astype(lp.dtype), lp)

    return jax.grad(obj)(flat)


def text_list(texts) -> list:
    """``texts`` as a non-empty list of strings (a string is one text), else a ValueError."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, (bytes, dict)) or not hasattr(texts, "__iter__"):
        raise ValueError(f"texts must be a string or a non-empty sequence of strings, got "
                         f"{type(texts).__name__}")
    texts = list(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a string or a non-empty sequence of strings")
    return texts
