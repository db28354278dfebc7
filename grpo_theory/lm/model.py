r"""A small decoder-only transformer in plain JAX, with KV-cache sampling.

``apply(params, tokens, prompt_len)`` returns next-token logits ``(N, T, V)`` for sequences whose
first ``prompt_len`` tokens are the (left-padded) prompt. Positions are counted *relative to the
response start* (embedding index ``t - prompt_len + MAX_PROMPT``), so zero-shot and in-context
prompts of different padded lengths share one model. PAD keys are masked out of attention.

``sample(params, cfg, key, prompts, response_len, temperature)`` draws responses autoregressively
from ``softmax(logits / temperature)`` with a per-layer key/value cache (one prefill pass over the
prompt, then one position per step under ``lax.scan``); tokens after the first EOS are PAD, and
PAD is never generated (its logit is fixed at -1e9).

Precision (``ModelConfig.dtype``): parameters are always float32 (the master copy that the
optimiser updates, so an Adam step is float32 whatever the compute dtype). With
``dtype="float32"`` (default) every operation is float32. With ``dtype="bfloat16"`` the matrix
products (q/k/v, attention scores, attention-weighted values, output projection, MLP, logits
head) take bfloat16 operands, rounded from the float32 values, and accumulate in float32
(``preferred_element_type``, the tensor-core contract on GPUs); embeddings, the residual stream,
layer norms, the attention softmax and the returned logits stay float32, and the policy's
log-softmax (:func:`grpo_theory.lm.policy.token_log_probs`) is float32. Gradients flow back
through the casts to the float32 parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .task import EOS, ICL_PROMPT_LEN, PAD, RESPONSE_LEN, VOCAB_SIZE


F32 = jnp.float32
#: compute dtypes of :class:`ModelConfig` (the dtype of the matrix products' operands)
COMPUTE_DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class ModelConfig:
    """The small transformer's shape: width, depth, heads, vocabulary, prompt and response
    lengths, and the matrix products' operand dtype."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = VOCAB_SIZE
    max_prompt: int = ICL_PROMPT_LEN
    max_response: int = max(RESPONSE_LEN.values())
    #: operand dtype of the matrix products, ``"float32"`` or ``"bfloat16"`` (module docstring);
    #: parameters, accumulation, layer norms, softmax and logits are float32 either way
    dtype: str = "float32"

    def __post_init__(self):
        try:
            name = jnp.dtype(self.dtype).name
        except TypeError:
            name = None
        if name not in COMPUTE_DTYPES:
            raise ValueError(f"dtype must be one of {list(COMPUTE_DTYPES)}, got {self.dtype!r}")
        object.__setattr__(self, "dtype", name)
        for name in ("d_model", "n_layers", "n_heads", "max_prompt", "max_response"):
            object.__setattr__(self, name, V.positive_int(name, getattr(self, name)))
        object.__setattr__(self, "vocab_size",
                           V.integer("vocab_size", self.vocab_size, max(PAD, EOS) + 1))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got {self.d_model}/{self.n_heads}")


