"""The score-statistics budget: the per-sample score statistics of a language-model policy and
the memory they may use.

* :mod:`.memory`: bytes per row, the available memory, budgets and the chunk that fits them,
  out-of-memory errors turned into one-line ``ValueError`` messages, rows padded to whole chunks;
* :mod:`.options`: :class:`ModelOptions`, the model options of every caller (dtype, padding,
  chunk, memory budget, stage) and the chunk they resolve to;
* :mod:`.statistics`: the rollout statistics ``(W S, ||s_n||^2)`` by the per-sample route or by
  ghost norms (:func:`lm_rollout_statistics`);
* :mod:`.ghost` and :mod:`.ghost_rule`: the ghost-norm computation of a checkpoint family and
  the rule that picks each layer's route.

This ``__init__`` is the face of :mod:`grpo_theory.lm.budget`: ``__all__`` lists its public
names.
"""

from .memory import (chunk_for_budget, chunk_for_groups, default_memory_budget, format_bytes,
                     ghost_row_bytes,
                     is_out_of_memory, out_of_memory_as_value_error, pad_to_chunk, parse_memory)
from .options import MODEL_DTYPES, PAD_EMBEDDINGS, ModelOptions, resolve_chunk, score_memory
from .statistics import (SCORE_CALLS, ghost_statistics, lm_rollout_statistics,
                         per_sample_statistics)
from .ghost_rule import ROUTES, ghost_route
from .ghost import PureForward, ghost_contractions, ghost_moments, score_dots

# the names the layers above use beside the ones listed first (one import path: this face)
from .memory import HINT

__all__ = ["chunk_for_budget", "chunk_for_groups", "default_memory_budget", "format_bytes", "ghost_row_bytes",
           "is_out_of_memory", "out_of_memory_as_value_error", "pad_to_chunk", "parse_memory",
           "MODEL_DTYPES", "PAD_EMBEDDINGS", "ModelOptions", "resolve_chunk", "score_memory",
           "SCORE_CALLS", "ghost_statistics", "lm_rollout_statistics", "per_sample_statistics",
           "ROUTES", "ghost_route", "PureForward", "ghost_contractions", "ghost_moments",
           "score_dots"]
__all__ += ["HINT"]
