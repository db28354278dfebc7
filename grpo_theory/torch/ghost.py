r"""Per-sample and per-prompt score statistics of a PyTorch model from one backward pass.

For a batch of ``N = m n`` rows (the n responses of each of m prompts) with
``log pi(y_r | x_r)`` computed in one forward pass, one backward pass of ``sum_r log pi`` to the
outputs of the modules that own trainable parameters gives, for each such module, its recorded
input ``a`` and the output gradient ``b`` (row r's gradient reaches only row r's positions).
A linear layer's weight gradient of row r is ``b_r^T a_r``; everything the advisor needs is a
bilinear form in these factors, computed without forming the (N, D) per-sample gradients:

* per-sample squared norms ("ghost norms", Li et al. 2021; Bu et al. 2023)

  .. math:: \|b_r^\top a_r\|_F^2 = \sum_{t,t'} (a_{rt} \cdot a_{rt'})(b_{rt} \cdot b_{rt'});

* per-prompt means ``ghat_a = sum_i c_ai s_ai`` (``c_ai = Z_ai w_ai / n``): the factors of a
  prompt's n rows concatenated, ``b`` scaled by ``c``, are one "pseudo-sample" of n T
  positions, so ``||ghat_a||^2`` is the same ghost norm over n T positions;
* the batch sum ``S = sum_a ghat_a`` (one matmul per layer, as a weighted backward pass forms
  the weight gradient) and the dots ``<ghat_a, S> = sum_{i,t} c_ai b_ait^T S a_ait`` (one
  matmul per layer, as a forward pass).

Each layer's route ("gram": factored, Gram matrices of the positions; "direct": the (n, d_out,
d_in) gradients formed) is the rule shared with the JAX backend
(:func:`grpo_theory.lm.budget.ghost_rule.ghost_route`), decided for T positions (per sample) and n T
(per prompt). An embedding is a linear layer whose input is the one-hot token
(``a_t . a_t' = [id_t = id_t']``; rows at ``padding_idx`` get no gradient, as
``torch.nn.Embedding`` trains). Other modules with trainable parameters (RMSNorm weights,
small) get their per-sample gradients formed by ``torch.func`` (``vmap`` of ``grad`` of
``<module(a_r), b_r>``). A parameter used by several modules (tied input and output embeddings)
sums its uses, so its squared norms have the cross terms ``<g_u, g_v>``, computed in the same
factored way. Products are formed in the model's dtype (float32); reductions accumulate in
float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .layers import Factored, explicit_grad, inner_products, layer_route, parameter_uses

#: form a parameter's m per-prompt means when they take at most this many bytes (else factored)
FORM_BYTES = 256 * 2 ** 20


# --- one batch: per-sample norms, per-prompt norms, the sum, the dots -----------------------------

def owned_ids(rec) -> set:
    """``id`` of every trainable parameter a recorded call handles (what the uses cover)."""
    return {id(p) for mod, _, _, out in rec.calls if out.requires_grad
            for p in rec.owned[id(mod)].values()}


def _record_uses(rec, logp, rows, uncovered):
    """``{id(p): [use, ...]}`` of every recorded call (one backward pass of ``sum(logp)`` to
    their outputs); refuses a parameter in ``uncovered`` that receives a gradient."""
    calls = [c for c in rec.calls if c[3].requires_grad]
    outs = [c[3] for c in calls]
    grads = torch.autograd.grad(logp.sum(), outs + [p for _, p in uncovered],
                                allow_unused=True)
    for (name, _), g in zip(uncovered, grads[len(outs):]):
        if g is not None and bool(g.abs().max() > 0):
            raise ValueError(f"trainable parameter {name!r} receives a gradient but not through "
                             f"the forward of the module that owns it; its per-sample norms "
                             f"cannot be formed (freeze it)")
    uses: dict[int, list] = {}
    for (mod, args, kwargs, out), b in zip(calls, grads[:len(outs)]):
        if b is None:
            continue
        b = b.float() if b.dtype.itemsize < 4 else b
        a = args[0]
        a = a.float() if a.is_floating_point() and a.dtype.itemsize < 4 else a
        if a.shape[0] != rows or out.shape[0] != rows:
            raise ValueError(f"module {type(mod).__name__} does not keep the sample dimension "
                             f"first (input {tuple(a.shape)}, output {tuple(out.shape)}); the "
                             f"per-sample norms need (n, ...) activations")
        for p, u in parameter_uses(mod, (a,) + tuple(args[1:]), kwargs, b, rows,
                          rec.owned[id(mod)]).items():
            uses.setdefault(id(p), []).append(u)
    return uses


def _sq(us):
    """(batch,) float64 squared norms of the sum of a parameter's uses (cross terms included)."""
    q = 0.0
    for i, u in enumerate(us):
        q = q + inner_products(u, u)
        for v in us[i + 1:]:
            q = q + 2.0 * inner_products(u, v)
    return q


