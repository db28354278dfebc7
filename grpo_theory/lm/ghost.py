r"""Per-sample score statistics without per-sample gradients ("ghost norms").

The Hugging Face route (:mod:`grpo_theory.lm.hf`) needs, for N responses, the squared score norms
``||s_n||^2`` and weighted sums ``W S`` (K, D) of the scores ``s_n = grad_theta log pi(y_n|x_n)``.
Materialising ``S`` costs C x D floats per chunk of C samples. This module computes both from one
forward and one backward pass of ``sum_n log pi(y_n|x_n)`` over the batch, at the memory of an
ordinary backward pass plus the (K, D) result, as in the differential-privacy literature
(Li et al. 2021, "Large language models can be strong differentially private learners";
Bu et al., book-keeping).

A linear map ``y = x W`` applied at T positions of sample n, with inputs ``a`` (T, d_in) and output
gradients ``b`` (T, d_out) of that sample, contributes ``G_n = a^T b`` to the sample's gradient of
``W``, and

.. math:: \|a^\top b\|_F^2 = \langle a a^\top,\, b b^\top\rangle_F
          = \sum_{t,t'} (a_t\cdot a_{t'})(b_t\cdot b_{t'}),

O(T^2 (d_in + d_out)) without the d_in x d_out matrix (the "gram" route); when
``T (d_in + d_out) > d_in d_out`` the matrix itself is cheaper (the "direct" route). The
weighted sums are ``sum_n W_kn G_n = a^T diag(W_k) b`` over all (n, t) at once. Every linear map of the forward
below is a ``jax.custom_vjp`` whose backward rule emits these two quantities as the cotangents of
zero "statistic" inputs, so they are formed layer by layer as the backward pass reaches the layer
and the output gradients are freed as in an ordinary backward pass. Other tensors are handled
exactly:

* RMSNorm weights ``y = xhat * w`` and q/k/v biases ``y = z + c``: the per-sample gradients
  ``sum_t xhat_t * b_t`` and ``sum_t b_t`` are small (N x d): formed.
* The embedding ``e_t = E[id_t]``: its gradient rows are grouped by token id, so
  ``||G_n||^2 = sum_{t,t'} [id_t = id_t'] b_t . b_t'`` (b: gradients of the embedding outputs).
* A tied head ``logits = h E^T``: the head's and the embedding's gradients of ``E`` add, so
  ``||G^emb + G^head||^2`` has the cross term ``2 <G^emb, G^head> = 2 sum_{t,t'} g_{t', id_t}
  (b_t . h_{t'})`` with g the logits' gradients and h the head's inputs.

The forward is a pure-JAX implementation of tunix's Qwen2 module (the architecture of
:func:`grpo_theory.lm.hf.from_pretrained`: RMSNorm, rotary embeddings on rotate-half pairs,
grouped-query attention with optional q/k/v biases, SwiGLU MLP, tied or untied head) over the
same parameter dict, with prompts left-padded by ``-1`` (:func:`positions_mask`). Only the
response positions' logits are formed (the others never enter ``log pi(y|x)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .policy import _acc_dtype, pad_to_chunk, response_mask

__all__ = ["PureForward", "positions_mask", "forward", "ghost_contractions", "ROUTES"]

#: how a linear layer's per-sample squared norm is formed: "auto" (the cheaper of the two),
#: "gram" (<a a^T, b b^T>) or "direct" (||a^T b||^2)
ROUTES = ("auto", "gram", "direct")


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


# ---------------------------------------------------------------------------------------------
# the architecture, written once over a set of "ops" (plain, or with statistics in the backward)
def _arch_key(arch: dict) -> tuple:
    """The static fields of the architecture the forward reads, as a hashable tuple."""
    return tuple((k, arch[k]) for k in ("n_layers", "d_model", "n_heads", "n_kv_heads",
                                        "head_dim", "rope_theta", "norm_eps", "tied",
                                        "qkv_bias"))


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


def _forward(ak: tuple, params, tokens, ops, rows=None):
    """Logits (N, T', V) at positions ``rows`` (default all) of left-padded ``tokens``."""
    a = dict(ak)
    pos, mask = positions_mask(tokens)
    ids = jnp.maximum(tokens, 0)
    emb = params["embedder"]["input_embedding"]
    x = ops.embed(emb, ids)
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


class _Plain:
    """The forward's operations without statistics."""

    @staticmethod
    def embed(emb, ids):
        return jnp.take(emb, ids, axis=0)

    @staticmethod
    def lin(x, w, path):
        return jnp.einsum("nti,io->nto", x, w)

    @staticmethod
    def scale(xhat, w, path):
        return xhat * w

    @staticmethod
    def bias(y, c, path):
        return y + c

    @staticmethod
    def tied_head(z, emb, ids):
        return jnp.einsum("ntd,vd->ntv", z, emb)


def forward(arch: dict, params, tokens):
    """Next-token logits (N, T, V) of tunix's Qwen2 computation in pure JAX.

    Args:
        arch: the checked architecture (:func:`grpo_theory.lm.hf.read_config`).
        params: tunix's Qwen2 parameter dict as :func:`~grpo_theory.lm.hf.from_pretrained`
            loads it (``policy.params``).
        tokens: (N, T) ids, prompts left-padded with ``-1``.

    Returns:
        (N, T, V) logits in the parameters' dtype.
    """
    return _forward(_arch_key(arch), params, jnp.asarray(tokens), _Plain)


@dataclass(frozen=True)
class PureForward:
    """``apply_fn(params, tokens, prompt_len) -> logits`` of :func:`forward` (hashable: a
    static argument of the package's jitted routines)."""

    arch: tuple

    @classmethod
    def of(cls, arch: dict) -> "PureForward":
        return cls(_arch_key(arch))

    def __call__(self, params, tokens, prompt_len):
        return _forward(self.arch, params, jnp.asarray(tokens), _Plain)


# ---------------------------------------------------------------------------------------------
# operations whose backward rules emit the statistics
def _sq_linear(x, b, route, acc):
    """(N,) ``||x_n^T b_n||_F^2`` for x (N, T, i), b (N, T, o), by ``route``."""
    t, di, do = x.shape[1], x.shape[2], b.shape[2]
    if route == "auto":
        route = "gram" if t * (di + do) <= di * do else "direct"
    x, b = x.astype(acc), b.astype(acc)
    if route == "gram":
        ga = jnp.einsum("nti,nsi->nts", x, x)
        gb = jnp.einsum("nto,nso->nts", b, b)
        return jnp.sum(ga * gb, axis=(1, 2))
    g = jnp.einsum("nti,nto->nio", x, b)
    return jnp.sum(g * g, axis=(1, 2))


def _ws_linear(wts, x, b, acc):
    """(K, i, o) ``sum_n W_kn x_n^T b_n``."""
    bw = jnp.einsum("kn,nto->knto", wts, b.astype(acc))
    return jnp.einsum("nti,knto->kio", x.astype(acc), bw)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_lin(flags, x, w, ws0, sq0, wts):
    return jnp.einsum("nti,io->nto", x, w)


def _g_lin_fwd(flags, x, w, ws0, sq0, wts):
    return jnp.einsum("nti,io->nto", x, w), (x, w, wts)


def _g_lin_bwd(flags, res, b):
    route, need_ws = flags
    x, w, wts = res
    acc = wts.dtype
    dx = jnp.einsum("nto,io->nti", b, w)
    ws = _ws_linear(wts, x, b, acc) if need_ws else None
    return dx, jnp.zeros_like(w), ws, _sq_linear(x, b, route, acc), jnp.zeros_like(wts)


_g_lin.defvjp(_g_lin_fwd, _g_lin_bwd)


def _small_stats(pg, wts, need_ws):
    """(ws (K, ...), sq (N,)) of formed per-sample gradients pg (N, ...)."""
    pg = pg.astype(wts.dtype)
    sq = jnp.sum(pg.reshape(pg.shape[0], -1) ** 2, axis=1)
    ws = jnp.tensordot(wts, pg, axes=1) if need_ws else None
    return ws, sq


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_scale(need_ws, xhat, w, ws0, sq0, wts):
    return xhat * w


def _g_scale_fwd(need_ws, xhat, w, ws0, sq0, wts):
    return xhat * w, (xhat, w, wts)


def _g_scale_bwd(need_ws, res, b):
    xhat, w, wts = res
    ws, sq = _small_stats(jnp.sum(xhat * b, axis=1), wts, need_ws)
    return b * w, jnp.zeros_like(w), ws, sq, jnp.zeros_like(wts)


_g_scale.defvjp(_g_scale_fwd, _g_scale_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_bias(need_ws, y, c, ws0, sq0, wts):
    return y + c


def _g_bias_fwd(need_ws, y, c, ws0, sq0, wts):
    return y + c, (c, wts)


def _g_bias_bwd(need_ws, res, b):
    c, wts = res
    ws, sq = _small_stats(jnp.sum(b, axis=1), wts, need_ws)
    return b, jnp.zeros_like(c), ws, sq, jnp.zeros_like(wts)


_g_bias.defvjp(_g_bias_fwd, _g_bias_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_tied(flags, z, emb, ids, ws0, sq0, cross0, wts):
    return jnp.einsum("ntd,vd->ntv", z, emb)


def _g_tied_fwd(flags, z, emb, ids, ws0, sq0, cross0, wts):
    return jnp.einsum("ntd,vd->ntv", z, emb), (z, emb, ids, wts)


def _g_tied_bwd(flags, res, g):
    """Head part of the tied matrix; ``cross0`` receives ``r_{n,t} = G^head_n[id_t]`` (N, T, d)
    (the rows of the sample's head gradient at its own token ids), for the cross term."""
    route, need_ws = flags
    z, emb, ids, wts = res
    acc = wts.dtype
    dz = jnp.einsum("ntv,vd->ntd", g, emb)
    ws = jnp.swapaxes(_ws_linear(wts, z, g, acc), 1, 2) if need_ws else None
    m = jnp.take_along_axis(g, jnp.broadcast_to(ids[:, None, :], g.shape[:2] + ids.shape[1:]),
                            axis=2)  # (N, R, T): g[n, r, id_t]
    rows = jnp.einsum("nrt,nrd->ntd", m.astype(acc), z.astype(acc))
    return (dz, jnp.zeros_like(emb), None, ws, _sq_linear(z, g, route, acc), rows,
            jnp.zeros_like(wts))


_g_tied.defvjp(_g_tied_fwd, _g_tied_bwd)


def _leaf(tree, path):
    for k in path:
        tree = tree[k]
    return tree


class _Ghost:
    """The forward's operations with statistics: ``ws`` (params' structure, leading K axis, or
    None when no weighted sum is needed), ``sq`` (N,), the embedding tap (N, T, d) and the cross
    term's receiver (N, T, d) are zero inputs whose cotangents are the statistics."""

    def __init__(self, ws, sq, tap, cross, wts, route):
        self.ws, self.sq, self.tap, self.cross, self.wts = ws, sq, tap, cross, wts
        self.route, self.need_ws = route, ws is not None

    def _ws(self, path, shape):
        if self.ws is None:
            return None
        w = _leaf(self.ws, path)
        return w.reshape((w.shape[0],) + tuple(shape))

    def embed(self, emb, ids):
        return jnp.take(emb, ids, axis=0) + self.tap

    def lin(self, x, w, path):
        return _g_lin((self.route, self.need_ws), x, w, self._ws(path, w.shape), self.sq,
                      self.wts)

    def scale(self, xhat, w, path):
        return _g_scale(self.need_ws, xhat, w, self._ws(path, w.shape), self.sq, self.wts)

    def bias(self, y, c, path):
        return _g_bias(self.need_ws, y, c, self._ws(path, c.shape), self.sq, self.wts)

    def tied_head(self, z, emb, ids):
        return _g_tied((self.route, self.need_ws), z, emb, ids,
                       self._ws(("embedder", "input_embedding"), emb.shape), self.sq,
                       self.cross, self.wts)


def _block_stats(ak, params, prompts, responses, wts, temperature, eos, route, need_ws):
    """(ws tree or None, sq (C,)) of one block of C samples: one forward + one backward."""
    a = dict(ak)
    acc = wts.dtype
    tokens = jnp.concatenate([prompts, responses], axis=1)
    n, t = tokens.shape
    p = prompts.shape[1]
    d = params["embedder"]["input_embedding"].shape[1]
    dt = params["embedder"]["input_embedding"].dtype
    mask = response_mask(responses, eos)

    def total_log_prob(ws, sq, tap, cross):
        ops = _Ghost(ws, sq, tap, cross, wts, route)
        logits = _forward(ak, params, tokens, ops, rows=slice(p - 1, t - 1))
        logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32)) / temperature
        lp = jax.nn.log_softmax(logits, axis=-1)
        tok = jnp.take_along_axis(lp, responses[..., None], axis=-1)[..., 0]
        return jnp.sum(tok * mask)

    ws0 = (jax.tree_util.tree_map(lambda x: jnp.zeros((wts.shape[0],) + x.shape, acc), params)
           if need_ws else None)
    sq0 = jnp.zeros((n,), acc)
    tap0 = jnp.zeros((n, t, d), dt)
    cross0 = jnp.zeros((n, t, d), acc) if a["tied"] else None
    ws, sq, b, rows = jax.grad(total_log_prob, argnums=(0, 1, 2, 3))(ws0, sq0, tap0, cross0)
    # the embedding: gradient rows grouped by token id (padding slots carry b = 0 and no id)
    ids = jnp.where(tokens >= 0, tokens, -1)
    b = b.astype(acc) * (tokens >= 0)[..., None]
    same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, :, None] >= 0)
    sq = sq + jnp.sum(jnp.where(same, jnp.einsum("ntd,nsd->nts", b, b), 0.0), axis=(1, 2))
    if a["tied"]:
        sq = sq + 2.0 * jnp.sum(b * rows, axis=(1, 2))
    if need_ws:
        v = params["embedder"]["input_embedding"].shape[0]
        contrib = jnp.einsum("kn,ntd->kntd", wts, b).reshape(wts.shape[0], n * t, d)
        emb_ws = jnp.zeros((wts.shape[0], v, d), acc).at[:, jnp.maximum(ids, 0).reshape(-1)]\
            .add(contrib)
        ws = dict(ws, embedder=dict(ws["embedder"], input_embedding=ws["embedder"][
            "input_embedding"] + emb_ws))
    return ws, sq


