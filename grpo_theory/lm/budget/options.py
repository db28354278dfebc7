r"""The model options of a language-model run, checked once: memory budget, chunk, dtype, pad id.

A command line (``grpo-theory advise``, ``--memory-budget``, ``--chunk``, ``--dtype``,
``--pad-id``) builds one :class:`ModelOptions`; the loader reads ``dtype`` and ``pad_id``
(:func:`grpo_theory.lm.checkpoints.load.load_policy`) and the statistics read the chunk, resolved
once from the budget by :meth:`ModelOptions.resolve_chunk`:

.. math:: c = \max\{c \le N : B + D (2 b + 8 K) + c f a \le \text{budget}\},

with ``a`` the bytes one sequence adds to the score pass (the policy's
:meth:`~grpo_theory.lm.policy.LMPolicy.row_bytes`; ``D (b + 8)`` on the per-sample route),
``B`` the process's other memory (:func:`grpo_theory.lm.budget.memory.resident_base`). A
policy with its own ``a`` runs blocks of whole groups of n responses and per-sample scores
below one group, so its chunk is a multiple of n, or below n by the per-sample rule
(:func:`grpo_theory.lm.budget.memory.chunk_for_groups`): the budget of the route that runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from ... import _validation as V
from .memory import (chunk_for_budget, chunk_for_groups, default_memory_budget, parse_memory,
                     resident_base, sample_rows_for_budget)


#: dtypes a Hugging Face checkpoint can be run in (``--dtype``)
MODEL_DTYPES = ("float32", "bfloat16")

#: gradients of a checkpoint's pad-token input-embedding row (``--pad-embedding``): "frozen"
#: (none through the lookup, as transformers' ``nn.Embedding(padding_idx=pad_token_id)``
#: trains) or "trained" (the exact gradient in every parameter)
PAD_EMBEDDINGS = ("frozen", "trained")


def check_pad_embedding(value) -> str:
    """``value`` if it is one of :data:`PAD_EMBEDDINGS`, else a ValueError naming
    ``pad_embedding``."""
    if not isinstance(value, str) or value not in PAD_EMBEDDINGS:
        raise ValueError(f"pad_embedding must be one of {', '.join(PAD_EMBEDDINGS)}, got "
                         f"{value!r}")
    return value


def _optional_int(name: str, value, low: int):
    """None, or ``value`` as an int >= ``low`` (:func:`grpo_theory._validation.integer`)."""
    return None if value is None else V.integer(name, value, low)


@dataclass(frozen=True)
class ModelOptions:
    """The options of the model behind a run, validated on construction (frozen).

    Attributes:
        memory_budget: bytes the statistics may use when ``chunk`` is None (an integer >= 1,
            or a size such as ``"4GB"``, ``"512MiB"``, :func:`grpo_theory.lm.budget.memory.
            parse_memory`); None: half the available memory
            (:func:`grpo_theory.lm.budget.memory.default_memory_budget`).
        chunk: sequences per block of the score pass (an integer >= 1); None: the largest that
            fits in ``memory_budget``.
        dtype: a checkpoint's parameter and compute dtype (:data:`MODEL_DTYPES`); None: float32.
            The package's own models are float32 only.
        pad_id: a checkpoint's fill id after a sampled response's EOS (an integer >= 0); None:
            the checkpoint's pad token, else its first EOS id. Not accepted for the package's
            models.
        pad_embedding: the gradient of a checkpoint's pad-token input-embedding row
            (:data:`PAD_EMBEDDINGS`, :func:`grpo_theory.lm.checkpoints.load.from_pretrained`); None:
            "frozen", what transformers trains. Not accepted for the package's models.

    Raises:
        ValueError: naming the field, for a bad value.
    """

    memory_budget: int | None = None
    chunk: int | None = None
    dtype: str | None = None
    pad_id: int | None = None
    pad_embedding: str | None = None

    def __post_init__(self):
        budget = self.memory_budget
        if isinstance(budget, str):  # a size; parse_memory's errors name --memory-budget
            budget = parse_memory(budget)
        object.__setattr__(self, "memory_budget", _optional_int("memory_budget", budget, 1))
        object.__setattr__(self, "chunk", _optional_int("chunk", self.chunk, 1))
        object.__setattr__(self, "pad_id", _optional_int("pad_id", self.pad_id, 0))
        if self.pad_embedding is not None:
            check_pad_embedding(self.pad_embedding)
        if self.dtype is not None and self.dtype not in MODEL_DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(MODEL_DTYPES)} or None, got "
                             f"{self.dtype!r}")

    @property
    def checkpoint_only(self) -> dict:
        """The options set that apply to a checkpoint only (``dtype`` other than float32,
        ``pad_id``, ``pad_embedding``), by name."""
        out = {}
        if self.pad_embedding is not None:
            out["pad_embedding"] = self.pad_embedding
        if self.dtype not in (None, "float32"):
            out["dtype"] = self.dtype
        if self.pad_id is not None:
            out["pad_id"] = self.pad_id
        return out

    def resolve_chunk(self, policy, n_items: int, *, seq_len: int | None = None,
                      response_len: int | None = None, n_accumulators: int = 1,
                      group_size: int = 1) -> int:
        """The chunk of sequences per block of the score pass: ``chunk`` when set, else the
        largest that fits in the budget (module docstring).

        The budget is the whole process's: what it holds besides the parameters
        (:func:`grpo_theory.lm.budget.memory.resident_base`: its memory outside JAX arrays at its
        first chunk choice, and the live JAX arrays beyond the parameters now) is counted
        first. With ``seq_len`` and
        ``response_len`` a sequence costs ``policy.row_bytes(seq_len, response_len)`` (the
        per-sample scores when that is None); without them, the per-sample scores.

        Args:
            policy: an :class:`~grpo_theory.lm.policy.LMPolicy`.
            n_items: sequences to score (>= 1; no chunk exceeds it).
            seq_len, response_len: positions of a sequence and of its response, or None.
            n_accumulators: float64 (D,) accumulators held (>= 1).
            group_size: n >= 1 responses per prompt: with a ``row_bytes`` the chunk is a
                multiple of n, or below n by the per-sample rule (module docstring).

        Raises:
            ValueError: naming ``--memory-budget`` (and the smallest budget that fits) when
                even chunk 1 does not fit.
        """
        if self.chunk is not None:
            return self.chunk
        d, b = score_memory(policy)
        budget = default_memory_budget() if self.memory_budget is None else self.memory_budget
        row = None
        if seq_len is not None and response_len is not None:
            row = policy.row_bytes(seq_len, response_len)
        kw = dict(dtype_bytes=b, memory_budget_bytes=budget, n_items=n_items,
                  n_accumulators=n_accumulators, base_bytes=resident_base(policy.params))
        if row is None:
            return chunk_for_budget(d, **kw)
        return chunk_for_groups(d, row_bytes=row, group_size=group_size, **kw)

    def sample_rows(self, policy, prompt_len: int, response_len: int) -> int | None:
        """Rows per block of the sampler that fit in the budget (the given one, else the
        default), or None when the policy does not say what a row costs
        (:meth:`~grpo_theory.lm.policy.LMPolicy.sample_row_bytes`; no limit).

        Raises:
            ValueError: naming ``--memory-budget`` when one row does not fit.
        """
        row = policy.sample_row_bytes(prompt_len, response_len)
        if row is None:
            return None
        d, b = score_memory(policy)
        budget = default_memory_budget() if self.memory_budget is None else self.memory_budget
        return sample_rows_for_budget(d, dtype_bytes=b, memory_budget_bytes=budget,
                                      row_bytes=row, base_bytes=resident_base(policy.params))


def score_memory(policy) -> tuple[int, int]:
    """``(D, bytes per parameter)`` of a policy's parameters (the widest floating leaf), what
    :func:`grpo_theory.lm.budget.memory.chunk_for_budget` needs; read from the leaves' shapes (no
    copy)."""
    leaves = jax.tree_util.tree_leaves(policy.params)
    d = int(sum(np.size(x) for x in leaves))
    widths = [np.dtype(x.dtype).itemsize for x in leaves
              if hasattr(x, "dtype") and np.issubdtype(np.dtype(x.dtype), np.floating)]
    return d, max(widths, default=4)


def resolve_chunk(policy, chunk, n_items: int, memory_budget=None, n_accumulators: int = 1,
                  *, seq_len: int | None = None, response_len: int | None = None,
                  group_size: int = 1) -> int:
    """:meth:`ModelOptions.resolve_chunk` of ``ModelOptions(memory_budget, chunk)``: ``chunk``
    when given (an int >= 1), else the largest that fits in ``memory_budget`` bytes."""
    if chunk is not None:
        chunk = V.positive_int("chunk", chunk)
    return ModelOptions(memory_budget=memory_budget, chunk=chunk).resolve_chunk(
        policy, n_items, seq_len=seq_len, response_len=response_len,
        n_accumulators=n_accumulators, group_size=group_size)
