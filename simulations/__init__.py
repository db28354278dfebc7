"""The studies, one package per study (installed as ``grpo_theory.studies``).

Each registered study is an entry point of the group ``grpo_theory.studies`` (``pyproject.toml``)
whose package exposes its ``EXPERIMENT``; the library never imports a study.
"""
