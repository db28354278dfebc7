r"""The operations of the ghost-norm pass: each linear map, norm weight, bias and the tied head
is a ``jax.custom_vjp`` whose backward rule emits the per-sample statistics of its tensor as the
cotangents of zero "statistic" inputs (:mod:`grpo_theory.lm.budget.ghost`, whose docstring has
the math): ``ws`` the weighted sums, ``sq`` every per-sample squared norm, ``gsq`` every group's,
``dots`` every ``<s_n, S>`` with the block's own sum (when one block is the whole batch), and
for a tied head the receivers of its cross terms and of its inputs.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from .ghost_rule import ghost_route


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


def group_rows(x, gs):
    """(N, T, ...) -> (N / gs, gs T, ...): the rows of each group of ``gs`` consecutive samples
    as one sequence."""
    return x.reshape((x.shape[0] // gs, gs * x.shape[1]) + x.shape[2:])


def _gsq_linear(x, b, gw, gs, route, acc):
    """(N / gs,) ``||sum_{n in group} gw_n x_n^T b_n||_F^2`` (:func:`_sq_linear` of the groups
    as sequences of gs T positions, the output gradients weighted)."""
    return _sq_linear(group_rows(x, gs), group_rows(b * gw[:, None, None].astype(b.dtype), gs), route,
                      acc)


def _lin_dots(x, b, S, acc):
    """(N,) ``<x_n^T b_n, S> = sum_t x_t^T S b_t`` of a linear map with inputs x (N, T, i),
    output gradients b (N, T, o) and the batch's sum S (i, o): one product the size of the
    layer's forward (one three-operand einsum: XLA's memory analysis of SmolLM2's shape at 128
    rows gave less temporary memory than either product written out)."""
    return jnp.einsum("nti,io,nto->n", x.astype(acc), S, b.astype(acc))


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_lin(flags, x, w, ws0, sq0, gsq0, dots0, wts, gw):
    return jnp.einsum("nti,io->nto", x, w)


def _g_lin_fwd(flags, x, w, ws0, sq0, gsq0, dots0, wts, gw):
    return jnp.einsum("nti,io->nto", x, w), (x, w, wts, gw)


def _g_lin_bwd(flags, res, b):
    route, need_ws, gs, need_dots = flags
    x, w, wts, gw = res
    acc = wts.dtype
    dx = jnp.einsum("nto,io->nti", b, w)
    ws = _ws_linear(wts, x, b, acc) if need_ws else None
    gsq = _gsq_linear(x, b, gw, gs, route, acc) if gs else None
    dots = _lin_dots(x, b, ws[0], acc) if need_dots else None
    return (dx, jnp.zeros_like(w), ws, _sq_linear(x, b, route, acc), gsq, dots,
            jnp.zeros_like(wts), None if gw is None else jnp.zeros_like(gw))


_g_lin.defvjp(_g_lin_fwd, _g_lin_bwd)


def _small_stats(pg, wts, flags, gw):
    """(ws (K, ...), sq (N,), gsq (N / gs,), dots (N,) or None) of formed per-sample gradients
    pg (N, ...); ``dots`` the ``<pg_n, ws[0]>``."""
    need_ws, gs, need_dots = flags
    pg = pg.astype(wts.dtype)
    flat = pg.reshape(pg.shape[0], -1)
    sq = jnp.sum(flat ** 2, axis=1)
    ws = jnp.tensordot(wts, pg, axes=1) if need_ws else None
    gsq = None
    if gs:
        g = (flat * gw[:, None].astype(flat.dtype)).reshape(flat.shape[0] // gs, gs, -1).sum(1)
        gsq = jnp.sum(g * g, axis=1)
    dots = flat @ ws[0].reshape(-1) if need_dots else None
    return ws, sq, gsq, dots


def _zero_cots(wts, gw):
    return jnp.zeros_like(wts), None if gw is None else jnp.zeros_like(gw)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_scale(flags, xhat, w, ws0, sq0, gsq0, dots0, wts, gw):
    return xhat * w


def _g_scale_fwd(flags, xhat, w, ws0, sq0, gsq0, dots0, wts, gw):
    return xhat * w, (xhat, w, wts, gw)


def _g_scale_bwd(flags, res, b):
    xhat, w, wts, gw = res
    stats = _small_stats(jnp.sum(xhat * b, axis=1), wts, flags, gw)
    return (b * w, jnp.zeros_like(w)) + stats + _zero_cots(wts, gw)


_g_scale.defvjp(_g_scale_fwd, _g_scale_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_bias(flags, y, c, ws0, sq0, gsq0, dots0, wts, gw):
    return y + c


def _g_bias_fwd(flags, y, c, ws0, sq0, gsq0, dots0, wts, gw):
    return y + c, (c, wts, gw)


def _g_bias_bwd(flags, res, b):
    c, wts, gw = res
    stats = _small_stats(jnp.sum(b, axis=1), wts, flags, gw)
    return (b, jnp.zeros_like(c)) + stats + _zero_cots(wts, gw)


_g_bias.defvjp(_g_bias_fwd, _g_bias_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _g_tied(flags, z, emb, ids, ws0, sq0, gsq0, cross0, crossg0, z0, wts, gw):
    return jnp.einsum("ntd,vd->ntv", z, emb)


def _g_tied_fwd(flags, z, emb, ids, ws0, sq0, gsq0, cross0, crossg0, z0, wts, gw):
    return jnp.einsum("ntd,vd->ntv", z, emb), (z, emb, ids, wts, gw)


def _head_rows(g, z, ids, acc):
    """(N, T, d) ``r_{n,t} = sum_r g[n, r, id_t] z[n, r]``: the rows of sample n's head
    gradient at its own token ids."""
    m = jnp.take_along_axis(g, jnp.broadcast_to(ids[:, None, :], g.shape[:2] + ids.shape[1:]),
                            axis=2)  # (N, R, T): g[n, r, id_t]
    return jnp.einsum("nrt,nrd->ntd", m.astype(acc), z.astype(acc))


def _g_tied_bwd(flags, res, g):
    """Head part of the tied matrix; ``cross0`` receives ``r_{n,t} = G^head_n[id_t]`` (N, T, d)
    (:func:`_head_rows`, for the cross term), ``crossg0`` the same of each group's weighted
    head gradient (N / gs, gs T, d) and ``z0`` (with the dot products) the head's inputs: the
    head's dot products need the whole tied sum, complete only after the embedding
    (:func:`_tied_head_dots`)."""
    route, need_ws, gs, need_dots = flags
    z, emb, ids, wts, gw = res
    acc = wts.dtype
    dz = jnp.einsum("ntv,vd->ntd", g, emb)
    ws = jnp.swapaxes(_ws_linear(wts, z, g, acc), 1, 2) if need_ws else None
    gsq = rows_g = None
    if gs:
        gwg = g * gw[:, None, None].astype(g.dtype)
        gsq = _gsq_linear(z, g, gw, gs, route, acc)
        rows_g = _head_rows(group_rows(gwg, gs), group_rows(z, gs), group_rows(ids, gs), acc)
    return ((dz, jnp.zeros_like(emb), None, ws, _sq_linear(z, g, route, acc), gsq,
             _head_rows(g, z, ids, acc), rows_g, z.astype(acc) if need_dots else None)
            + _zero_cots(wts, gw))


_g_tied.defvjp(_g_tied_fwd, _g_tied_bwd)


def _leaf(tree, path):
    for k in path:
        tree = tree[k]
    return tree


class GhostOps:
    """The forward's operations with statistics: ``ws`` (params' structure, leading K axis, or
    None when no weighted sum is needed), ``sq`` (N,), ``gsq`` (N / gs,) or None, the embedding
    tap (N, T, d), the cross terms' receivers (N, T, d) and (N / gs, gs T, d), ``dots`` (N,) or
    None (the one-block dot products) and ``zrec`` (N, R, d) or None (a tied head's inputs,
    kept for its dot products) are zero inputs whose cotangents are the statistics; ``gw`` (N,)
    weights the group sums."""

    def __init__(self, ws, sq, gsq, tap, cross, crossg, wts, gw, route, gs, dots=None,
                 zrec=None):
        self.ws, self.sq, self.gsq, self.tap, self.wts, self.gw = ws, sq, gsq, tap, wts, gw
        self.cross, self.crossg, self.dots, self.zrec = cross, crossg, dots, zrec
        self.route, self.need_ws, self.gs = route, ws is not None, gs
        self.need_dots = dots is not None

    def _ws(self, path, shape):
        if self.ws is None:
            return None
        w = _leaf(self.ws, path)
        return w.reshape((w.shape[0],) + tuple(shape))

    def embed(self, emb, ids):
        return jnp.take(emb, ids, axis=0) + self.tap

    def lin(self, x, w, path):
        return _g_lin((self.route, self.need_ws, self.gs, self.need_dots), x, w,
                      self._ws(path, w.shape), self.sq, self.gsq, self.dots, self.wts, self.gw)

    def scale(self, xhat, w, path):
        return _g_scale((self.need_ws, self.gs, self.need_dots), xhat, w,
                        self._ws(path, w.shape), self.sq, self.gsq, self.dots, self.wts,
                        self.gw)

    def bias(self, y, c, path):
        return _g_bias((self.need_ws, self.gs, self.need_dots), y, c, self._ws(path, c.shape),
                       self.sq, self.gsq, self.dots, self.wts, self.gw)

    def tied_head(self, z, emb, ids):
        return _g_tied((self.route, self.need_ws, self.gs, self.need_dots), z, emb, ids,
                       self._ws(("embedder", "input_embedding"), emb.shape), self.sq, self.gsq,
                       self.cross, self.crossg, self.zrec, self.wts, self.gw)


def embedding_sq(b, ids, rows, acc, route, vocab):
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
