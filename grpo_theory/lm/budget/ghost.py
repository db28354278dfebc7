r"""Per-sample score statistics without per-sample gradients ("ghost norms").

The Hugging Face route (:mod:`grpo_theory.lm.checkpoints.hf`) needs, for N responses, the squared
score norms ``||s_n||^2`` and weighted sums ``W S`` (K, D) of the scores ``s_n = grad_theta log
pi(y_n|x_n)``. Materialising ``S`` costs C x D floats per chunk of C samples. This module computes
both from one forward and one backward pass of ``sum_n log pi(y_n|x_n)`` over the batch, at the
memory of an ordinary backward pass plus the (K, D) result, as in the differential-privacy
literature (Li et al. 2021, "Large language models can be strong differentially private learners";
Bu et al., book-keeping).

A linear map ``y = x W`` applied at T positions of sample n, with inputs ``a`` (T, d_in) and output
gradients ``b`` (T, d_out) of that sample, contributes ``G_n = a^T b`` to the sample's gradient of
``W``, and

.. math:: \|a^\top b\|_F^2 = \langle a a^\top,\, b b^\top\rangle_F
          = \sum_{t,t'} (a_t\cdot a_{t'})(b_t\cdot b_{t'}),

O(T^2 (d_in + d_out)) without the d_in x d_out matrix (the "gram" route), or the matrix itself
(the "direct" route); ``route="auto"`` takes the one with fewer multiply-adds by the rule both
backends share (:func:`grpo_theory.lm.budget.ghost_rule.ghost_route`, also for the embedding). The
weighted sums are ``sum_n W_kn G_n = a^T diag(W_k) b`` over all (n, t) at once. Every linear map of the forward
below is a ``jax.custom_vjp`` whose backward rule emits these two quantities as the cotangents of
zero "statistic" inputs, so they are formed layer by layer as the backward pass reaches the layer
and the output gradients are freed as in an ordinary backward pass. Other tensors are handled
exactly:

* RMSNorm weights ``y = xhat * w`` and q/k/v biases ``y = z + c``: the per-sample gradients
  ``sum_t xhat_t * b_t`` and ``sum_t b_t`` are small (N x d): formed.
* The embedding ``e_t = E[id_t]``: its gradient rows are grouped by token id, so
  ``||G_n||^2 = sum_{t,t'} [id_t = id_t'] b_t . b_t'`` (b: gradients of the embedding outputs;
  the gram route of one-hot inputs), or ``G_n`` scattered into its (V, d) rows (direct).
* A tied head ``logits = h E^T``: the head's and the embedding's gradients of ``E`` add, so
  ``||G^emb + G^head||^2`` has the cross term ``2 <G^emb, G^head> = 2 sum_{t,t'} g_{t', id_t}
  (b_t . h_{t'})`` with g the logits' gradients and h the head's inputs.

The forward is the model family's pure-JAX forward (its spec's
:attr:`~grpo_theory.lm.families.spec.ModelSpec.forward`, :mod:`grpo_theory.lm.families`; for Qwen2 /
Llama :func:`grpo_theory.lm.families.qwen2.forward`, tunix's Qwen2 computation) over the
parameter dict :func:`grpo_theory.lm.checkpoints.load.from_pretrained` loads, with prompts
left-padded by ``-1`` (:func:`positions_mask`). Only the response positions' logits are formed (the
others never enter ``log pi(y|x)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import families
from .ghost_rule import ROUTES, ghost_route
from ..task import response_mask
from .memory import acc_dtype, pad_to_chunk


# ---------------------------------------------------------------------------------------------
# the architecture: the family's forward (its spec) over a set of "ops" (plain, or with
# statistics in the backward)
def _arch_key(arch: dict) -> tuple:
    """The static fields of the architecture the family's forward reads, as a hashable tuple."""
    return families.family(arch["model_type"]).arch_key(arch)


