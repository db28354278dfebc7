r"""Hugging Face checkpoints of the Qwen2 / Qwen2.5 / Llama family as the package's policy.

``policy = from_pretrained(path)`` (:mod:`grpo_theory.lm.checkpoints.load`) reads a checkpoint
directory in the Hugging Face layout (``config.json``; ``model.safetensors`` or shards listed in
``model.safetensors.index.json``; ``tokenizer.json``; optionally ``generation_config.json`` and a
chat template in ``tokenizer_config.json``, :meth:`HFPolicy.chat`) or a llama.cpp ``.gguf`` file of
the same architectures (:mod:`grpo_theory.lm.checkpoints.gguf`: dequantised, tokenizer and chat
template read from the file), builds tunix's JAX implementation of the architecture
(``tunix.models.qwen2.model.Qwen2``: RMSNorm, rotary embeddings, grouped-query attention with q/k/v
biases, SwiGLU MLP, tied or untied output head) and returns an :class:`HFPolicy`, an
:class:`~grpo_theory.lm.policy.LMPolicy` with the same interface: exact teacher-forced
log-probabilities ``log pi(y|x) = sum_t log softmax(logits_t / T)[y_t]`` over the response up to and
including its first EOS (the checkpoint's own EOS ids), KV-cached sampling and the score statistics
``(W S, ||s_n||^2)`` of ``s = grad_theta log pi(y|x)`` (for the estimators of the main paper's
Algorithm 1) by ghost norms, one forward and one backward pass per block with no per-sample gradient
formed (:mod:`grpo_theory.lm.budget.ghost`; ``method= "per_sample"`` keeps the ``vmap(grad)``
route). Nothing is downloaded.

A Llama checkpoint is the same computation without q/k/v biases (``attention_bias: false``), so
it runs on the same module with the biases fixed at zero (tunix 0.1.7's own ``Llama3`` module
ignores ``rope_theta`` and always uses 1e6, which is wrong for Llama 3's 5e5). Those zeros are
constants of the computation, not parameters: ``policy.params`` holds exactly the checkpoint's
tensors, so ``policy.dim`` is the checkpoint's own parameter count and scores have no bias
coordinates. Checkpoints that
need something this computation does not do (``rope_scaling``, sliding-window attention, MLP
biases, an activation other than SiLU) are refused with a ``ValueError`` naming the field.

Padding: prompts are left-padded with :data:`PROMPT_PAD` (-1, not a token id: an explicit mask
carried in the prompt array, :func:`~grpo_theory.lm.policy.check_prompts`); :meth:`HFPolicy.encode`
writes it and :meth:`HFPolicy.prompt_lengths` reads the lengths back. Padding slots are masked
out of attention and do not advance the rotary positions (position of a token = number of real
tokens before it), so a left-padded prompt gives the same responses' log-probabilities as the
unpadded one. No token id is ever taken for padding: a prompt may contain the checkpoint's pad
or EOS id (a ChatML prompt holds ``<|im_end|>`` after every turn) and every such token is
attended to. Sampled responses hold ``pad_id`` (the checkpoint's pad token, else its first EOS
id) after their first EOS, by position.

The pad token's input-embedding row (``pad_token_id`` of config.json; GGUF:
``tokenizer.ggml.padding_token_id``) gets no gradient through the lookup by default, as
transformers' ``nn.Embedding(padding_idx=pad_token_id)`` trains it (``pad_embedding="frozen"``;
``"trained"``: the exact gradient). The teacher-forced logits (``apply_fn``) are the family's
pure forward (:class:`~grpo_theory.lm.budget.ghost.PureForward`), so the per-sample, per-prompt and
ghost-norm routes differentiate one computation; sampling runs tunix's KV-cached module.

The files are read by :func:`grpo_theory.lm.checkpoints.load.load_checkpoint`, every
family-specific fact (config fields, tensor names and shapes, tunix's module) from the family's
spec (:mod:`grpo_theory.lm.families`); this module is the policy (:class:`HFPolicy`, built by
:func:`hf_policy`).

tunix, flax, safetensors and tokenizers are imported on first use (the optional extra ``hf``:
``pip install -e ".[hf]"``); importing this module costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ... import _validation as V
from ..budget.ghost import PureForward, ghost_contractions, ghost_moments, score_dots
from ..budget.memory import ghost_row_bytes, sampler_row_bytes
from ..budget.statistics import ghost_statistics
from ..families.qwen2 import positions_mask as _positions_mask
from ..families.spec import quiet_tunix as _quiet
from ..policy import LMPolicy, checked_tokens, text_list
from ..task import reward_answer_text
from .chat_template import render as render_template


#: the left-padding marker of prompt arrays (outside every vocabulary: never a token id)
PROMPT_PAD = -1


@dataclass(frozen=True, eq=False)
class _Spec:
    """The static part of a loaded model (hashed by identity: one jit cache per checkpoint)."""

    graphdef: Any
    pad_id: int
    eos_ids: tuple
    max_length: int | None
    n_layers: int
    n_kv_heads: int
    head_dim: int
    dtype: Any
    zero_biases: tuple = ()  # ((path in tunix's dict, shape), ...): constants, not parameters
    forward: Any = None  # the family's pure forward (a PureForward): the teacher-forced logits

    def module(self, params):
        """tunix's module at ``params`` (the checkpoint's tensors) plus the constant zero
        q/k/v biases of a checkpoint without them."""
        from flax import nnx
        return nnx.merge(self.graphdef, _with_zero_biases(params, self.zero_biases, self.dtype))

    def _check_length(self, t: int):
        if self.max_length is not None and t > self.max_length:
            raise ValueError(f"prompt + response length {t} exceeds the checkpoint's "
                             f"max_position_embeddings = {self.max_length}")

    def __call__(self, params, tokens, prompt_len):
        """Next-token logits (N, T, V) (the ``apply_fn`` of the policy interface): the
        family's pure forward (:class:`~grpo_theory.lm.budget.ghost.PureForward`, tunix's
        computation with the architecture's ``frozen_row``), the one the ghost-norm route
        differentiates."""
        tokens = jnp.asarray(tokens)
        self._check_length(tokens.shape[1])
        return self.forward(params, tokens, prompt_len)

    def module_logits(self, params, tokens):
        """Next-token logits (N, T, V) of tunix's module itself (a check of the pure
        forward; its gradient has no frozen row)."""
        tokens = jnp.asarray(tokens)
        pos, mask = _positions_mask(tokens)
        with _quiet():
            logits, _ = self.module(params)(jnp.maximum(tokens, 0), pos, None, mask)
        return logits

    def sample(self, params, key, prompts, response_len, temperature=1.0):
        """KV-cached sampling (the ``sample_fn`` of the policy interface)."""
        return self.sample_with_log_probs(params, key, prompts, response_len, temperature)[0]

    def sample_with_log_probs(self, params, key, prompts, response_len, temperature=1.0):
        prompts = jnp.asarray(prompts)
        self._check_length(prompts.shape[1] + response_len)
        toks, lp, _ = _decode(self, params, V.key_or_seed(key), prompts, None,
                              int(response_len), temperature)
        return toks, lp


def _with_zero_biases(params, zero_biases, dtype):
    """``params`` with zeros of ``dtype`` inserted at each (path, shape) of ``zero_biases``
    (new dicts along those paths; the leaves of ``params`` are shared)."""
    if not zero_biases:
        return params
    out = dict(params)
    for path, shape in zero_biases:
        node = out
        for k in path[:-1]:
            node[k] = dict(node[k])
            node = node[k]
        node[path[-1]] = jnp.zeros(shape, dtype)
    return out


@partial(jax.jit, static_argnames=("spec", "response_len"))
def _decode(spec: _Spec, params, key, prompts, forced, response_len: int, temperature=1.0):
    """KV-cached decoding: one prefill pass over the prompt, then one token per step.

    Draws token ``i`` from ``softmax(logits / temperature)`` with ``split(key, R)[i]`` (the
    convention of :func:`grpo_theory.lm.policy.generic_sample`, so both samplers draw the same
    tokens), or feeds ``forced[:, i]`` when ``forced`` is given (teacher forcing through the
    cache). Returns tokens (N, R) (``pad_id`` after the first EOS), their log-probability
    (N,) up to and including the first EOS, and, when forced, the logits (N, R, V).
    """
    with _quiet():
        return _decode_body(spec.module(params), spec, key, prompts, forced, response_len,
                            temperature)


def _decode_body(model, spec, key, prompts, forced, r, temperature):
    n, p = prompts.shape
    s = p + r
    full = jnp.concatenate([prompts, jnp.zeros((n, r), prompts.dtype)], axis=1)
    pos, mask = _positions_mask(full)
    cache = {f"layer_{i}": {"k": jnp.zeros((n, s, spec.n_kv_heads, spec.head_dim), spec.dtype),
                            "v": jnp.zeros((n, s, spec.n_kv_heads, spec.head_dim), spec.dtype),
                            "end_index": jnp.zeros((n,), int)}  # default int, as tunix's 0s
             for i in range(spec.n_layers)}
    logits, cache = model(jnp.maximum(prompts, 0), pos[:, :p], cache, mask[:, :p])
    keys = jax.random.split(key, r)

    def draw(i, k, lg):
        lg = lg.astype(jnp.float32) / temperature
        tok = (jax.random.categorical(k, lg, axis=-1) if forced is None else forced[:, i])
        tok = tok.astype(jnp.int32)
        lp = jnp.take_along_axis(jax.nn.log_softmax(lg, axis=-1), tok[:, None], axis=-1)[:, 0]
        return tok, lp

    tok0, lp0 = draw(0, keys[0], logits[:, -1])

    def step(carry, inp):
        cache, tok = carry
        i, k = inp  # feed token i - 1 (absolute index p + i - 1), draw token i
        t = p + i - 1
        m = jax.lax.dynamic_slice_in_dim(mask, t, 1, axis=1)
        ps = jax.lax.dynamic_slice_in_dim(pos, t, 1, axis=1)
        lg, cache = model(tok[:, None], ps, cache, m)
        nxt, lp = draw(i, k, lg[:, 0])
        return (cache, nxt), (nxt, lp, lg[:, 0] if forced is not None else None)

    _, (toks, lps, lgs) = jax.lax.scan(step, (cache, tok0), (jnp.arange(1, r), keys[1:]))
    toks = jnp.concatenate([tok0[:, None], toks.T], axis=1)
    lps = jnp.concatenate([lp0[:, None], lps.T], axis=1)
    is_eos = jnp.isin(toks, jnp.asarray(spec.eos_ids, jnp.int32)).astype(jnp.int32)
    after = (jnp.cumsum(is_eos, axis=1) - is_eos) > 0
    toks = jnp.where(after, spec.pad_id, toks)
    logp = jnp.sum(jnp.where(after, 0.0, lps), axis=1)
    lgs = (None if forced is None
           else jnp.concatenate([logits[:, -1:], lgs.transpose(1, 0, 2)], axis=1))
    return toks, logp, lgs


@dataclass
class HFPolicy(LMPolicy):
    """:class:`~grpo_theory.lm.policy.LMPolicy` of a Hugging Face checkpoint (tunix's Qwen2).

    Extra fields: ``tokenizer`` (a ``tokenizers.Tokenizer``, from tokenizer.json or the GGUF
    file), ``config`` (the checked architecture,
    :func:`~grpo_theory.lm.checkpoints.files.read_config`), ``path`` and ``chat_template`` (the
    Jinja source of the checkpoint's chat template, or None). Prompts are left-padded with
    :data:`PROMPT_PAD` (masked; never a token id); ``pad_id`` fills responses after EOS.

    Overrides of the policy contract (listed in :class:`~grpo_theory.lm.policy.LMPolicy`):
    the tokenizer (``prompt_pad``, ``pad_prompts``, ``encode``, ``decode``,
    ``response_texts``), the chat template (``question_prompts``), the chat model's defaults
    (``default_response_len``, ``default_reward``), the prefill's logits and the KV cache
    (``sample_blocked``, ``sample_row_bytes``) and the ghost-norm route (``row_bytes``, ``score_contractions``, ``score_statistics``).

    Extensions of a checkpoint: ``chat``, ``prompt_lengths``, ``sample_with_log_probs``,
    ``ghost_moments``, ``score_dots`` and ``cached_logits``.
    """

    prompt_pad = PROMPT_PAD  # class attribute (not a field): the prompts' padding marker
    tokenizer: Any = None
    config: dict = field(default_factory=dict)
    path: str = ""
    chat_template: str | None = None

    def chat(self, texts, system: str | None = None) -> list[str]:
        """User messages rendered by the checkpoint's chat template (``chat_template`` of
        tokenizer_config.json, Jinja, as Hugging Face renders it) with the assistant's turn
        opened (``add_generation_prompt=True``), ready for :meth:`encode`.

        Args:
            texts: a string or a sequence of strings (one user message each).
            system: an optional system message (default: the template's own).

        Raises:
            ValueError: the checkpoint has no chat template, the template fails to render (one
                line naming the checkpoint), or ``jinja2`` is not installed.
        """
        texts = text_list(texts)
        if self.chat_template is None:
            raise ValueError(f"checkpoint {self.path!r} has no chat_template in "
                             f"tokenizer_config.json")
        head = [] if system is None else [{"role": "system", "content": system}]
        where = f"the chat template of {self.path!r}"
        return [render_template(self.chat_template, where,
                                messages=head + [{"role": "user", "content": t}],
                                add_generation_prompt=True, tools=None) for t in texts]

    def sample_with_log_probs(self, key, prompts, response_len: int):
        """Sampled responses (N, R) and the sampler's own ``log pi(y|x)`` (N,), KV-cached.

        Args:
            key: a JAX PRNG key or an integer seed.
            prompts: (N, P) integer ids (left-padded with :data:`PROMPT_PAD`).
            response_len: R >= 1.

        Returns:
            ``(tokens, log_probs)``: (N, R) int32 and (N,) float32.
        """
        prompts = self.check_prompts(prompts)
        response_len = V.positive_int("response_len", response_len)
        return self.apply_fn.sample_with_log_probs(self.params, key, prompts, response_len,
                                                   self.temperature)

    def sample_blocked(self, key, prompts, response_len: int, max_elems: float = 5e7, *,
                       progress=None, max_rows: int | None = None):
        """:meth:`LMPolicy.sample_blocked` in blocks that also keep the prefill's logits
        (rows x prompt_len x vocab) under 2**31 elements (8 GiB in float32; Qwen2.5's
        vocabulary has 151936 ids); for a small vocabulary the blocks are the base class's.
        ``progress(done, total)`` and ``max_rows``: as there, over these blocks."""
        p = max(1, int(np.shape(prompts)[1]))
        rows = max(1, int(2**31 // (p * self.vocab_size)))
        return super().sample_blocked(key, prompts, response_len,
                                      min(float(max_elems), float(rows * p * p)),
                                      progress=progress, max_rows=max_rows)

    def sample_row_bytes(self, prompt_len: int, response_len: int) -> int:
        """Bytes one row adds to the KV-cached sampler
        (:func:`grpo_theory.lm.budget.memory.sampler_row_bytes` in the parameters' dtype)."""
        b = max((np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(self.params)
                 if np.issubdtype(np.dtype(x.dtype), np.floating)), default=4)
        return sampler_row_bytes(self.config, prompt_len, response_len, b)

    def row_bytes(self, seq_len: int, response_len: int) -> int:
        """Bytes of activations one sequence of ``seq_len`` positions (``response_len`` of them
        a response) adds to the ghost-norm pass
        (:func:`grpo_theory.lm.budget.memory.ghost_row_bytes` in the parameters' dtype)."""
        b = max((np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(self.params)
                 if np.issubdtype(np.dtype(x.dtype), np.floating)), default=4)
        return ghost_row_bytes(self.config, seq_len, response_len, b)

    def score_statistics(self, prompts, responses, rewards, chunk: int = 64, *, stage=None,
                         progress=None):
        """The advisor's statistics of given rollouts by ghost norms
        (:func:`grpo_theory.lm.budget.statistics.ghost_statistics`: ``chunk`` rounded down to whole
        groups of n), or by per-sample scores when ``chunk`` holds less than one group.

        Args as :meth:`LMPolicy.score_statistics`.
        """
        shape = np.shape(rewards)
        if len(shape) == 2 and V.positive_int("chunk", chunk) < shape[1]:
            return super().score_statistics(prompts, responses, rewards, chunk, stage=stage,
                                            progress=progress)
        return ghost_statistics(self, prompts, responses, rewards, chunk, stage=stage,
                                progress=progress)

    def score_contractions(self, prompts, responses, weights, chunk: int = 256,
                           method: str = "ghost"):
        """``(W @ S, ||s_n||^2)`` with ``S`` the (N, D) scores ``grad log pi(y_n|x_n)``.

        Args:
            prompts: (N, P) ids left-padded with :data:`PROMPT_PAD`; responses: (N, R) ids.
            weights: (K, N) (or (N,)) finite real weights.
            chunk: samples per block (>= 1).
            method: "ghost" (default: one forward + one backward pass per block, per-layer
                ghost norms, no per-sample gradient formed; :mod:`grpo_theory.lm.budget.ghost`) or
                "per_sample" (``vmap(grad)`` per block, C x D floats per block of C:
                :func:`grpo_theory.lm.policy.score_contractions`).

        Returns:
            ``(acc, sq)``: (K, D) and (N,) NumPy float64 arrays (sums accumulated in float64
            when JAX's 64-bit mode is on).
        """
        if method not in ("ghost", "per_sample"):
            raise ValueError(f"method must be 'ghost' or 'per_sample', got {method!r}")
        if method == "per_sample":
            return super().score_contractions(prompts, responses, weights, chunk)
        prompts, responses = checked_tokens(prompts, responses, self._vocab(), self.prompt_pad)
        chunk = V.positive_int("chunk", chunk)
        w = V.real_array("weights", weights)
        if w.ndim not in (1, 2) or np.atleast_2d(w).shape[1] != prompts.shape[0]:
            raise ValueError(f"weights must have shape (K, {prompts.shape[0]}) or "
                             f"({prompts.shape[0]},), got {w.shape}")
        self.apply_fn._check_length(prompts.shape[1] + responses.shape[1])
        return ghost_contractions(self.config, self.params, prompts, responses,
                                  np.atleast_2d(w), self.temperature, chunk, self.eos_ids)

    def ghost_moments(self, prompts, responses, weights, group_size: int, chunk: int = 256,
                      init=None, dots: bool = False):
        """``(S, ||s_n||^2, group norms)`` by ghost norms in one backward pass per block
        (:func:`grpo_theory.lm.budget.ghost.ghost_moments`: ``S = sum_n w_n s_n`` a pytree like
        ``params``, the groups ``group_size`` consecutive rows), and every ``<s_n, S>`` from the
        same pass with ``dots`` (the whole batch in one block, no ``init``).

        Args:
            prompts: (N, P) ids left-padded with :data:`PROMPT_PAD`; responses: (N, R) ids.
            weights: (N,) finite real weights.
            group_size: rows per group (divides N and ``chunk``).
            chunk: samples per block (>= 1).
            init: None or the ``S`` of an earlier call, added to in place (donated).
            dots: also return (N,) ``<s_n, S>`` (``chunk >= N`` and ``init`` None).
        """
        prompts, responses = checked_tokens(prompts, responses, self._vocab(), self.prompt_pad)
        chunk = V.positive_int("chunk", chunk)
        w = V.real_array("weights", weights)
        if w.shape != (prompts.shape[0],):
            raise ValueError(f"weights must have shape ({prompts.shape[0]},), got {w.shape}")
        self.apply_fn._check_length(prompts.shape[1] + responses.shape[1])
        return ghost_moments(self.config, self.params, prompts, responses, w,
                             V.positive_int("group_size", group_size), self.temperature,
                             min(chunk, prompts.shape[0]), self.eos_ids, init=init,
                             dots=dots)

    def score_dots(self, prompts, responses, direction, chunk: int = 256):
        """(N,) ``<s_n, v>`` by forward mode (:func:`grpo_theory.lm.budget.ghost.score_dots`);
        ``direction`` a pytree like ``params``."""
        prompts, responses = checked_tokens(prompts, responses, self._vocab(), self.prompt_pad)
        chunk = V.positive_int("chunk", chunk)
        if (jax.tree_util.tree_structure(direction)
                != jax.tree_util.tree_structure(self.params)):
            raise ValueError("direction must be a pytree with the structure of params")
        self.apply_fn._check_length(prompts.shape[1] + responses.shape[1])
        return score_dots(self.config, self.params, prompts, responses, direction,
                          self.temperature, chunk, self.eos_ids)

    def cached_logits(self, prompts, responses):
        """Logits (N, R, V) of the response positions computed through the KV cache with the
        responses fed token by token (equal to the full forward pass; a check of the cache)."""
        prompts = self.check_prompts(prompts)
        responses = V.token_array("responses", responses, 2, self._vocab())
        if prompts.shape[0] != responses.shape[0]:
            raise ValueError(f"prompts and responses must have the same number of rows, got "
                             f"{prompts.shape[0]} and {responses.shape[0]}")
        self.apply_fn._check_length(prompts.shape[1] + responses.shape[1])
        return _decode(self.apply_fn, self.params, jax.random.PRNGKey(0), jnp.asarray(prompts),
                       jnp.asarray(responses, jnp.int32), responses.shape[1],
                       self.temperature)[2]

    def pad_prompts(self, ids) -> np.ndarray:
        """Token-id lists to an (N, P) int32 array, each row preceded by :data:`PROMPT_PAD`
        (-1) up to the longest; every token id is kept, the checkpoint's pad and EOS ids
        included (:meth:`prompt_lengths` gives the lengths).

        Raises:
            ValueError: no rows, or a row with no token (an empty prompt).
        """
        ids = [list(i) for i in ids]
        empty = [j for j, i in enumerate(ids) if not i]
        if not ids or empty:
            raise ValueError(f"texts {empty[:5]} encode to no token (empty prompts); every "
                             f"prompt needs at least one token")
        p = max(len(i) for i in ids)
        out = np.full((len(ids), p), PROMPT_PAD, np.int32)
        for row, i in zip(out, ids):
            row[p - len(i):] = i
        return out

    def encode(self, texts) -> np.ndarray:
        """Texts to a left-padded (N, P) int32 array (:meth:`pad_prompts`) by the checkpoint's
        tokenizer.

        Args:
            texts: a string or a sequence of strings (the tokenizer adds its special tokens).

        Raises:
            ValueError: no texts, a non-string, or a text with no tokens.
        """
        texts = text_list(texts)
        return self.pad_prompts([e.ids for e in self.tokenizer.encode_batch(texts)])

    def question_prompts(self, questions, fmt: str = "answer",
                         chat_template: bool = True) -> tuple[np.ndarray, str]:
        """Questions to prompts: each a user message in the checkpoint's chat template
        (:meth:`chat`, the assistant's turn opened) when ``chat_template`` and the checkpoint
        has one, else the raw text; and how they were made.

        Args:
            questions: a string or a sequence of strings.
            fmt: unused (the package model's format marker).
            chat_template: use the checkpoint's chat template when it has one.

        Returns:
            ``(prompts (N, P), description)``.
        """
        if chat_template and self.chat_template is not None:
            return self.encode(self.chat(questions)), (
                "each question as a user message in the checkpoint's chat template "
                "(--no-chat-template: raw text)")
        said = ("raw question text (--no-chat-template)" if self.chat_template is not None
                else "raw question text (the checkpoint has no chat template)")
        return self.encode(questions), said

    def default_response_len(self, fmt: str = "answer") -> int:
        """Tokens per sampled response: 32 (``fmt`` unused)."""
        return 32

    def default_reward(self):
        """The integer-answer reward that allows a trailing sentence end or markup (``"42."``;
        :func:`grpo_theory.lm.task.reward_answer_text`): a chat model's answer may end a
        sentence."""
        return reward_answer_text

    def prompt_lengths(self, prompts) -> np.ndarray:
        """The number of tokens (N,) of each row of left-padded prompts (entries other than
        :data:`PROMPT_PAD`)."""
        return np.sum(np.asarray(self.check_prompts(prompts)) != PROMPT_PAD, axis=1)

    def decode(self, responses) -> list[str]:
        """Response ids (N, R) to texts, each cut after its first EOS (the EOS included)."""
        responses = np.asarray(V.token_array("responses", responses, 2, self._vocab()))
        out = []
        for row in responses.tolist():
            cut = next((j + 1 for j, t in enumerate(row) if t in self.eos_ids), len(row))
            out.append(self.tokenizer.decode(row[:cut], skip_special_tokens=False))
        return out

    def response_texts(self, responses) -> list[str]:
        """The texts a reward reads: responses cut before their first EOS, special tokens
        dropped (what :func:`grpo_theory.lm.task.reward_answer_text` reads)."""
        out = []
        for row in np.asarray(responses).tolist():
            cut = next((j for j, t in enumerate(row) if t in self.eos_ids), len(row))
            out.append(self.tokenizer.decode(row[:cut], skip_special_tokens=True))
        return out


def hf_policy(arch, params, graphdef, zero, eos_ids, pad_id, dtype, temperature, tokenizer,
              source, chat_template) -> HFPolicy:
    """The :class:`HFPolicy` of a loaded checkpoint's parts (the fields of
    :class:`~grpo_theory.lm.checkpoints.load.Checkpoint`, ``arch`` with its ``frozen_row``)."""
    spec = _Spec(graphdef, pad_id, eos_ids, arch["max_length"], arch["n_layers"],
                 arch["n_kv_heads"], arch["head_dim"], dtype, zero, PureForward.of(arch))
    return HFPolicy(params, spec, spec.sample, temperature, arch["vocab_size"], eos_ids,
                    pad_id, tokenizer=tokenizer, config=arch, path=source,
                    chat_template=chat_template)
