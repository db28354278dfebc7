r"""The Qwen2 / Qwen2.5 / Llama family: its two :class:`~grpo_theory.lm.families.spec.ModelSpec`
entries.

One computation: RMSNorm, rotary embeddings on rotate-half pairs ``(i, i + hd/2)``,
grouped-query attention (query head j reads key/value head ``j // (H / H_kv)``) with optional
q/k/v biases, a SwiGLU MLP ``down(silu(gate(z)) * up(z))``, a tied or untied head. Qwen2 always
has the q/k/v biases; Llama has them when ``attention_bias`` is true, and llama.cpp's converter
permutes its q/k rows (:func:`permute_qk`). Both run as tunix's ``Qwen2`` module (tunix 0.1.7's
``Llama3`` ignores ``rope_theta``), an absent bias as constant zeros.

Prompts are left-padded with ``-1`` (:func:`positions_mask`); the pure forward
(:func:`forward`) forms only the logits at ``rows``.

The embedding row ``frozen_row`` of the architecture (``config.json``'s ``pad_token_id`` by
default) gets no gradient through the lookup, as transformers' ``nn.Embedding(vocab, d,
padding_idx=config.pad_token_id)`` trains it (``LlamaModel`` and ``Qwen2Model`` of transformers
5.12.1): the looked-up vectors at the positions holding that id are ``stop_gradient``-ed. A tied
head still reads and trains that row (``padding_idx`` zeroes the lookup's gradient only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..._validation import eos_ids as _eos_ids
from .spec import (SIZE_FIELDS, ModelSpec, TensorSpec, bool_field, check_sizes, int_field,
                   need_extra, quiet_tunix)


#: keys of the checked architecture (:func:`check_config`)
CONFIG_FIELDS = ("model_type", "n_layers", "vocab_size", "d_model", "d_ff", "n_heads",
                 "n_kv_heads", "head_dim", "rope_theta", "norm_eps", "tied", "qkv_bias",
                 "max_length", "eos_ids", "pad_id", "frozen_row")
_KEY_FIELDS = ("model_type", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim",
               "rope_theta", "norm_eps", "tied", "qkv_bias", "frozen_row")

# GGUF tensor name (per block: blk.{i}.<name>) -> Hugging Face name
_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
           "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
_BLOCK = {"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
          "attn_v.weight": "self_attn.v_proj.weight",
          "attn_output.weight": "self_attn.o_proj.weight",
          "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
          "attn_v.bias": "self_attn.v_proj.bias",
          "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
          "ffn_down.weight": "mlp.down_proj.weight",
          "attn_norm.weight": "input_layernorm.weight",
          "ffn_norm.weight": "post_attention_layernorm.weight"}
_GLOBAL_HF = {h: g for g, h in _GLOBAL.items()}
_BLOCK_HF = {h: g for g, h in _BLOCK.items()}


# --- config.json --------------------------------------------------------------------------------

def check_config(c: dict, source: str, always_bias: bool) -> dict:
    """The checked architecture of a Hugging Face ``config.json`` of this family (its
    ``model_type`` already matched).

    Checks: the sizes, ``rope_theta`` and ``rms_norm_eps`` by
    :func:`~grpo_theory.lm.families.spec.check_sizes` (the rules GGUF metadata is checked by too);
    boolean flags booleans;
    ``eos_token_id`` / ``pad_token_id`` ids in ``[0, vocab_size)``; no feature the computation
    lacks (``rope_scaling``, sliding windows, MLP biases, an activation other than SiLU).

    Args:
        c: the parsed ``config.json``; source: its name for messages.
        always_bias: q/k/v biases regardless of ``attention_bias`` (Qwen2).

    Returns:
        dict with the keys :data:`CONFIG_FIELDS` (``max_length``, ``eos_ids``, ``pad_id`` None
        when absent; ``frozen_row`` = ``pad_id``: the row transformers' ``padding_idx``
        freezes).
    """
    rope = c.get("rope_parameters")
    if rope is None:
        rope = {}
    if not isinstance(rope, dict):
        raise ValueError(f"{source}: rope_parameters must be an object, got {rope!r}")
    if c.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        raise ValueError(f"{source} sets rope_scaling {c.get('rope_scaling') or rope!r}; only "
                         f"plain rotary embeddings (rope_scaling null) are supported")
    if bool_field(c, "use_sliding_window", source, False):
        raise ValueError(f"{source} sets use_sliding_window: true; only full attention is "
                         f"supported")
    if bool_field(c, "mlp_bias", source, False):
        raise ValueError(f"{source} sets mlp_bias: true; only bias-free MLPs are supported")
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{source} has hidden_act {act!r}; only 'silu' (SwiGLU) is supported")
    raw = {k: c[k] for k in SIZE_FIELDS if k in c}
    if "rope_theta" in rope:
        raw["rope_theta"] = rope["rope_theta"]
    sizes = check_sizes(raw, source)
    vocab = sizes["vocab_size"]
    eos = c.get("eos_token_id")
    if eos is not None:
        try:
            eos = _eos_ids(eos)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{source}: eos_token_id must be a token id or a non-empty list "
                             f"of ids in [0, {vocab}), got {eos!r} ({e})") from None
        bad = [e for e in eos if e >= vocab]
        if bad:
            raise ValueError(f"{source}: eos_token_id {bad[0]} is outside [0, vocab_size = "
                             f"{vocab})")
    pad = int_field(c, "pad_token_id", source, minimum=0)
    if pad is not None and pad >= vocab:
        raise ValueError(f"{source}: pad_token_id {pad} is outside [0, vocab_size = {vocab})")
    out = dict(sizes, model_type=c["model_type"],
               tied=bool_field(c, "tie_word_embeddings", source, False),
               qkv_bias=always_bias or bool_field(c, "attention_bias", source, False),
               eos_ids=eos, pad_id=pad, frozen_row=pad)
    return {k: out[k] for k in CONFIG_FIELDS}


# --- tensors ------------------------------------------------------------------------------------

def tensors(arch: dict) -> dict:
    """Hugging Face name -> :class:`~grpo_theory.lm.families.spec.TensorSpec` of every tensor the
    architecture has (no ``lm_head`` when tied, no q/k/v biases without ``qkv_bias``)."""
    d, f, v = arch["d_model"], arch["d_ff"], arch["vocab_size"]
    h, kv, hd = arch["n_heads"], arch["n_kv_heads"], arch["head_dim"]
    out = {}

    def add(hf, shape, path, tf=None):
        if hf.startswith("model.layers."):
            i, rest = hf[len("model.layers."):].split(".", 1)
            g = f"blk.{i}.{_BLOCK_HF[rest]}"
        else:
            g = _GLOBAL_HF[hf]
        out[hf] = TensorSpec(hf, g, tuple(shape), tuple(path), tf)

    add("model.embed_tokens.weight", (v, d), ("embedder", "input_embedding"))
    add("model.norm.weight", (d,), ("final_norm", "w"))
    if not arch["tied"]:
        add("lm_head.weight", (v, d), ("lm_head", "w"), lambda w: w.T)
    for i in range(arch["n_layers"]):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        la = ("layers", i, "attn")
        add(a + "q_proj.weight", (h * hd, d), la + ("q_proj", "w"),
            lambda w: w.T.reshape(d, h, hd))
        add(a + "k_proj.weight", (kv * hd, d), la + ("k_proj", "w"),
            lambda w: w.T.reshape(d, kv, hd))
        add(a + "v_proj.weight", (kv * hd, d), la + ("v_proj", "w"),
            lambda w: w.T.reshape(d, kv, hd))
        add(a + "o_proj.weight", (d, h * hd), la + ("o_proj", "w"),
            lambda w: w.T.reshape(h, hd, d))
        if arch["qkv_bias"]:
            for p, n in (("q", h), ("k", kv), ("v", kv)):
                add(a + f"{p}_proj.bias", (n * hd,), la + (f"{p}_bias",))
        for p, shape in (("gate_proj", (f, d)), ("up_proj", (f, d)), ("down_proj", (d, f))):
            add(m + p + ".weight", shape, ("layers", i, "mlp", p, "kernel"), lambda w: w.T)
        for p in ("input_layernorm", "post_attention_layernorm"):
            add(f"model.layers.{i}.{p}.weight", (d,), ("layers", i, p, "w"))
    return out


def gguf_to_hf(name: str):
    """The Hugging Face name of a GGUF tensor name, or None for one this family lacks."""
    if name in _GLOBAL:
        return _GLOBAL[name]
    if name.startswith("blk."):
        i, _, rest = name[4:].partition(".")
        if i.isdigit() and rest in _BLOCK:
            return f"model.layers.{int(i)}.{_BLOCK[rest]}"
    return None


def gguf_flags(names) -> dict:
    """The flags a GGUF file states by its tensors: untied iff it has ``output.weight``,
    biased iff it has ``blk.0.attn_q.bias``."""
    return {"tied": "output.weight" not in names, "qkv_bias": "blk.0.attn_q.bias" in names}


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutation of a Llama q/k projection's rows, ``(n_head hd, ...)
    -> (n_head hd, ...)``: rotate-half pairs ``(i, i + hd/2)`` to interleaved ``(2i, 2i + 1)``,

    .. math:: P(w) = w.\\mathrm{reshape}(n, 2, hd/2, \\dots).\\mathrm{swapaxes}(1, 2)
              .\\mathrm{reshape}(w.\\mathrm{shape})."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of :func:`permute_qk`: GGUF rows back to the Hugging Face order."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _from_gguf_llama(hf: str, w, arch: dict):
    if hf.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
        return unpermute_qk(w, arch["n_heads"])
    if hf.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
        return unpermute_qk(w, arch["n_kv_heads"])
    return w


def _from_gguf_qwen2(hf: str, w, arch: dict):
    return w


# --- memory -------------------------------------------------------------------------------------

def activation_bytes(arch: dict, seq_len: int, response_len: int, dtype_bytes: int) -> int:
    r"""Bytes one sequence adds to the ghost-norm pass: per layer and position the inputs of
    the seven projections and the SwiGLU intermediates (about ``6 d + 4 f`` values), the
    attention probabilities and their gradient (``2 H T``); the response positions' logits and
    their softmax gradient add ``3 R V`` float32 values,

    .. math:: a = T L (6 d + 4 f + 2 H T)\,b + 12 R V."""
    t, r, b = int(seq_len), int(response_len), int(dtype_bytes)
    L, d, f, h, v = (int(arch[k]) for k in ("n_layers", "d_model", "d_ff", "n_heads",
                                              "vocab_size"))
    return int(t * L * (6 * d + 4 * f + 2 * h * t) * b + 12 * r * v)


# --- the pure-JAX forward -----------------------------------------------------------------------

def positions_mask(tokens):
    """Rotary positions (N, T) and attention mask (N, T, T) for prompts left-padded with ``-1``.

    Valid keys: every entry that is a token id (``>= 0``: padding is the marker, never a token
    value, so a prompt token equal to the pad or EOS id is attended to); position of token t =
    (number of valid tokens before t), so left padding shifts nothing; causal; the diagonal is
    always kept (a padding query then attends to itself only, never to an empty set).
    """
    n, t = tokens.shape
    idx = jnp.arange(t)
    valid = tokens >= 0
    pos = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0).astype(jnp.int32)
    causal = idx[None, :] <= idx[:, None]
    mask = causal[None] & (valid[:, None, :] | (idx[None, :] == idx[:, None])[None])
    return pos, mask


def _rms_hat(x, eps):
    """``x / sqrt(mean(x^2) + eps)`` over the last axis (RMSNorm before its weight)."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def _rope(x, pos, theta):
    """Rotary embedding on rotate-half pairs (i, i + hd/2); x (N, T, heads, hd), pos (N, T)."""
    hd = x.shape[-1]
    inv = 1.0 / theta ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd)
    ang = pos[..., None].astype(jnp.float32) * inv
    sin, cos = jnp.sin(ang)[:, :, None, :], jnp.cos(ang)[:, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def _attention(q, k, v, mask):
    """Grouped-query attention: query head j reads key/value head ``j // (h // kv)``."""
    n, t, h, hd = q.shape
    kv = k.shape[2]
    q = q.reshape(n, t, kv, h // kv, hd)
    s = jnp.einsum("ntkgd,nskd->nkgts", q, k) * (hd ** -0.5)
    s = jnp.where(mask[:, None, None], s, jnp.finfo(s.dtype).min)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("nkgts,nskd->ntkgd", p, v).reshape(n, t, h, hd)


def frozen_lookup(x, tokens, row):
    """The looked-up embeddings ``x`` (N, T, d) with no gradient at the positions where
    ``tokens == row`` (transformers' ``padding_idx``); ``x`` itself when ``row`` is None.

    The values are unchanged; every cotangent reaching those positions stops there, so the
    lookup adds nothing to the gradient of row ``row`` (nor to anything that feeds ``x``
    there, such as the ghost-norm taps)."""
    if row is None:
        return x
    return jnp.where((tokens == row)[..., None], jax.lax.stop_gradient(x), x)


def forward(a: dict, params, tokens, ops, rows=None):
    """Logits (N, T', V) at positions ``rows`` (default all) of left-padded ``tokens``, tunix's
    Qwen2 computation over the operations ``ops`` (paths name tunix's parameter dict)."""
    pos, mask = positions_mask(tokens)
    ids = jnp.maximum(tokens, 0)
    emb = params["embedder"]["input_embedding"]
    x = frozen_lookup(ops.embed(emb, ids), tokens, a["frozen_row"])
    n, t, d = x.shape
    h, kv, hd, eps = a["n_heads"], a["n_kv_heads"], a["head_dim"], a["norm_eps"]
    for i in range(a["n_layers"]):
        lay = params["layers"][i]
        at, pth = lay["attn"], ("layers", i, "attn")
        z = ops.scale(_rms_hat(x, eps), lay["input_layernorm"]["w"],
                      ("layers", i, "input_layernorm", "w"))
        proj = {}
        for name, heads in (("q", h), ("k", kv), ("v", kv)):
            w = at[f"{name}_proj"]["w"]
            y = ops.lin(z, w.reshape(d, heads * hd), pth + (f"{name}_proj", "w"))
            if a["qkv_bias"]:
                y = ops.bias(y, at[f"{name}_bias"].reshape(heads * hd), pth + (f"{name}_bias",))
            proj[name] = y.reshape(n, t, heads, hd)
        o = _attention(_rope(proj["q"], pos, a["rope_theta"]),
                       _rope(proj["k"], pos, a["rope_theta"]), proj["v"], mask)
        x = x + ops.lin(o.reshape(n, t, h * hd), at["o_proj"]["w"].reshape(h * hd, d),
                        pth + ("o_proj", "w"))
        z = ops.scale(_rms_hat(x, eps), lay["post_attention_layernorm"]["w"],
                      ("layers", i, "post_attention_layernorm", "w"))
        mp = lay["mlp"]
        gate = ops.lin(z, mp["gate_proj"]["kernel"], ("layers", i, "mlp", "gate_proj", "kernel"))
        up = ops.lin(z, mp["up_proj"]["kernel"], ("layers", i, "mlp", "up_proj", "kernel"))
        x = x + ops.lin(jax.nn.silu(gate) * up, mp["down_proj"]["kernel"],
                        ("layers", i, "mlp", "down_proj", "kernel"))
    z = ops.scale(_rms_hat(x, eps), params["final_norm"]["w"], ("final_norm", "w"))
    if rows is not None:
        z = z[:, rows]
    if a["tied"]:
        return ops.tied_head(z, emb, ids)
    return ops.lin(z, params["lm_head"]["w"], ("lm_head", "w"))


# --- tunix's module -----------------------------------------------------------------------------

def _split_zero_biases(abstract: dict, qkv_bias: bool):
    """tunix's abstract parameter dict without the q/k/v bias leaves when the checkpoint has
    none, and the ((path, shape), ...) of the leaves taken out."""
    if qkv_bias:
        return abstract, ()
    taken = []
    layers = {}
    for i, layer in abstract["layers"].items():
        attn = dict(layer["attn"])
        for b in ("q_bias", "k_bias", "v_bias"):
            taken.append((("layers", i, "attn", b), tuple(attn.pop(b).shape)))
        layers[i] = dict(layer, attn=attn)
    return dict(abstract, layers=layers), tuple(taken)


def tunix_model(arch: dict, dtype):
    """(graphdef, abstract parameter dict without absent biases, zero-bias paths) of tunix's
    Qwen2 module for ``arch``."""
    with quiet_tunix():
        qm = need_extra("tunix.models.qwen2.model", "loading Hugging Face checkpoints")
        nnx = need_extra("flax.nnx", "loading Hugging Face checkpoints")
    mcfg = qm.ModelConfig(
        num_layers=arch["n_layers"], vocab_size=arch["vocab_size"], embed_dim=arch["d_model"],
        hidden_dim=arch["d_ff"], num_heads=arch["n_heads"], head_dim=arch["head_dim"],
        num_kv_heads=arch["n_kv_heads"], rope_theta=arch["rope_theta"],
        norm_eps=arch["norm_eps"], use_tied_embedding=arch["tied"], dtype=dtype,
        param_dtype=dtype)
    with quiet_tunix():
        graphdef, abstract = nnx.split(nnx.eval_shape(lambda: qm.Qwen2(mcfg,
                                                                       rngs=nnx.Rngs(0))))
    abstract, zero = _split_zero_biases(nnx.to_pure_dict(abstract), arch["qkv_bias"])
    return graphdef, abstract, zero


def _spec(name: str, always_bias: bool, from_gguf) -> ModelSpec:
    return ModelSpec(
        name=name, model_types=(name,), gguf_architectures=(name,), config_fields=CONFIG_FIELDS,
        arch_key_fields=_KEY_FIELDS,
        check_config=lambda c, source: check_config(c, source, always_bias),
        tensors=tensors, gguf_flags=gguf_flags, gguf_to_hf=gguf_to_hf, from_gguf=from_gguf,
        activation_bytes=activation_bytes, forward=forward, tunix_model=tunix_model)


#: Qwen2 / Qwen2.5: q/k/v biases always, GGUF rows as in the checkpoint
QWEN2 = _spec("qwen2", True, _from_gguf_qwen2)
#: Llama (2, 3, SmolLM2): q/k/v biases iff ``attention_bias``, GGUF q/k rows permuted
LLAMA = _spec("llama", False, _from_gguf_llama)
