r"""Which way a layer's per-sample squared gradient norm is formed: one rule for every backend.

A layer applied at T positions of a sample with inputs ``a`` (T, d_in) and output gradients
``b`` (T, d_out) has the per-sample weight gradient ``G = a^T b`` (d_in, d_out), and

.. math:: \|a^\top b\|_F^2 = \langle a a^\top,\, b b^\top\rangle_F .

Two exact routes compute it:

* **gram**: the two (T, T) Gram matrices and their inner product, no d_in x d_out matrix;
* **direct**: form ``G`` and sum its squares.

An embedding is the same layer with one-hot inputs (``d_in`` = the vocabulary): its Gram
``a a^T`` is the token-equality mask (no multiplications) and its ``G`` is a scatter-add of
the rows of ``b``.

Counts per sample, multiply-adds (``c_in = 1`` for one-hot inputs, else ``d_in``):

.. math:: F_\text{gram} = T^2 (c_\text{in} + d_\text{out} + 1), \qquad
          F_\text{direct} = T\,c_\text{in}\,d_\text{out} + d_\text{in} d_\text{out},

(the two Grams plus their product; ``G`` plus the sum of its squares) and values held
(times ``dtype_bytes`` for bytes):

.. math:: M_\text{gram} = 2 T^2, \qquad M_\text{direct} = d_\text{in} d_\text{out}.

The inputs and output gradients themselves hold ``A = T (c_in + d_out)`` values per sample
(the activations a memory model of the pass counts, e.g.
:func:`grpo_theory.lm.budget.memory.ghost_row_bytes`).

:func:`ghost_route` picks the route with fewer multiply-adds (gram on a tie), unless it holds
more than the memory budget of the block's ``rows`` samples (``rows M dtype_bytes`` bytes;
default budget: the activations, ``rows A dtype_bytes``, so no route holds more than the layer's
own activations): then the other route if that one fits, and when neither fits the one holding
less. The JAX backend (:mod:`grpo_theory.lm.budget.ghost`) and the PyTorch backend
(:mod:`grpo_theory.torch.estimate`) both call it; this module imports neither framework.
"""

from __future__ import annotations

import numbers


#: how a layer's per-sample squared norm is formed: "auto" (:func:`ghost_route`), "gram"
#: (``<a a^T, b b^T>``) or "direct" (``||a^T b||^2``)
ROUTES = ("auto", "gram", "direct")


def _count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def route_costs(positions: int, d_in: int, d_out: int, *, one_hot: bool = False) -> dict:
    """Per-sample multiply-adds and values held by each route, and the activations (module
    docstring).

    Args:
        positions: T >= 1, the positions of one sample (a group taken as one sequence: its
            rows times T).
        d_in: input width (the vocabulary for an embedding); d_out: output width.
        one_hot: the inputs are one-hot token ids (an embedding).

    Returns:
        dict ``{"gram": (flops, values), "direct": (flops, values), "activations": values}``
        of ints.
    """
    t = _count("positions", positions)
    di, do = _count("d_in", d_in), _count("d_out", d_out)
    c_in = 1 if one_hot else di
    return {"gram": (t * t * (c_in + do + 1), 2 * t * t),
            "direct": (t * c_in * do + di * do, di * do),
            "activations": t * (c_in + do)}


def ghost_route(positions: int, d_in: int, d_out: int, *, one_hot: bool = False,
                dtype_bytes: int = 4, rows: int = 1, memory_budget: int | None = None) -> str:
    r"""The route ("gram" or "direct") of one layer's per-sample squared norm.

    The route with fewer multiply-adds (module docstring: ``F_gram = T^2 (c_in + d_out + 1)``
    against ``F_direct = T c_in d_out + d_in d_out``; gram on a tie), unless its
    ``rows * M * dtype_bytes`` bytes (``M_gram = 2 T^2``, ``M_direct = d_in d_out`` values)
    exceed the budget: then the other route if it fits, else the one holding less.

    Args:
        positions: T >= 1 positions per sample (or per group taken as one sequence).
        d_in: input width (vocabulary for ``one_hot``); d_out: output width (>= 1).
        one_hot: inputs are token ids (an embedding).
        dtype_bytes: bytes per value (4 float32, 8 float64, 2 bfloat16).
        rows: samples (or groups) of a block formed at once (>= 1).
        memory_budget: bytes the layer's intermediate may hold; None: the layer's activations,
            ``rows T (c_in + d_out) dtype_bytes`` (then the choice depends on the shapes only).

    Returns:
        ``"gram"`` or ``"direct"``.

    Raises:
        ValueError: a size that is not a positive integer, naming it.
    """
    costs = route_costs(positions, d_in, d_out, one_hot=one_hot)
    b, n = _count("dtype_bytes", dtype_bytes), _count("rows", rows)
    budget = (n * costs["activations"] * b if memory_budget is None
              else _count("memory_budget", memory_budget))
    best = "gram" if costs["gram"][0] <= costs["direct"][0] else "direct"
    other = "direct" if best == "gram" else "gram"
    held = {k: n * costs[k][1] * b for k in ("gram", "direct")}
    if held[best] <= budget:
        return best
    if held[other] <= budget:
        return other
    return best if held[best] <= held[other] else other
