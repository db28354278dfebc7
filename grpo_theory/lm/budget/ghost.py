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
is a ``jax.custom_vjp`` (:mod:`grpo_theory.lm.budget.ghost_ops`) whose backward rule emits these two quantities as the cotangents of
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

When one block holds the whole batch (:func:`ghost_moments` with ``dots``), the pass also gives
every ``<s_n, S>`` with ``S = sum_n w_n s_n``: a linear map's sum is complete when the backward
pass reaches it, so its rule adds ``<a^T b, S> = sum_t a_t^T S b_t`` (one product the size of
its forward); the embedding's rows are dotted with the tied or untied matrix's sum after the
pass, and a tied head's part ``<G^head_n, S>`` (its sum includes the embedding's, complete only
after the pass) by forward mode through the head alone, its inputs h kept from the pass.

The forward is the model family's pure-JAX forward (its spec's
:attr:`~grpo_theory.lm.families.spec.ModelSpec.forward`, :mod:`grpo_theory.lm.families`; for Qwen2 /
Llama :func:`grpo_theory.lm.families.qwen2.forward`, tunix's Qwen2 computation) over the
parameter dict :func:`grpo_theory.lm.checkpoints.load.from_pretrained` loads, with prompts
left-padded by ``-1`` (:func:`positions_mask`). Only the response positions' logits are formed (the
others never enter ``log pi(y|x)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import families
from .ghost_ops import GhostOps, embedding_sq, group_rows
from .ghost_rule import ROUTES
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


def _sample_log_probs(logits, responses, mask, temperature):
    """(N,) ``log pi(y_n|x_n)``: the response positions' logits (N, R, V) at ``temperature``,
    summed over the positions ``mask`` keeps."""
    logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32)) / temperature
    lp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.sum(jnp.take_along_axis(lp, responses[..., None], axis=-1)[..., 0] * mask, axis=1)


#: rows per step of the tied head's forward-mode dot products (their (rows, R, V) logits)
HEAD_ROWS = 8