def _forward(ak: tuple, params, tokens, ops, rows=None):
    """Logits (N, T', V) at positions ``rows`` (default all) of left-padded ``tokens``: the
    family's :attr:`~grpo_theory.lm.families.spec.ModelSpec.forward`."""
    a = dict(ak)
    return families.family(a["model_type"]).forward(a, params, tokens, ops, rows)


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
    """Next-token logits (N, T, V) of the family's pure-JAX forward (tunix's computation).

    Args:
        arch: the checked architecture (:func:`grpo_theory.lm.checkpoints.files.read_config`).
        params: tunix's Qwen2 parameter dict as
            :func:`~grpo_theory.lm.checkpoints.load.from_pretrained` loads it (``policy.params``).
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
def layer_route(route: str, positions: int, d_in: int, d_out: int, one_hot: bool = False,
                acc=jnp.float32) -> str:
    """The route of one layer: ``route`` itself, or for ``"auto"`` the shared rule
    :func:`grpo_theory.lm.budget.ghost_rule.ghost_route` at these shapes (values of ``acc``)."""
    if route != "auto":
        return route
    return ghost_route(int(positions), int(d_in), int(d_out), one_hot=one_hot,
                       dtype_bytes=jnp.dtype(acc).itemsize)


def _sq_linear(x, b, route, acc):
    """(N,) ``||x_n^T b_n||_F^2`` for x (N, T, i), b (N, T, o), by ``route``."""
    route = layer_route(route, x.shape[1], x.shape[2], b.shape[2], acc=acc)
    x, b = x.astype(acc), b.astype(acc)
    if route == "gram":
        ga = jnp.einsum("nti,nsi->nts", x, x)
        gb = jnp.einsum("nto,nso->nts", b, b)
        return jnp.sum(ga * gb, axis=(1, 2))
    g = jnp.einsum("nti,nto->nio", x, b)
    return jnp.sum(g * g, axis=(1, 2))


def _ws_linear(wts, x, b, acc):
    """(K, i, o) ``sum_n W_kn x_n^T b_n``: per weight row one contraction over (n, t), the
    narrower of ``x`` and ``b`` scaled by the row (no (K, N, T, o) intermediate)."""
    x, b = x.astype(acc), b.astype(acc)
    if x.shape[-1] <= b.shape[-1]:
        return jnp.stack([jnp.einsum("nti,nto->io", x * w[:, None, None], b) for w in wts])
    return jnp.stack([jnp.einsum("nti,nto->io", x, b * w[:, None, None]) for w in wts])


def _group(x, gs):
    """(N, T, ...) -> (N / gs, gs T, ...): the rows of each group of ``gs`` consecutive samples
    as one sequence."""
    return x.reshape((x.shape[0] // gs, gs * x.shape[1]) + x.shape[2:])


def _gsq_linear(x, b, gw, gs, route, acc):
    """(N / gs,) ``||sum_{n in group} gw_n x_n^T b_n||_F^2`` (:func:`_sq_linear` of the groups
    as sequences of gs T positions, the output gradients weighted)."""
    return _sq_linear(_group(x, gs), _group(b * gw[:, None, None].astype(b.dtype), gs), route,
                      acc)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_lin(flags, x, w, ws0, sq0, gsq0, wts, gw):
    return jnp.einsum("nti,io->nto", x, w)


def _g_lin_fwd(flags, x, w, ws0, sq0, gsq0, wts, gw):
    return jnp.einsum("nti,io->nto", x, w), (x, w, wts, gw)


def _g_lin_bwd(flags, res, b):
    route, need_ws, gs = flags
    x, w, wts, gw = res
    acc = wts.dtype
    dx = jnp.einsum("nto,io->nti", b, w)
    ws = _ws_linear(wts, x, b, acc) if need_ws else None
    gsq = _gsq_linear(x, b, gw, gs, route, acc) if gs else None
    return (dx, jnp.zeros_like(w), ws, _sq_linear(x, b, route, acc), gsq, jnp.zeros_like(wts),
            None if gw is None else jnp.zeros_like(gw))


_g_lin.defvjp(_g_lin_fwd, _g_lin_bwd)


def _small_stats(pg, wts, flags, gw):
    """(ws (K, ...), sq (N,), gsq (N / gs,)) of formed per-sample gradients pg (N, ...)."""
    need_ws, gs = flags
    pg = pg.astype(wts.dtype)
    flat = pg.reshape(pg.shape[0], -1)
    sq = jnp.sum(flat ** 2, axis=1)
    ws = jnp.tensordot(wts, pg, axes=1) if need_ws else None
    gsq = None
    if gs:
        g = (flat * gw[:, None].astype(flat.dtype)).reshape(flat.shape[0] // gs, gs, -1).sum(1)
        gsq = jnp.sum(g * g, axis=1)
    return ws, sq, gsq


def _zero_cots(wts, gw):
    return jnp.zeros_like(wts), None if gw is None else jnp.zeros_like(gw)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_scale(flags, xhat, w, ws0, sq0, gsq0, wts, gw):
    return xhat * w


def _g_scale_fwd(flags, xhat, w, ws0, sq0, gsq0, wts, gw):
    return xhat * w, (xhat, w, wts, gw)


def _g_scale_bwd(flags, res, b):
    xhat, w, wts, gw = res
    ws, sq, gsq = _small_stats(jnp.sum(xhat * b, axis=1), wts, flags, gw)
    return (b * w, jnp.zeros_like(w), ws, sq, gsq) + _zero_cots(wts, gw)


_g_scale.defvjp(_g_scale_fwd, _g_scale_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_bias(flags, y, c, ws0, sq0, gsq0, wts, gw):
    return y + c


def _g_bias_fwd(flags, y, c, ws0, sq0, gsq0, wts, gw):
    return y + c, (c, wts, gw)


def _g_bias_bwd(flags, res, b):
    c, wts, gw = res
    ws, sq, gsq = _small_stats(jnp.sum(b, axis=1), wts, flags, gw)
    return (b, jnp.zeros_like(c), ws, sq, gsq) + _zero_cots(wts, gw)


_g_bias.defvjp(_g_bias_fwd, _g_bias_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_tied(flags, z, emb, ids, ws0, sq0, gsq0, cross0, crossg0, wts, gw):
    return jnp.einsum("ntd,vd->ntv", z, emb)


def _g_tied_fwd(flags, z, emb, ids, ws0, sq0, gsq0, cross0, crossg0, wts, gw):
    return jnp.einsum("ntd,vd->ntv", z, emb), (z, emb, ids, wts, gw)


def _head_rows(g, z, ids, acc):
    """(N, T, d) ``r_{n,t} = sum_r g[n, r, id_t] z[n, r]``: the rows of sample n's head
    gradient at its own token ids."""
    m = jnp.take_along_axis(g, jnp.broadcast_to(ids[:, None, :], g.shape[:2] + ids.shape[1:]),
                            axis=2)  # (N, R, T): g[n, r, id_t]
    return jnp.einsum("nrt,nrd->ntd", m.astype(acc), z.astype(acc))


def _g_tied_bwd(flags, res, g):
    """Head part of the tied matrix; ``cross0`` receives ``r_{n,t} = G^head_n[id_t]`` (N, T, d)
    (:func:`_head_rows`, for the cross term) and ``crossg0`` the same of each group's weighted
    head gradient (N / gs, gs T, d)."""
    route, need_ws, gs = flags
    z, emb, ids, wts, gw = res
    acc = wts.dtype
    dz = jnp.einsum("ntv,vd->ntd", g, emb)
    ws = jnp.swapaxes(_ws_linear(wts, z, g, acc), 1, 2) if need_ws else None
    gsq = rows_g = None
    if gs:
        gwg = g * gw[:, None, None].astype(g.dtype)
        gsq = _gsq_linear(z, g, gw, gs, route, acc)
        rows_g = _head_rows(_group(gwg, gs), _group(z, gs), _group(ids, gs), acc)
    return ((dz, jnp.zeros_like(emb), None, ws, _sq_linear(z, g, route, acc), gsq,
             _head_rows(g, z, ids, acc), rows_g) + _zero_cots(wts, gw))


_g_tied.defvjp(_g_tied_fwd, _g_tied_bwd)


def _leaf(tree, path):
    for k in path:
        tree = tree[k]
    return tree


class _Ghost:
    """The forward's operations with statistics: ``ws`` (params' structure, leading K axis, or
    None when no weighted sum is needed), ``sq`` (N,), ``gsq`` (N / gs,) or None, the embedding
    tap (N, T, d) and the cross terms' receivers (N, T, d) and (N / gs, gs T, d) are zero inputs
    whose cotangents are the statistics; ``gw`` (N,) weights the group sums."""

    def __init__(self, ws, sq, gsq, tap, cross, crossg, wts, gw, route, gs):
        self.ws, self.sq, self.gsq, self.tap, self.wts, self.gw = ws, sq, gsq, tap, wts, gw
        self.cross, self.crossg = cross, crossg
        self.route, self.need_ws, self.gs = route, ws is not None, gs

    def _ws(self, path, shape):
        if self.ws is None:
            return None
        w = _leaf(self.ws, path)
        return w.reshape((w.shape[0],) + tuple(shape))

    def embed(self, emb, ids):
        return jnp.take(emb, ids, axis=0) + self.tap

    def lin(self, x, w, path):
        return _g_lin((self.route, self.need_ws, self.gs), x, w, self._ws(path, w.shape),
                      self.sq, self.gsq, self.wts, self.gw)

    def scale(self, xhat, w, path):
        return _g_scale((self.need_ws, self.gs), xhat, w, self._ws(path, w.shape), self.sq,
                        self.gsq, self.wts, self.gw)

    def bias(self, y, c, path):
        return _g_bias((self.need_ws, self.gs), y, c, self._ws(path, c.shape), self.sq,
                       self.gsq, self.wts, self.gw)

    def tied_head(self, z, emb, ids):
        return _g_tied((self.route, self.need_ws, self.gs), z, emb, ids,
                       self._ws(("embedder", "input_embedding"), emb.shape), self.sq, self.gsq,
                       self.cross, self.crossg, self.wts, self.gw)


def _embedding_sq(b, ids, rows, acc, route, vocab):
    """(N,) squared norm of the embedding's gradient (gram: rows of ``b`` grouped by token id,
    ``sum_{t,t'} [id_t = id_t'] b_t . b_t'``; direct: the (vocab, d) gradient scattered) plus,
    with a tied head's rows (the head gradient at the token ids, :func:`_head_rows`), twice the
    cross term; ``b`` is zero at padding (``ids`` -1)."""
    n, t, d = b.shape
    if layer_route(route, t, vocab, d, one_hot=True, acc=acc) == "gram":
        same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, :, None] >= 0)
        sq = jnp.sum(jnp.where(same, jnp.einsum("ntd,nsd->nts", b, b), 0.0), axis=(1, 2))
    else:
        g = jnp.zeros((n, vocab, d), acc).at[jnp.arange(n)[:, None], jnp.maximum(ids, 0)].add(
            b.astype(acc))
        sq = jnp.sum(g * g, axis=(1, 2))
    if rows is not None:
        sq = sq + 2.0 * jnp.sum(b * rows, axis=(1, 2))
    return sq


def _block_stats(ak, params, prompts, responses, wts, gw, temperature, eos, route, need_ws,
                 gs):
    """(ws tree or None, sq (C,), gsq (C / gs,) or None) of one block of C samples: one forward
    + one backward."""
    a = dict(ak)
    acc = wts.dtype
    tokens = jnp.concatenate([prompts, responses], axis=1)
    n, t = tokens.shape
    p = prompts.shape[1]
    d = params["embedder"]["input_embedding"].shape[1]
    dt = params["embedder"]["input_embedding"].dtype
    mask = response_mask(responses, eos)

    def total_log_prob(ws, sq, gsq, tap, cross, crossg):
        ops = _Ghost(ws, sq, gsq, tap, cross, crossg, wts, gw, route, gs)
        logits = _forward(ak, params, tokens, ops, rows=slice(p - 1, t - 1))
        logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32)) / temperature
        lp = jax.nn.log_softmax(logits, axis=-1)
        tok = jnp.take_along_axis(lp, responses[..., None], axis=-1)[..., 0]
        return jnp.sum(tok * mask)

    ws0 = (jax.tree_util.tree_map(lambda x: jnp.zeros((wts.shape[0],) + x.shape, acc), params)
           if need_ws else None)
    sq0 = jnp.zeros((n,), acc)
    gsq0 = jnp.zeros((n // gs,), acc) if gs else None
    tap0 = jnp.zeros((n, t, d), dt)
    cross0 = jnp.zeros((n, t, d), acc) if a["tied"] else None
    crossg0 = jnp.zeros((n // gs, gs * t, d), acc) if a["tied"] and gs else None
    ws, sq, gsq, b, rows, rows_g = jax.grad(total_log_prob, argnums=tuple(range(6)))(
        ws0, sq0, gsq0, tap0, cross0, crossg0)
    # the embedding: gradient rows grouped by token id (padding slots carry b = 0 and no id)
    ids = jnp.where(tokens >= 0, tokens, -1)
    b = b.astype(acc) * (tokens >= 0)[..., None]
    v = params["embedder"]["input_embedding"].shape[0]
    sq = sq + _embedding_sq(b, ids, rows, acc, route, v)
    if gs:
        bw = _group(b * gw[:, None, None].astype(acc), gs)
        gsq = gsq + _embedding_sq(bw, _group(ids, gs), rows_g, acc, route, v)
    if need_ws:
        emb_ws = jnp.stack([jnp.zeros((v, d), acc).at[jnp.maximum(ids, 0).reshape(-1)].add(
            (b * w[:, None, None]).reshape(n * t, d)) for w in wts])
        ws = dict(ws, embedder=dict(ws["embedder"], input_embedding=ws["embedder"][
            "input_embedding"] + emb_ws))
    return ws, sq, gsq


@partial(jax.jit, static_argnames=("ak", "chunk", "eos", "route", "need_ws", "gs"),
         donate_argnames=("acc0",))
def _ghost_jit(ak, params, prompts, responses, weights, gw, temperature, chunk, eos, route,
               need_ws, gs=0, acc0=None):
    """Blocks of ``chunk`` scanned. The weighted sums come back with their K axis, or (K = 1,
    ``acc0`` given: a tree like ``params``, donated) added to ``acc0`` in place."""
    n = prompts.shape[0]
    nc = n // chunk

    def add(acc, ws):
        if acc0 is None:
            return jax.tree_util.tree_map(jnp.add, acc, ws)
        return jax.tree_util.tree_map(lambda a, w: a + w[0].astype(a.dtype), acc, ws)

    if nc == 1:
        ws, sq, gsq = _block_stats(ak, params, prompts, responses, weights, gw, temperature,
                                   eos, route, need_ws, gs)
        return (ws if acc0 is None or not need_ws else add(acc0, ws)), sq, gsq
    xs = prompts.reshape(nc, chunk, -1)
    ys = responses.reshape(nc, chunk, -1)
    wb = weights.reshape(weights.shape[0], nc, chunk).transpose(1, 0, 2)
    gwb = None if gw is None else gw.reshape(nc, chunk)

    def body(acc, inp):
        x, y, w, g = inp
        ws, sq, gsq = _block_stats(ak, params, x, y, w, g, temperature, eos, route, need_ws,
                                   gs)
        return (add(acc, ws) if need_ws else acc), (sq, gsq)

    if acc0 is not None or not need_ws:
        start = acc0
    else:
        start = jax.tree_util.tree_map(lambda x: jnp.zeros((weights.shape[0],) + x.shape,
                                                           weights.dtype), params)
    acc, (sq, gsq) = jax.lax.scan(body, start, (xs, ys, wb, gwb))
    return acc, sq.reshape(-1), None if gsq is None else gsq.reshape(-1)


def ghost_contractions(arch: dict, params, prompts, responses, weights, temperature=1.0,
                       chunk: int = 256, eos=(0,), route: str = "auto"):
    """``(W @ S, ||s_n||^2)`` by ghost norms (no per-sample gradient is formed).

    ``S`` (N, D) are the scores ``s_n = grad_theta log pi(y_n|x_n)`` of tunix's Qwen2 computation
    (:func:`forward`), D ordered as ``jax.flatten_util.ravel_pytree(params)``.

    Args:
        arch: the checked architecture (:func:`grpo_theory.lm.checkpoints.files.read_config`).
        params: tunix's Qwen2 parameter dict (``policy.params``).
        prompts: (N, P) ids left-padded with ``-1``; responses: (N, R) ids (checked by the
            caller: :meth:`grpo_theory.lm.checkpoints.hf.HFPolicy.score_contractions`).
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
    acc = acc_dtype()
    ws, sq, _ = _ghost_jit(_arch_key(arch), params, jnp.asarray(prompts, jnp.int32),
                           jnp.asarray(responses, jnp.int32), jnp.asarray(weights, acc), None,
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


def ghost_moments(arch: dict, params, prompts, responses, weights, group_size: int,
                  temperature=1.0, chunk: int = 256, eos=(0,), route: str = "auto",
                  init=None):
    r"""The advisor's pass 1 by ghost norms: ``S = sum_n w_n s_n``, every ``||s_n||^2`` and
    every group's ``||sum_{n in a} w_n s_n||^2`` (no per-sample gradient is formed).

    Groups are ``group_size`` consecutive rows (a prompt's responses). A group's weighted
    gradient of a linear layer is ``x_a^T diag(w) b_a`` over its ``group_size x T`` positions,
    so its squared norm is the ghost norm of the group taken as one sequence (module
    docstring); with the per-sample norms it comes from the same backward pass.

    Args:
        arch: the checked architecture (:func:`grpo_theory.lm.checkpoints.files.read_config`).
        params: tunix's Qwen2 parameter dict (``policy.params``).
        prompts: (N, P) ids left-padded with ``-1``; responses: (N, R) ids (checked by the
            caller: :meth:`grpo_theory.lm.checkpoints.hf.HFPolicy.ghost_moments`).
        weights: (N,) finite real weights.
        group_size: rows per group (>= 1, divides N and ``chunk``).
        temperature: > 0.
        chunk: samples per block (a multiple of ``group_size``).
        eos: tuple of end-of-sequence ids.
        route: per-layer squared-norm route, one of :data:`ROUTES`.
        init: None, or an ``S`` of an earlier call (a JAX pytree like ``params`` in the
            accumulation dtype): the sum is added to it in place (its buffers are donated and
            must not be used afterwards), so a streamed pass holds one ``S``.

    Returns:
        ``(S, sq, gsq)``: ``S`` a JAX pytree shaped like ``params`` and (N,), (N / group_size,)
        NumPy float64 arrays; sums accumulated in float64 when JAX's 64-bit mode is on, else
        float32.

    Raises:
        ValueError: for a route not in :data:`ROUTES` or a group size that does not divide N
            and ``chunk``.
    """
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}, got {route!r}")
    prompts, responses = np.asarray(prompts), np.asarray(responses)
    weights = np.asarray(weights, np.float64).reshape(1, -1)
    n = prompts.shape[0]
    gs = int(group_size)
    if gs < 1 or n % gs or chunk % gs:
        raise ValueError(f"group_size must be >= 1 and divide the number of rows ({n}) and "
                         f"chunk ({chunk}), got {group_size!r}")
    prompts, responses, weights, chunk = pad_to_chunk(prompts, responses, weights, chunk)
    acc = acc_dtype()
    w = jnp.asarray(weights, acc)
    if init is None:
        init = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, acc), params)
    s, sq, gsq = _ghost_jit(_arch_key(arch), params, jnp.asarray(prompts, jnp.int32),
                            jnp.asarray(responses, jnp.int32), w, w[0], temperature, chunk,
                            tuple(int(e) for e in eos), route, True, gs, init)
    return (s, np.asarray(sq, np.float64)[:n],
            np.asarray(gsq, np.float64)[:n // gs])


@partial(jax.jit, static_argnames=("ak", "chunk", "eos"))
def _dots_jit(ak, params, direction, prompts, responses, temperature, chunk, eos):
    n = prompts.shape[0]
    nc = n // chunk

    def block(inp):
        x, y = inp
        tokens = jnp.concatenate([x, y], axis=1)
        p, t = x.shape[1], tokens.shape[1]
        mask = response_mask(y, eos)

        def log_probs(prm):
            logits = _forward(ak, prm, tokens, _Plain, rows=slice(p - 1, t - 1))
            logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32)) / temperature
            lp = jax.nn.log_softmax(logits, axis=-1)
            return jnp.sum(jnp.take_along_axis(lp, y[..., None], axis=-1)[..., 0] * mask, 1)

        return jax.jvp(log_probs, (params,), (direction,))[1]

    out = jax.lax.map(block, (prompts.reshape(nc, chunk, -1), responses.reshape(nc, chunk, -1)))
    return out.reshape(-1)