@partial(jax.jit, static_argnames=("ak", "chunk", "eos", "route", "need_ws"))
def _ghost_jit(ak, params, prompts, responses, weights, temperature, chunk, eos, route,
               need_ws):
    n = prompts.shape[0]
    nc = n // chunk
    if nc == 1:
        return _block_stats(ak, params, prompts, responses, weights, temperature, eos, route,
                            need_ws)
    xs = prompts.reshape(nc, chunk, -1)
    ys = responses.reshape(nc, chunk, -1)
    wb = weights.reshape(weights.shape[0], nc, chunk).transpose(1, 0, 2)

    def body(acc, inp):
        x, y, w = inp
        ws, sq = _block_stats(ak, params, x, y, w, temperature, eos, route, need_ws)
        return (jax.tree_util.tree_map(jnp.add, acc, ws) if need_ws else acc), sq

    acc0 = (jax.tree_util.tree_map(lambda x: jnp.zeros((weights.shape[0],) + x.shape,
                                                       weights.dtype), params)
            if need_ws else None)
    acc, sq = jax.lax.scan(body, acc0, (xs, ys, wb))
    return acc, sq.reshape(-1)


def ghost_contractions(arch: dict, params, prompts, responses, weights, temperature=1.0,
                       chunk: int = 256, eos=(0,), route: str = "auto"):
    """``(W @ S, ||s_n||^2)`` by ghost norms (no per-sample gradient is formed).

    ``S`` (N, D) are the scores ``s_n = grad_theta log pi(y_n|x_n)`` of tunix's Qwen2 computation
    (:func:`forward`), D ordered as ``jax.flatten_util.ravel_pytree(params)``.

    Args:
        arch: the checked architecture (:func:`grpo_theory.lm.hf.read_config`).
        params: tunix's Qwen2 parameter dict (``policy.params``).
        prompts: (N, P) ids left-padded with ``-1``; responses: (N, R) ids (checked by the
            caller: :meth:`grpo_theory.lm.hf.HFPolicy.score_contractions`).
        weights: (K, N) finite real weights.
        temperature: > 0.
        chunk: samples per block (one forward + backward each, scanned; the activations of one
            block are live at a time).
        eos: tuple of end-of-sequence ids.
        route: per-layer squared-norm route, one of :data:`ROUTES`.

    Returns:
        ``(acc, sq)``: (K, D) ``W S`` and (N,) squared norms, NumPy float64; sums over samples
        and tokens are accumulated in float64 when JAX's 64-bit mode is on, else float32. An
        all-zero ``weights`` skips the weighted sums (zeros returned).
    """
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}, got {route!r}")
    prompts, responses = np.asarray(prompts), np.asarray(responses)
    weights = np.asarray(weights, np.float64)
    n = prompts.shape[0]
    prompts, responses, weights, chunk = pad_to_chunk(prompts, responses, weights, chunk)
    need_ws = bool(np.any(weights != 0))
    acc = _acc_dtype()
    ws, sq = _ghost_jit(_arch_key(arch), params, jnp.asarray(prompts, jnp.int32),
                        jnp.asarray(responses, jnp.int32), jnp.asarray(weights, acc),
                        temperature, chunk, tuple(int(e) for e in eos), route, need_ws)
    sq = np.asarray(sq, np.float64)[:n]
    leaves = jax.tree_util.tree_leaves(params)
    out = np.zeros((weights.shape[0], sum(int(x.size) for x in leaves)), np.float64)
    if need_ws:
        off = 0
        for leaf in jax.tree_util.tree_leaves(ws):
            size = int(np.prod(leaf.shape[1:]))
            out[:, off:off + size] = np.asarray(leaf).reshape(leaf.shape[0], size)
            off += size
    return out, sq