def _tied_head_dots(z, emb, direction, responses, mask, temperature):
    """(N,) ``<G^head_n, v>``: the tied head's part of each score (the head's inputs ``z``
    (N, R, d) held fixed) along ``v`` (V, d), by forward mode through the head alone, in steps
    of ``gcd(N, HEAD_ROWS)`` rows (so its logits never hold more than :data:`HEAD_ROWS`)."""
    e, v = emb.astype(z.dtype), direction.astype(z.dtype)

    def rows(inp):
        zi, yi, mi = inp

        def lp(m):
            return _sample_log_probs(jnp.einsum("ntd,vd->ntv", zi, m), yi, mi, temperature)

        return jax.jvp(lp, (e,), (v,))[1]

    n = z.shape[0]
    k = math.gcd(n, HEAD_ROWS)
    split = [a.reshape((n // k, k) + a.shape[1:]) for a in (z, responses, mask)]
    return jax.lax.map(rows, tuple(split)).reshape(n)


def _block_stats(ak, params, prompts, responses, wts, gw, temperature, eos, route, need_ws,
                 gs, need_dots=False):
    """(ws tree or None, sq (C,), gsq (C / gs,) or None, dots (C,) or None) of one block of C
    samples: one forward + one backward.

    ``need_dots`` (one weight row, the block the whole batch): every ``<s_n, S>`` with the
    block's own sum ``S = ws[0]``, formed layer by layer as the backward pass completes each
    layer's sum (``sum_t x_t^T S b_t`` for a linear map), the embedding's and the tied head's
    after the pass (their sum is complete only then)."""
    a = dict(ak)
    acc = wts.dtype
    tokens = jnp.concatenate([prompts, responses], axis=1)
    n, t = tokens.shape
    p = prompts.shape[1]
    d = params["embedder"]["input_embedding"].shape[1]
    dt = params["embedder"]["input_embedding"].dtype
    mask = response_mask(responses, eos)

    def total_log_prob(ws, sq, gsq, tap, cross, crossg, dots, zrec):
        ops = GhostOps(ws, sq, gsq, tap, cross, crossg, wts, gw, route, gs, dots, zrec)
        logits = _forward(ak, params, tokens, ops, rows=slice(p - 1, t - 1))
        return jnp.sum(_sample_log_probs(logits, responses, mask, temperature))

    ws0 = (jax.tree_util.tree_map(lambda x: jnp.zeros((wts.shape[0],) + x.shape, acc), params)
           if need_ws else None)
    sq0 = jnp.zeros((n,), acc)
    gsq0 = jnp.zeros((n // gs,), acc) if gs else None
    tap0 = jnp.zeros((n, t, d), dt)
    cross0 = jnp.zeros((n, t, d), acc) if a["tied"] else None
    crossg0 = jnp.zeros((n // gs, gs * t, d), acc) if a["tied"] and gs else None
    dots0 = jnp.zeros((n,), acc) if need_dots else None
    z0 = jnp.zeros((n, responses.shape[1], d), acc) if need_dots and a["tied"] else None
    ws, sq, gsq, b, rows, rows_g, dots, z = jax.grad(total_log_prob, argnums=tuple(range(8)))(
        ws0, sq0, gsq0, tap0, cross0, crossg0, dots0, z0)
    # the embedding: gradient rows grouped by token id (padding slots carry b = 0 and no id)
    ids = jnp.where(tokens >= 0, tokens, -1)
    b = b.astype(acc) * (tokens >= 0)[..., None]
    v = params["embedder"]["input_embedding"].shape[0]
    sq = sq + embedding_sq(b, ids, rows, acc, route, v)
    if gs:
        bw = group_rows(b * gw[:, None, None].astype(acc), gs)
        gsq = gsq + embedding_sq(bw, group_rows(ids, gs), rows_g, acc, route, v)
    if need_ws:
        emb_ws = jnp.stack([jnp.zeros((v, d), acc).at[jnp.maximum(ids, 0).reshape(-1)].add(
            (b * w[:, None, None]).reshape(n * t, d)) for w in wts])
        ws = dict(ws, embedder=dict(ws["embedder"], input_embedding=ws["embedder"][
            "input_embedding"] + emb_ws))
    if need_dots:  # the embedding matrix's sum is complete: its rows at each token, the head
        s_emb = ws["embedder"]["input_embedding"][0]
        dots = dots + jnp.einsum("ntd,ntd->n", b, jnp.take(s_emb, jnp.maximum(ids, 0), axis=0))
        if a["tied"]:
            dots = dots + _tied_head_dots(z, params["embedder"]["input_embedding"], s_emb,
                                          responses, mask, temperature)
    return ws, sq, gsq, dots


@partial(jax.jit, static_argnames=("ak", "chunk", "eos", "route", "need_ws", "gs", "need_dots"),
         donate_argnames=("acc0",))
def _ghost_jit(ak, params, prompts, responses, weights, gw, temperature, chunk, eos, route,
               need_ws, gs=0, acc0=None, need_dots=False):
    """Blocks of ``chunk`` scanned. The weighted sums come back with their K axis, or (K = 1,
    ``acc0`` given: a tree like ``params``, donated) added to ``acc0`` in place; with
    ``need_dots`` (one block) also every ``<s_n, S>`` (else None)."""
    n = prompts.shape[0]
    nc = n // chunk

    def add(acc, ws):
        if acc0 is None:
            return jax.tree_util.tree_map(jnp.add, acc, ws)
        return jax.tree_util.tree_map(lambda a, w: a + w[0].astype(a.dtype), acc, ws)

    if nc == 1:
        ws, sq, gsq, dots = _block_stats(ak, params, prompts, responses, weights, gw,
                                         temperature, eos, route, need_ws, gs, need_dots)
        if need_dots:  # the sums are read twice: returned as they are (no copy into acc0)
            return jax.tree_util.tree_map(lambda x: x[0], ws), sq, gsq, dots
        return (ws if acc0 is None or not need_ws else add(acc0, ws)), sq, gsq, dots
    xs = prompts.reshape(nc, chunk, -1)
    ys = responses.reshape(nc, chunk, -1)
    wb = weights.reshape(weights.shape[0], nc, chunk).transpose(1, 0, 2)
    gwb = None if gw is None else gw.reshape(nc, chunk)

    def body(acc, inp):
        x, y, w, g = inp
        ws, sq, gsq, _ = _block_stats(ak, params, x, y, w, g, temperature, eos, route, need_ws,
                                      gs)
        return (add(acc, ws) if need_ws else acc), (sq, gsq)

    if acc0 is not None or not need_ws:
        start = acc0
    else:
        start = jax.tree_util.tree_map(lambda x: jnp.zeros((weights.shape[0],) + x.shape,
                                                           weights.dtype), params)
    acc, (sq, gsq) = jax.lax.scan(body, start, (xs, ys, wb, gwb))
    return acc, sq.reshape(-1), None if gsq is None else gsq.reshape(-1), None


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
    ws, sq, _, _ = _ghost_jit(_arch_key(arch), params, jnp.asarray(prompts, jnp.int32),
                              jnp.asarray(responses, jnp.int32), jnp.asarray(weights, acc),
                              None, temperature, chunk, tuple(int(e) for e in eos), route,
                              need_ws)
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
                  init=None, dots: bool = False):
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
        dots: also every ``<s_n, S>`` from the same backward pass (the whole batch in one
            block, ``chunk >= N``, and no ``init``: ``S`` must be complete). Each linear map's
            ``sum_t x_t^T S b_t`` is formed as soon as the pass has its ``S`` (one more product
            the size of its forward), the embedding's and a tied head's after the pass (the
            head's part by forward mode through the head alone); the two-pass alternative is
            :func:`score_dots` after the last block.

    Returns:
        ``(S, sq, gsq)``, and ``dots`` (N,) when asked: ``S`` a JAX pytree shaped like
        ``params`` and (N,), (N / group_size,) NumPy float64 arrays; sums accumulated in
        float64 when JAX's 64-bit mode is on, else float32.

    Raises:
        ValueError: for a route not in :data:`ROUTES`, a group size that does not divide N
            and ``chunk``, or ``dots`` with more than one block or an ``init``.
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
    if dots and (chunk < n or init is not None):
        raise ValueError(f"dots=True needs the whole batch in one block (chunk >= {n} rows, got "
                         f"{chunk}) and no init (S must be complete): use score_dots after the "
                         "last block")
    prompts, responses, weights, chunk = pad_to_chunk(prompts, responses, weights, chunk)
    acc = acc_dtype()
    w = jnp.asarray(weights, acc)
    if init is None and not dots:
        init = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, acc), params)
    s, sq, gsq, d = _ghost_jit(_arch_key(arch), params, jnp.asarray(prompts, jnp.int32),
                               jnp.asarray(responses, jnp.int32), w, w[0], temperature, chunk,
                               tuple(int(e) for e in eos), route, True, gs, init, bool(dots))
    out = (s, np.asarray(sq, np.float64)[:n], np.asarray(gsq, np.float64)[:n // gs])
    return out + (np.asarray(d, np.float64)[:n],) if dots else out


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
