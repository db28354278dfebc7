"""Experiment infrastructure: tidy result tables, figures and the ``grpo-theory`` command."""