def score_dots(arch: dict, params, prompts, responses, direction, temperature=1.0,
               chunk: int = 256, eos=(0,)):
    r"""``<s_n, v>`` for every sample: the directional derivative of ``log pi(y_n|x_n)`` along
    ``v`` (forward mode, ``jax.jvp``: about two forward passes, no backward pass and no
    per-sample gradient).

    Args:
        arch, params, prompts, responses, temperature, eos: as :func:`ghost_moments`.
        direction: ``v``, a pytree shaped like ``params`` (e.g. ``S`` of :func:`ghost_moments`).
        chunk: samples per block (>= 1).

    Returns:
        (N,) NumPy float64; computed in float64 when JAX's 64-bit mode is on (parameters and
        direction cast), else in the parameters' precision.
    """
    prompts, responses = np.asarray(prompts), np.asarray(responses)
    n = prompts.shape[0]
    prompts, responses, _, chunk = pad_to_chunk(prompts, responses, np.zeros((1, n)), chunk)
    acc = acc_dtype()
    cast = (lambda x: x.astype(acc)) if acc == jnp.float64 else None
    prm = params if cast is None else jax.tree_util.tree_map(cast, params)
    v = jax.tree_util.tree_map(lambda d, x: jnp.asarray(d, x.dtype), direction, prm)
    out = _dots_jit(_arch_key(arch), prm, v, jnp.asarray(prompts, jnp.int32),
                    jnp.asarray(responses, jnp.int32), temperature, chunk,
                    tuple(int(e) for e in eos))
    return np.asarray(out, np.float64)[:n]