def _grouped(u, coef, m, n):
    """The per-prompt weighted sum ``sum_i c_ai u_ai`` of a per-sample use, as a use of m
    pseudo-samples (factored over the n T positions when the shared rule keeps it factored)."""
    if isinstance(u, Factored):
        T = u.R.shape[1]
        R = (u.R * coef[:, None, None]) if u.ids else u.R
        L = u.L if u.ids else u.L * coef[:, None, None]
        g = Factored(L.reshape((m, n * T) + tuple(L.shape[2:])), R.reshape(m, n * T, -1),
                      u.rows)
        p = u.rows if u.ids else u.L.shape[2]
        route = layer_route(n * T, p, g.R.shape[2], one_hot=u.ids, dtype=g.R.dtype)
        return g if route == "gram" else explicit_grad(g)
    shape = (m, n) + tuple(u.shape[1:])
    return (u * coef.reshape((-1,) + (1,) * (u.ndim - 1))).reshape(shape).sum(dim=1)


def _total(u, shape, into=None):
    """The sum over the batch of a (grouped) use, formed in ``shape`` (added to ``into``)."""
    if isinstance(u, Factored):
        R = u.R.reshape(-1, u.R.shape[2])
        if u.ids:
            out = R.new_zeros(u.rows, R.shape[1]) if into is None else into.view(u.rows, -1)
            out.index_add_(0, u.L.reshape(-1), R)
        else:
            L = u.L.reshape(-1, u.L.shape[2])
            if into is None:
                out = L.T @ R
            else:
                out = into.view(L.shape[1], R.shape[1])
                out.addmm_(L.T, R)
        return out.view(shape)
    t = u.sum(dim=0).reshape(shape)
    return t if into is None else into.add_(t)


def dots_with_sum(u, S):
    """(batch,) float64 ``<u_a, S>`` of a use and a formed gradient ``S`` of its parameter.

    Args:
        u: a use (factored, formed (batch, p, r), or per-sample vectors (batch, k)).
        S: the parameter's gradient, any shape with the use's number of entries.

    Returns:
        (batch,) float64.
    """
    if isinstance(u, Factored):
        r = u.R.shape[2]
        if u.ids:
            rows = S.reshape(u.rows, r).to(u.R.dtype)[u.L]           # (batch, P, r)
        else:
            rows = u.L @ S.reshape(u.L.shape[2], r).to(u.L.dtype)   # (batch, P, r)
        return (rows * u.R).double().sum(dim=(1, 2))
    flat = u.reshape(u.shape[0], -1)
    return flat.double() @ S.reshape(-1).double()


@dataclass
class BatchStatistics:
    """The statistics of one batch of m prompts x n rows (float64 tensors).

    Attributes:
        sq_norms: (m n,) ``||s_r||^2``; mean_sq: (m,) ``||ghat_a||^2``.
        sums: the batch's ``S = sum_a ghat_a``, one tensor per parameter (None unless asked).
        mean_dot: (m,) ``<ghat_a, S>`` with this batch's own ``S`` (when asked: the batch is
            then the whole batch), else None.
        kept: the formed ``ghat_a``, one (m, *shape) tensor per parameter (when asked), else None.
    """

    sq_norms: torch.Tensor
    mean_sq: torch.Tensor
    sums: list | None
    mean_dot: torch.Tensor | None = None
    kept: list | None = None


