"""The ``--model PATH`` options that the language-model studies' Settings share.

A study whose cells can run on a Hugging Face checkpoint directory or a llama.cpp ``.gguf`` file
(:func:`grpo_theory.lm.from_pretrained`) derives its frozen ``Settings`` dataclass from
:class:`ModelSettings`, so the five fields, their checks and their documentation are written once.
The fields are keyword-only: a study's own fields keep their positions, and the CLI sets them with
``dataclasses.replace(settings, model=path, model_chunk=..., ...)``. The four fields that say
how a checkpoint is run are handed to the library as one
:class:`grpo_theory.lm.budget.options.ModelOptions` (:attr:`ModelSettings.model_options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_theory.lm.checkpoints import absolute_path, check_model_options
from grpo_theory.lm import ModelOptions


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """Where a study's policy comes from, and how a checkpoint's per-sample scores are held.

    Attributes:
        model: a Hugging Face checkpoint directory or ``.gguf`` file, stored as an absolute path
            (``~`` expanded); None: the package's warm-up policies.
        model_chunk: per-sample scores held at once, each a parameter-sized vector (an integer
            >= 1); None: the largest that fits in ``model_memory_budget``.
        model_memory_budget: bytes the per-sample scores may use (an integer >= 1); None: half
            the memory available where the cell runs.
        model_dtype: the checkpoint's parameter and compute dtype, ``float32`` or ``bfloat16``.
        model_pad_id: the token id that left-pads prompts and fills responses after EOS (an
            integer >= 0); None: the checkpoint's pad token, else its first EOS id.

    A subclass that checks fields of its own calls ``super().__post_init__()`` first. Bad
    values raise a ``ValueError`` naming the field.
    """

    model: str | None = None
    model_chunk: int | None = None
    model_memory_budget: int | None = None
    model_dtype: str = "float32"
    model_pad_id: int | None = None

    def __post_init__(self):
        check_model_options(self)
        if self.model is not None:
            object.__setattr__(self, "model", absolute_path(self.model))

    @property
    def model_options(self) -> ModelOptions:
        """The checkpoint's run options as the library's one record (budget, chunk, dtype, pad)."""
        return ModelOptions(memory_budget=self.model_memory_budget, chunk=self.model_chunk,
                            dtype=self.model_dtype, pad_id=self.model_pad_id)