def init_params(key, cfg: ModelConfig) -> dict:
    """Random initial parameters (scaled normal; residual outputs scaled by 1/sqrt(2 L)).

    Args:
        key: a JAX PRNG key or an integer seed.
        cfg: a :class:`ModelConfig`.

    Returns:
        The parameter pytree (float32).
    """
    key = V.key_or_seed(key)
    _config(cfg)
    d, L = cfg.d_model, cfg.n_layers
    keys = jax.random.split(key, 3 + 4 * L)
    nrm = lambda k, shape, s: (s * jax.random.normal(k, shape)).astype(F32)
    p = {
        "tok": nrm(keys[0], (cfg.vocab_size, d), 0.1),
        "pos": nrm(keys[1], (cfg.max_prompt + cfg.max_response, d), 0.1),
        "out": nrm(keys[2], (d, cfg.vocab_size), 1.0 / np.sqrt(d)),
        "ln_f": {"g": jnp.ones(d, F32), "b": jnp.zeros(d, F32)},
        "blocks": [],
    }
    res = 1.0 / np.sqrt(2 * L)
    for i in range(L):
        k = keys[3 + 4 * i: 7 + 4 * i]
        p["blocks"].append({
            "ln1": {"g": jnp.ones(d, F32), "b": jnp.zeros(d, F32)},
            "qkv": nrm(k[0], (d, 3 * d), 1.0 / np.sqrt(d)),
            "o": nrm(k[1], (d, d), res / np.sqrt(d)),
            "ln2": {"g": jnp.ones(d, F32), "b": jnp.zeros(d, F32)},
            "w1": nrm(k[2], (d, 4 * d), 1.0 / np.sqrt(d)),
            "b1": jnp.zeros(4 * d, F32),
            "w2": nrm(k[3], (4 * d, d), res / np.sqrt(4 * d)),
        })
    return p


def n_params(params) -> int:
    """The number of scalars in the parameter pytree ``params``."""
    return int(sum(np.prod(a.shape) for a in jax.tree_util.tree_leaves(params)))


def _mm(a, b, dtype, spec=None):
    """``a @ b`` (or ``einsum(spec, a, b)``); bfloat16 operands with float32 accumulation when
    ``dtype == "bfloat16"``, the plain float32 product otherwise."""
    if dtype == "float32":
        return a @ b if spec is None else jnp.einsum(spec, a, b)
    bf = jnp.bfloat16
    if spec is None:
        return jnp.matmul(a.astype(bf), b.astype(bf), preferred_element_type=F32)
    return jnp.einsum(spec, a.astype(bf), b.astype(bf), preferred_element_type=F32)


def _ln(p, x):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * p["g"] + p["b"]