def batch_statistics(rec, logp, coef, m, n, params, uncovered=(), *, dots=True, keep=False,
                     sums=True):
    """The statistics of one batch of m prompts x n rows from one backward pass (module
    docstring).

    Args:
        rec: the :class:`~grpo_theory.torch.layers.Recorder` that recorded the forward pass
            of ``logp``.
        logp: (m n,) ``log pi(y_r|x_r)`` (prompt-major rows), differentiable.
        coef: (m n,) weights ``c_r`` of the per-prompt means (``Z w / n``).
        m, n: prompts and rows per prompt.
        params: ``[(name, p)]`` the trainable parameters (the order of ``sums`` and ``kept``).
        uncovered: ``[(name, p)]`` trainable parameters no recorded module owns (refused if
            they receive a gradient).
        dots: take ``<ghat_a, S>`` with this batch's own sum (right when the batch is all).
        keep: return the formed per-prompt means ``ghat_a`` (m x D floats).
        sums: return the batch's sums (D float64; else each is dropped once used).

    Returns:
        :class:`BatchStatistics`.
    """
    N = m * n
    uses = _record_uses(rec, logp, N, uncovered)
    dev = logp.device
    out = BatchStatistics(torch.zeros(N, dtype=torch.float64, device=dev),
                          torch.zeros(m, dtype=torch.float64, device=dev), [] if sums else None,
                          torch.zeros(m, dtype=torch.float64, device=dev) if dots else None,
                          [] if keep else None)
    for _, p in params:
        us = uses.pop(id(p), None)
        if us is None:  # no gradient reaches it
            if sums:
                out.sums.append(torch.zeros(p.shape, dtype=torch.float64, device=dev))
            if keep:
                out.kept.append(torch.zeros((m,) + tuple(p.shape), dtype=p.dtype, device=dev))
            continue
        gs = [_grouped(u, coef.to(_dtype(u)), m, n) for u in us]
        out.sq_norms += _sq(us)
        if keep or m * p.numel() * p.element_size() <= FORM_BYTES:
            # the m per-prompt means formed (one matmul per use, as the weight gradient of a
            # backward pass): their norms, sum and dots are then O(m D_p)
            E = _formed(gs[0], m, p.shape)
            for g in gs[1:]:
                E = E + _formed(g, m, p.shape)
            flat = E.reshape(m, -1)  # products in the model's dtype (BLAS), sums in float64
            out.mean_sq += torch.linalg.vecdot(flat, flat).double()
            S = E.sum(dim=0)
            if dots:
                out.mean_dot += (flat @ S.reshape(-1)).double()
            if keep:
                out.kept.append(E)
        else:  # factored: per-prompt ghost norms, S by one matmul, the dots by another
            out.mean_sq += _sq(gs)
            S = _total(gs[0], p.shape)  # the model's dtype
            for g in gs[1:]:
                S = _total(g, p.shape, into=S)
            if dots:
                for g in gs:
                    out.mean_dot += dots_with_sum(g, S)
        if sums:
            out.sums.append(S.double())
        del S
    return out


def batch_dots(rec, logp, coef, m, n, params, sums, uncovered=()):
    """(m,) float64 ``<ghat_a, S>`` of one batch with given sums ``S`` (a second pass).

    Args:
        rec, logp, coef, m, n, params, uncovered: as in :func:`batch_statistics`.
        sums: the formed ``S`` of every parameter, in ``params``' order.

    Returns:
        (m,) float64 tensor.
    """
    uses = _record_uses(rec, logp, m * n, uncovered)
    mean_dot = torch.zeros(m, dtype=torch.float64, device=logp.device)
    for (_, p), S in zip(params, sums):
        for u in uses.pop(id(p), ()):
            mean_dot += dots_with_sum(_grouped(u, coef.to(_dtype(u)), m, n), S)
    return mean_dot


def _formed(g, m, shape):
    """A grouped use as the (m, *shape) per-prompt gradients."""
    return (explicit_grad(g) if isinstance(g, Factored) else g).reshape((m,) + tuple(shape))


def _dtype(u):
    return u.R.dtype if isinstance(u, Factored) else u.dtype
