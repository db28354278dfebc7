"""The registry of model families (:class:`~grpo_theory.lm.families.spec.ModelSpec`), keyed by name.

``family("llama")`` is a family by name or by a ``config.json`` ``model_type``;
:func:`family_of_gguf` by a GGUF file's ``general.architecture``; :func:`family_of_arch` the
family of a checked architecture dict. Every loader, the memory model and the ghost code look a
family up here; :func:`register` adds one (``docs/adding-an-architecture.md``).
"""

from __future__ import annotations

from .qwen2 import LLAMA, QWEN2
from .spec import ModelSpec


FAMILIES: dict = {}
"""Every registered model family: its name -> its
:class:`~grpo_theory.lm.families.spec.ModelSpec`."""


def register(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to the registry (its name, model types and GGUF architectures unused).

    Raises:
        ValueError: ``spec`` is not a ModelSpec, or a name, ``model_type`` or GGUF
            architecture is already registered.
    """
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    taken = [k for k in (spec.name,) + tuple(spec.model_types) if k in FAMILIES
             or k in model_types()]
    taken += [k for k in spec.gguf_architectures if k in gguf_architectures()]
    if taken:
        raise ValueError(f"spec {spec.name!r}: {', '.join(map(repr, taken))} already "
                         f"registered")
    FAMILIES[spec.name] = spec
    return spec


def model_types() -> tuple:
    """Every ``config.json`` ``model_type`` a registered family reads."""
    return tuple(t for s in FAMILIES.values() for t in s.model_types)


def gguf_architectures() -> tuple:
    """Every GGUF ``general.architecture`` a registered family reads."""
    return tuple(t for s in FAMILIES.values() for t in s.gguf_architectures)


def family(name) -> ModelSpec:
    """The family named ``name`` or reading ``model_type`` ``name``.

    Raises:
        ValueError: naming ``model_type`` and the supported values.
    """
    if isinstance(name, str):
        if name in FAMILIES:
            return FAMILIES[name]
        for s in FAMILIES.values():
            if name in s.model_types:
                return s
    raise ValueError(f"model_type must be one of {', '.join(model_types())}, got {name!r}")


def family_of_gguf(architecture) -> ModelSpec | None:
    """The family reading GGUF ``general.architecture`` ``architecture``, or None."""
    return next((s for s in FAMILIES.values() if architecture in s.gguf_architectures), None)


def family_of_arch(arch: dict, default: str = "llama") -> ModelSpec:
    """The family of a checked architecture: by its ``model_type``, else ``default`` (a
    dict of sizes alone, as :func:`grpo_theory.lm.budget.memory.ghost_row_bytes` accepts)."""
    mt = arch.get("model_type", default) if isinstance(arch, dict) else default
    return family(mt)


for _s in (QWEN2, LLAMA):
    register(_s)