def _heads(x, h):
    n, t, d = x.shape
    return x.reshape(n, t, h, d // h).transpose(0, 2, 1, 3)


def _attend(q, k, v, mask, dtype):
    """q (N,H,Tq,dh), k/v (N,H,Tk,dh), mask (N,1|H,Tq,Tk) boolean; softmax in float32."""
    s = _mm(q, k, dtype, "nhqd,nhkd->nhqk") / np.sqrt(q.shape[-1]).astype(np.float32)
    s = jnp.where(mask, s, jnp.asarray(-1e9, F32))
    w = jax.nn.softmax(s, axis=-1)
    o = _mm(w, v, dtype, "nhqk,nhkd->nhqd")
    n, h, t, dh = o.shape
    return o.transpose(0, 2, 1, 3).reshape(n, t, h * dh)


def _mlp(b, x, dtype):
    return _mm(jax.nn.gelu(_mm(x, b["w1"], dtype) + b["b1"]), b["w2"], dtype)


def _embed(params, tokens, positions):
    return params["tok"][tokens] + params["pos"][positions]


def _positions(t_len, prompt_len, max_prompt):
    return jnp.arange(t_len) - prompt_len + max_prompt


def _forward(params, cfg, tokens, prompt_len, return_kv=False, segment_ids=None,
             positions=None):
    n, t = tokens.shape
    pos = _positions(t, prompt_len, cfg.max_prompt) if positions is None else positions
    x = _embed(params, tokens, pos)
    idx = jnp.arange(t)
    valid = tokens != PAD
    mask = (idx[None, :] <= idx[:, None])[None, None] & (
        valid[:, None, None, :] | (idx[None, :] == idx[:, None])[None, None])
    if segment_ids is not None:  # packed rows: attend within one's own sequence only
        mask = mask & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
    kvs = []
    for b in params["blocks"]:
        h = _ln(b["ln1"], x)
        q, k, v = jnp.split(_mm(h, b["qkv"], cfg.dtype), 3, axis=-1)
        q, k, v = (_heads(a, cfg.n_heads) for a in (q, k, v))
        kvs.append((k, v))
        x = x + _mm(_attend(q, k, v, mask, cfg.dtype), b["o"], cfg.dtype)
        x = x + _mlp(b, _ln(b["ln2"], x), cfg.dtype)
    logits = _no_pad(_mm(_ln(params["ln_f"], x), params["out"], cfg.dtype))
    return (logits, kvs) if return_kv else logits


def _no_pad(logits):
    """PAD is never generated: its logit is -1e9 (so every sampled token is a real key)."""
    return logits.at[..., PAD].set(-1e9)


def _config(cfg):
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    return cfg


def _check_lengths(cfg, n_prompt, n_response):
    """Positions past the embedding table would be clamped silently by JAX indexing: refuse."""
    if n_prompt > cfg.max_prompt:
        raise ValueError(f"prompts have {n_prompt} tokens, more than cfg.max_prompt = "
                         f"{cfg.max_prompt}")
    if n_response > cfg.max_response:
        raise ValueError(f"responses have {n_response} tokens, more than cfg.max_response = "
                         f"{cfg.max_response}")


def apply(params, tokens, prompt_len: int, cfg: ModelConfig, segment_ids=None,
          positions=None):
    """Next-token logits (N, T, V) for token array ``tokens`` (N, T); float32 (matrix products
    in ``cfg.dtype``, module docstring).

    Packed rows (several sequences per row, :mod:`grpo_theory.companions.packing`): give
    ``positions`` (N, T), each token's embedding index (for a sequence laid out as in the
    unpacked model, ``offset - prompt tokens + cfg.max_prompt``), and ``segment_ids`` (N, T),
    so that a token attends only to earlier tokens of its own segment; ``prompt_len`` is then
    ignored. With both None (default) the result is the unpacked model's.

    Args:
        params: from :func:`init_params`.
        tokens: (N, T) integer ids in ``[0, cfg.vocab_size)`` (range checked when concrete).
        prompt_len: 1 <= prompt_len <= min(T, cfg.max_prompt); T - prompt_len <= max_response.
        cfg: the :class:`ModelConfig`.
        segment_ids: None or (N, T) integers (equal ids = one sequence).
        positions: None or (N, T) integers in ``[0, max_prompt + max_response)``.

    Returns:
        (N, T, vocab_size) float32 logits.
    """
    _config(cfg)
    tokens = V.token_array("tokens", tokens, 2, cfg.vocab_size)
    if positions is not None or segment_ids is not None:
        if positions is None or segment_ids is None:
            raise ValueError("segment_ids and positions must be given together")
        positions, segment_ids = jnp.asarray(positions), jnp.asarray(segment_ids)
        for name, a in (("positions", positions), ("segment_ids", segment_ids)):
            if a.shape != tokens.shape:
                raise ValueError(f"{name} must have the tokens' shape {tokens.shape}, "
                                 f"got {a.shape}")
        if V.is_concrete(positions) and (
                int(positions.min()) < 0
                or int(positions.max()) >= cfg.max_prompt + cfg.max_response):
            raise ValueError(f"positions must lie in [0, {cfg.max_prompt + cfg.max_response}),"
                             f" got [{int(positions.min())}, {int(positions.max())}]")
        return _forward(params, cfg, jnp.asarray(tokens), 0, segment_ids=segment_ids,
                        positions=positions)
    if V.is_concrete(prompt_len):
        t = tokens.shape[1]
        prompt_len = V.integer("prompt_len", prompt_len, 1, t)
        _check_lengths(cfg, prompt_len, t - prompt_len)
    return _forward(params, cfg, jnp.asarray(tokens), prompt_len)


@lru_cache(maxsize=None)
def make_apply(cfg: ModelConfig):
    """``apply_fn(params, tokens, prompt_len)`` for this configuration (the policy interface)."""
    return partial(apply, cfg=cfg)


@lru_cache(maxsize=None)
def make_sampler(cfg: ModelConfig):
    """``sample_fn(params, key, prompts, response_len, temperature)`` with the KV cache."""
    return lambda params, key, prompts, response_len, temperature=1.0: sample(
        params, cfg, key, prompts, response_len, temperature)


def sample(params, cfg: ModelConfig, key, prompts, response_len: int, temperature=1.0):
    """Responses (N, R) sampled with temperature; PAD after the first EOS. KV-cached.

    Args:
        params, cfg: the model.
        key: a JAX PRNG key or an integer seed.
        prompts: (N, P) integer ids, P <= cfg.max_prompt.
        response_len: 1 <= R <= cfg.max_response.
        temperature: > 0.

    Returns:
        (N, R) int32 token ids.
    """
    _config(cfg)
    key = V.key_or_seed(key)
    prompts = V.token_array("prompts", prompts, 2, cfg.vocab_size)
    response_len = V.positive_int("response_len", response_len)
    _check_lengths(cfg, prompts.shape[1], response_len)
    if V.is_concrete(temperature):
        temperature = V.real_scalar("temperature", temperature, positive=True)
    return _sample(params, cfg, key, jnp.asarray(prompts), response_len, temperature)


@partial(jax.jit, static_argnames=("cfg", "response_len"))
def _sample(params, cfg: ModelConfig, key, prompts, response_len: int, temperature=1.0):
    prompts = jnp.asarray(prompts)
    n, p = prompts.shape
    total = p + response_len
    logits, kvs = _forward(params, cfg, prompts, p, return_kv=True)
    pad = lambda a: jnp.pad(a, ((0, 0), (0, 0), (0, response_len), (0, 0)))
    cache = [(pad(k), pad(v)) for k, v in kvs]
    valid = jnp.concatenate([prompts != PAD, jnp.ones((n, response_len), bool)], axis=1)
    keys = jax.random.split(key, response_len)
    inv_t = 1.0 / jnp.asarray(temperature, F32)

    def draw(k, lg):
        return jax.random.categorical(k, lg.astype(F32) * inv_t, axis=-1).astype(jnp.int32)

    first = draw(keys[0], logits[:, -1])
    positions = _positions(total, p, cfg.max_prompt)
    kidx = jnp.arange(total)

    def step(carry, inp):
        cache, tok, done = carry
        i, k = inp  # tok sits at absolute index p + i
        t_abs = p + i
        tok_in = jnp.where(done, PAD, tok)
        x = params["tok"][tok_in][:, None, :] + params["pos"][positions[t_abs]][None, None, :]
        mask = ((kidx <= t_abs)[None, :] & valid)[:, None, None, :]
        new_cache = []
        for b, (kc, vc) in zip(params["blocks"], cache):
            h = _ln(b["ln1"], x)
            q, kk, vv = (_heads(a, cfg.n_heads)
                         for a in jnp.split(_mm(h, b["qkv"], cfg.dtype), 3, axis=-1))
            kc = jax.lax.dynamic_update_slice_in_dim(kc, kk, t_abs, axis=2)
            vc = jax.lax.dynamic_update_slice_in_dim(vc, vv, t_abs, axis=2)
            new_cache.append((kc, vc))
            x = x + _mm(_attend(q, kc, vc, mask, cfg.dtype), b["o"], cfg.dtype)
            x = x + _mlp(b, _ln(b["ln2"], x), cfg.dtype)
        lg = _no_pad(_mm(_ln(params["ln_f"], x), params["out"], cfg.dtype))[:, 0]
        nxt = draw(k, lg)
        out_tok = jnp.where(done, PAD, tok)
        done = done | (tok == EOS)
        return (new_cache, nxt, done), out_tok

    init = (cache, first, jnp.zeros(n, bool))
    step_keys = jnp.concatenate([keys[1:], keys[:1]])  # token i+1 uses keys[i+1], as generic
    _, toks = jax.lax.scan(step, init, (jnp.arange(response_len), step_keys))
    return toks.T
