r"""Hugging Face checkpoints of the Qwen2 / Qwen2.5 / Llama family as the package's policy.

``policy = from_pretrained(path)`` reads a checkpoint directory in the Hugging Face layout
(``config.json``; ``model.safetensors`` or shards listed in ``model.safetensors.index.json``;
``tokenizer.json``; optionally ``generation_config.json`` and a chat template in
``tokenizer_config.json``, :meth:`HFPolicy.chat`), builds tunix's JAX implementation of
the architecture (``tunix.models.qwen2.model.Qwen2``: RMSNorm, rotary embeddings, grouped-query
attention with q/k/v biases, SwiGLU MLP, tied or untied output head) and returns an
:class:`HFPolicy`, an :class:`~grpo_theory.lm.policy.LMPolicy` with the same interface: exact
teacher-forced log-probabilities ``log pi(y|x) = sum_t log softmax(logits_t / T)[y_t]`` over the
response up to and including its first EOS (the checkpoint's own EOS ids), KV-cached sampling
and per-sample scores ``s = grad_theta log pi(y|x)`` by ``jax.grad`` (for the estimators of the
main paper's Algorithm 1). Nothing is downloaded.

A Llama checkpoint is the same computation without q/k/v biases (``attention_bias: false``), so
it runs on the same module with the biases fixed at zero (tunix 0.1.7's own ``Llama3`` module
ignores ``rope_theta`` and always uses 1e6, which is wrong for Llama 3's 5e5). Checkpoints that
need something this computation does not do (``rope_scaling``, sliding-window attention, MLP
biases, an activation other than SiLU) are refused with a ``ValueError`` naming the field.

Padding: prompts are left-padded with ``pad_id`` (the checkpoint's pad token, else its first EOS
id). Prompt tokens equal to ``pad_id`` are masked out of attention and do not advance the
rotary positions (position of a token = number of real tokens before it), so a left-padded
prompt gives the same responses' log-probabilities as the unpadded one. Sampled responses hold
``pad_id`` after their first EOS.

tunix, flax, safetensors and tokenizers are imported on first use (the optional extra ``hf``:
``pip install -e ".[hf]"``); importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .policy import LMPolicy, _eos_ids

__all__ = ["SUPPORTED_MODEL_TYPES", "HFPolicy", "from_pretrained", "read_config"]

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
_INSTALL = 'pip install -e ".[hf]"  (google-tunix, safetensors, tokenizers)'


def _need(module: str):
    """Import an optional dependency, or a ValueError saying how to install it."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"loading Hugging Face checkpoints needs {module!r}, which is not "
                         f"installed ({e}); install the optional extra: {_INSTALL}") from None


@contextlib.contextmanager
def _quiet():
    """Silence tunix's and flax's own deprecation warnings (tunix 0.1.7 uses APIs that flax 0.12
    deprecates: ``.value``, ``sharding=``, ``jax.experimental.shard_map``; nothing a user of
    this module can act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(tunix|flax)\.")
        yield


def _read_json(path: str, name: str, required: bool = True):
    f = os.path.join(path, name)
    if not os.path.isfile(f):
        if required:
            raise ValueError(f"checkpoint directory {path!r} has no {name}: a Hugging Face "
                             f"checkpoint needs config.json, tokenizer.json and "
                             f"model.safetensors (or model.safetensors.index.json with its "
                             f"shards); nothing is downloaded")
        return None
    with open(f) as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"{f} is not valid JSON: {e}") from None


def _checkpoint_dir(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a checkpoint directory (str or os.PathLike), got "
                         f"{type(path).__name__}")
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isdir(path):
        raise ValueError(f"path {path!r} is not a directory: from_pretrained needs a local "
                         f"Hugging Face checkpoint directory (config.json, tokenizer.json, "
                         f"*.safetensors); nothing is downloaded")
    return path


def read_config(path) -> dict:
    """The checked architecture of a checkpoint directory's ``config.json``.

    Args:
        path: the checkpoint directory.

    Returns:
        dict with ``model_type``, ``n_layers``, ``vocab_size``, ``d_model``, ``d_ff``,
        ``n_heads``, ``n_kv_heads``, ``head_dim``, ``rope_theta``, ``norm_eps``, ``tied``,
        ``qkv_bias``, ``max_length`` (``max_position_embeddings`` or None) and ``eos_ids``,
        ``pad_id`` as written in ``config.json`` (None when absent).

    Raises:
        ValueError: missing directory or config.json, a ``model_type`` outside
            :data:`SUPPORTED_MODEL_TYPES`, a missing size field, or a feature the computation
            does not implement (``rope_scaling``, sliding windows, MLP biases, non-SiLU).
    """
    path = _checkpoint_dir(path)
    c = _read_json(path, "config.json")
    mt = c.get("model_type")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"config.json of {path!r} has model_type {mt!r}; supported: "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)} (Qwen2, Qwen2.5, Llama)")
    missing = [k for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads", "vocab_size") if k not in c]
    if missing:
        raise ValueError(f"config.json of {path!r} lacks {', '.join(missing)}")
    rope = c.get("rope_parameters") or {}
    if c.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        raise ValueError(f"config.json of {path!r} sets rope_scaling "
                         f"{c.get('rope_scaling') or rope!r}; only plain rotary embeddings "
                         f"(rope_scaling null) are supported")
    if c.get("use_sliding_window"):
        raise ValueError(f"config.json of {path!r} sets use_sliding_window: true; only full "
                         f"attention is supported")
    if c.get("mlp_bias"):
        raise ValueError(f"config.json of {path!r} sets mlp_bias: true; only bias-free MLPs "
                         f"are supported")
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"config.json of {path!r} has hidden_act {act!r}; only 'silu' "
                         f"(SwiGLU) is supported")
    d, h = int(c["hidden_size"]), int(c["num_attention_heads"])
    hd = c.get("head_dim") or d // h
    kv = int(c.get("num_key_value_heads") or h)
    if h % kv:
        raise ValueError(f"config.json of {path!r}: num_attention_heads {h} is not a multiple "
                         f"of num_key_value_heads {kv}")
    eos = c.get("eos_token_id")
    return {
        "model_type": mt,
        "n_layers": int(c["num_hidden_layers"]), "vocab_size": int(c["vocab_size"]),
        "d_model": d, "d_ff": int(c["intermediate_size"]), "n_heads": h, "n_kv_heads": kv,
        "head_dim": int(hd),
        "rope_theta": float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
        "norm_eps": float(c.get("rms_norm_eps", 1e-6)),
        "tied": bool(c.get("tie_word_embeddings", False)),
        "qkv_bias": mt == "qwen2" or bool(c.get("attention_bias", False)),
        "max_length": (int(c["max_position_embeddings"]) if c.get("max_position_embeddings")
                       else None),
        "eos_ids": None if eos is None else _eos_ids(eos),
        "pad_id": c.get("pad_token_id"),
    }


def _hf_names(arch: dict) -> dict:
    """HF tensor name -> (path in tunix's Qwen2 parameter dict, transform of the HF array)."""
    d, h, kv, hd = arch["d_model"], arch["n_heads"], arch["n_kv_heads"], arch["head_dim"]
    out = {"model.embed_tokens.weight": (("embedder", "input_embedding"), None),
           "model.norm.weight": (("final_norm", "w"), None)}
    if not arch["tied"]:
        out["lm_head.weight"] = (("lm_head", "w"), lambda w: w.T)
    for i in range(arch["n_layers"]):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        la = ("layers", i, "attn")
        out[a + "q_proj.weight"] = (la + ("q_proj", "w"), lambda w: w.T.reshape(d, h, hd))
        out[a + "k_proj.weight"] = (la + ("k_proj", "w"), lambda w: w.T.reshape(d, kv, hd))
        out[a + "v_proj.weight"] = (la + ("v_proj", "w"), lambda w: w.T.reshape(d, kv, hd))
        out[a + "o_proj.weight"] = (la + ("o_proj", "w"), lambda w: w.T.reshape(h, hd, d))
        if arch["qkv_bias"]:
            for p in "qkv":
                out[a + f"{p}_proj.bias"] = (la + (f"{p}_bias",), None)
        for p in ("gate_proj", "up_proj", "down_proj"):
            out[m + p + ".weight"] = (("layers", i, "mlp", p, "kernel"), lambda w: w.T)
        for p in ("input_layernorm", "post_attention_layernorm"):
            out[f"model.layers.{i}.{p}.weight"] = (("layers", i, p, "w"), None)
    return out


def _shards(path: str) -> list[str]:
    """The safetensors files of the checkpoint (all of those the index lists must exist)."""
    index = _read_json(path, "model.safetensors.index.json", required=False)
    if index is not None:
        wm = index.get("weight_map")
        if not isinstance(wm, dict) or not wm:
            raise ValueError(f"model.safetensors.index.json of {path!r} has no weight_map")
        files = sorted(set(wm.values()))
        absent = [f for f in files if not os.path.isfile(os.path.join(path, f))]
        if absent:
            raise ValueError(f"checkpoint {path!r} lacks shard(s) {', '.join(absent)} listed "
                             f"in model.safetensors.index.json")
        return [os.path.join(path, f) for f in files]
    single = os.path.join(path, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    raise ValueError(f"checkpoint directory {path!r} has no model.safetensors and no "
                     f"model.safetensors.index.json (weights must be safetensors; nothing is "
                     f"downloaded)")


def _load_params(path: str, arch: dict, abstract: dict, dtype) -> dict:
    """tunix's parameter dict (``abstract``'s structure) filled from the safetensors shards."""
    safetensors = _need("safetensors")
    names = _hf_names(arch)
    flat = {}
    for f in _shards(path):
        with safetensors.safe_open(f, framework="numpy") as sf:
            for k in sf.keys():
                if k in names:
                    tgt, tf = names[k]
                    w = sf.get_tensor(k)
                    flat[tgt] = (k, tf(w) if tf is not None else w)
    missing = [k for k, (tgt, _) in names.items() if tgt not in flat]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ValueError(f"checkpoint {path!r} lacks tensor(s) {', '.join(missing[:5])}{more} "
                         f"required by its config.json ({arch['model_type']}, "
                         f"{arch['n_layers']} layers, tie_word_embeddings={arch['tied']})")

    def fill(node, prefix):
        if isinstance(node, dict):
            return {k: fill(v, prefix + (k,)) for k, v in node.items()}
        if prefix not in flat:  # q/k/v biases of a Llama checkpoint without attention_bias
            return jnp.zeros(node.shape, dtype)
        name, arr = flat[prefix]
        if tuple(arr.shape) != tuple(node.shape):
            raise ValueError(f"tensor {name} of checkpoint {path!r} has shape "
                             f"{tuple(arr.shape)} after conversion, expected {tuple(node.shape)} "
                             f"from config.json")
        return jnp.asarray(np.asarray(arr), dtype)

    return fill(abstract, ())


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
    #: the q/k/v biases are zeros standing in for a checkpoint without them (Llama): no gradient
    fixed_bias: bool = False

    def _check_length(self, t: int):
        if self.max_length is not None and t > self.max_length:
            raise ValueError(f"prompt + response length {t} exceeds the checkpoint's "
                             f"max_position_embeddings = {self.max_length}")

    def __call__(self, params, tokens, prompt_len):
        """Next-token logits (N, T, V) (the ``apply_fn`` of the policy interface)."""
        tokens = jnp.asarray(tokens)
        self._check_length(tokens.shape[1])
        from flax import nnx
        pos, mask = _positions_mask(tokens, prompt_len, self.pad_id)
        if self.fixed_bias:
            params = _stop_bias_gradients(params)
        with _quiet():
            logits, _ = nnx.merge(self.graphdef, params)(tokens, pos, None, mask)
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


def _stop_bias_gradients(params):
    """``params`` with ``stop_gradient`` on the q/k/v biases (the scores of a checkpoint without
    attention biases have no components along them)."""
    def leaf(path, v):
        last = path[-1]
        return jax.lax.stop_gradient(v) if getattr(last, "key", None) in (
            "q_bias", "k_bias", "v_bias") else v
    return jax.tree_util.tree_map_with_path(leaf, params)


def _positions_mask(tokens, prompt_len, pad_id):
    """Rotary positions (N, T) and attention mask (N, T, T) for left-padded prompts.

    Valid keys: response tokens and prompt tokens other than ``pad_id``; position of token t =
    (number of valid tokens before t), so left padding shifts nothing; causal; the diagonal is
    always kept (a PAD query then attends to itself only, never to an empty set).
    """
    n, t = tokens.shape
    idx = jnp.arange(t)
    valid = (tokens != pad_id) | (idx >= prompt_len)[None, :]
    pos = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)
    causal = idx[None, :] <= idx[:, None]
    mask = causal[None] & (valid[:, None, :] | (idx[None, :] == idx[:, None])[None])
    return pos, mask


@partial(jax.jit, static_argnames=("spec", "response_len"))
def _decode(spec: _Spec, params, key, prompts, forced, response_len: int, temperature=1.0):
    """KV-cached decoding: one prefill pass over the prompt, then one token per step.

    Draws token ``i`` from ``softmax(logits / temperature)`` with ``split(key, R)[i]`` (the
    convention of :func:`grpo_theory.lm.policy.generic_sample`, so both samplers draw the same
    tokens), or feeds ``forced[:, i]`` when ``forced`` is given (teacher forcing through the
    cache). Returns tokens (N, R) (``pad_id`` after the first EOS), their log-probability
    (N,) up to and including the first EOS, and, when forced, the logits (N, R, V).
    """
    from flax import nnx
    with _quiet():
        return _decode_body(nnx.merge(spec.graphdef, params), spec, key, prompts, forced,
                            response_len, temperature)


def _decode_body(model, spec, key, prompts, forced, r, temperature):
    n, p = prompts.shape
    s = p + r
    full = jnp.concatenate([prompts, jnp.zeros((n, r), prompts.dtype)], axis=1)
    pos, mask = _positions_mask(full, p, spec.pad_id)
    cache = {f"layer_{i}": {"k": jnp.zeros((n, s, spec.n_kv_heads, spec.head_dim), spec.dtype),
                            "v": jnp.zeros((n, s, spec.n_kv_heads, spec.head_dim), spec.dtype),
                            "end_index": jnp.zeros((n,), int)}  # default int, as tunix's 0s
             for i in range(spec.n_layers)}
    logits, cache = model(prompts, pos[:, :p], cache, mask[:, :p])
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

    Extra fields: ``tokenizer`` (a ``tokenizers.Tokenizer`` from tokenizer.json), ``config``
    (the checked architecture, :func:`read_config`), ``path`` and ``chat_template`` (the Jinja
    source of tokenizer_config.json's ``chat_template``, or None). ``pad_id`` left-pads prompts
    (masked) and fills responses after EOS.
    """

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
            ValueError: the checkpoint has no chat template, or ``jinja2`` is not installed.
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError("texts must be a string or a non-empty sequence of strings")
        if self.chat_template is None:
            raise ValueError(f"checkpoint {self.path!r} has no chat_template in "
                             f"tokenizer_config.json")
        tmpl = _chat_renderer(self.chat_template)
        head = [] if system is None else [{"role": "system", "content": system}]
        return [tmpl.render(messages=head + [{"role": "user", "content": t}],
                            add_generation_prompt=True, tools=None) for t in texts]

    def sample_with_log_probs(self, key, prompts, response_len: int):
        """Sampled responses (N, R) and the sampler's own ``log pi(y|x)`` (N,), KV-cached.

        Args:
            key: a JAX PRNG key or an integer seed.
            prompts: (N, P) integer ids (left-padded with ``pad_id``).
            response_len: R >= 1.

        Returns:
            ``(tokens, log_probs)``: (N, R) int32 and (N,) float32.
        """
        prompts = V.token_array("prompts", prompts, 2, self._vocab())
        response_len = V.positive_int("response_len", response_len)
        return self.apply_fn.sample_with_log_probs(self.params, key, prompts, response_len,
                                                   self.temperature)

    def sample_blocked(self, key, prompts, response_len: int, max_elems: float = 5e7):
        """:meth:`LMPolicy.sample_blocked` in blocks that also keep the prefill's logits
        (rows x prompt_len x vocab) under 2**31 elements (8 GiB in float32; Qwen2.5's
        vocabulary has 151936 ids); for a small vocabulary the blocks are the base class's."""
        p = max(1, int(np.shape(prompts)[1]))
        rows = max(1, int(2**31 // (p * self.vocab_size)))
        return super().sample_blocked(key, prompts, response_len,
                                      min(float(max_elems), float(rows * p * p)))

    def cached_logits(self, prompts, responses):
        """Logits (N, R, V) of the response positions computed through the KV cache with the
        responses fed token by token (equal to the full forward pass; a check of the cache)."""
        prompts = V.token_array("prompts", prompts, 2, self._vocab())
        responses = V.token_array("responses", responses, 2, self._vocab())
        if prompts.shape[0] != responses.shape[0]:
            raise ValueError(f"prompts and responses must have the same number of rows, got "
                             f"{prompts.shape[0]} and {responses.shape[0]}")
        self.apply_fn._check_length(prompts.shape[1] + responses.shape[1])
        return _decode(self.apply_fn, self.params, jax.random.PRNGKey(0), jnp.asarray(prompts),
                       jnp.asarray(responses, jnp.int32), responses.shape[1],
                       self.temperature)[2]

    def encode(self, texts) -> np.ndarray:
        """Texts to a left-padded (N, P) int32 array of token ids (``pad_id`` on the left).

        Args:
            texts: a string or a sequence of strings (the tokenizer adds its special tokens).
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError("texts must be a string or a non-empty sequence of strings")
        ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
        p = max(1, max(len(i) for i in ids))
        out = np.full((len(ids), p), self.pad_id, np.int32)
        for row, i in zip(out, ids):
            row[p - len(i):] = i
        return out

    def decode(self, responses) -> list[str]:
        """Response ids (N, R) to texts, each cut after its first EOS (the EOS included)."""
        responses = np.asarray(V.token_array("responses", responses, 2, self._vocab()))
        out = []
        for row in responses.tolist():
            cut = next((j + 1 for j, t in enumerate(row) if t in self.eos_ids), len(row))
            out.append(self.tokenizer.decode(row[:cut], skip_special_tokens=False))
        return out


def _chat_renderer(template: str):
    """A compiled Jinja chat template, in the environment Hugging Face renders it with
    (sandboxed, ``trim_blocks``, ``lstrip_blocks``, ``raise_exception``)."""
    sandbox = _need("jinja2.sandbox")

    def raise_exception(msg):
        raise ValueError(f"chat template: {msg}")

    env = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def _read_chat_template(path: str) -> str | None:
    """``chat_template`` of tokenizer_config.json (or chat_template.jinja), else None; a list
    of named templates gives the one named ``default``."""
    f = os.path.join(path, "chat_template.jinja")
    if os.path.isfile(f):
        with open(f) as fh:
            return fh.read()
    t = (_read_json(path, "tokenizer_config.json", required=False) or {}).get("chat_template")
    if isinstance(t, list):
        t = next((d.get("template") for d in t if isinstance(d, dict)
                  and d.get("name") == "default"), None)
    return t if isinstance(t, str) and t else None


def from_pretrained(path, *, dtype="float32", temperature: float = 1.0, eos_ids=None,
                    pad_id: int | None = None) -> HFPolicy:
    """Load a local Hugging Face checkpoint of the Qwen2 / Qwen2.5 / Llama family as a policy.

    Args:
        path: the checkpoint directory (config.json, tokenizer.json, model.safetensors or
            model.safetensors.index.json + shards, optional generation_config.json).
        dtype: parameter and compute dtype: "float32" (default), "bfloat16" or "float16".
        temperature: sampling and log-prob temperature > 0.
        eos_ids: id(s) that end a response; default: ``eos_token_id`` of generation_config.json,
            else of config.json.
        pad_id: left-padding / fill id; default: ``pad_token_id`` of generation_config.json,
            else of config.json, else the first EOS id.

    Returns:
        An :class:`HFPolicy` (an :class:`~grpo_theory.lm.policy.LMPolicy`).

    Raises:
        ValueError: a missing directory or file, an unsupported ``model_type`` or feature, a
            missing or mis-shaped tensor, no EOS id anywhere, or the optional extra not
            installed.
    """
    path = _checkpoint_dir(path)
    arch = read_config(path)
    if isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        dtype = _DTYPES[dtype]
    elif jnp.dtype(dtype) not in [jnp.dtype(d) for d in _DTYPES.values()]:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    gen = _read_json(path, "generation_config.json", required=False) or {}
    if eos_ids is None:
        eos_ids = gen.get("eos_token_id", arch["eos_ids"])
        if eos_ids is None:
            raise ValueError(f"neither generation_config.json nor config.json of {path!r} "
                             f"gives eos_token_id; pass eos_ids=")
    eos_ids = _eos_ids(eos_ids)
    if pad_id is None:
        pad_id = gen.get("pad_token_id", arch["pad_id"])
        pad_id = eos_ids[0] if pad_id is None else pad_id
    pad_id = V.integer("pad_id", pad_id, 0, arch["vocab_size"] - 1)
    for e in eos_ids:
        V.integer("eos_ids", e, 0, arch["vocab_size"] - 1)
    tok_file = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(tok_file):
        _read_json(path, "tokenizer.json")  # raises the missing-file error
    _shards(path)  # missing weight files before the (slow) tunix import
    tokenizer = _need("tokenizers").Tokenizer.from_file(tok_file)

    with _quiet():
        qm = _need("tunix.models.qwen2.model")
        nnx = _need("flax.nnx")
    mcfg = qm.ModelConfig(
        num_layers=arch["n_layers"], vocab_size=arch["vocab_size"], embed_dim=arch["d_model"],
        hidden_dim=arch["d_ff"], num_heads=arch["n_heads"], head_dim=arch["head_dim"],
        num_kv_heads=arch["n_kv_heads"], rope_theta=arch["rope_theta"],
        norm_eps=arch["norm_eps"], use_tied_embedding=arch["tied"], dtype=dtype,
        param_dtype=dtype)
    with _quiet():
        graphdef, abstract = nnx.split(nnx.eval_shape(lambda: qm.Qwen2(mcfg,
                                                                       rngs=nnx.Rngs(0))))
    params = _load_params(path, arch, nnx.to_pure_dict(abstract), dtype)
    spec = _Spec(graphdef, pad_id, eos_ids, arch["max_length"], arch["n_layers"],
                 arch["n_kv_heads"], arch["head_dim"], dtype, not arch["qkv_bias"])
    return HFPolicy(params, spec, spec.sample, temperature, arch["vocab_size"], eos_ids,
                    pad_id, tokenizer=tokenizer, config=arch, path=path,
                    chat_template=_read_chat_template(path))
