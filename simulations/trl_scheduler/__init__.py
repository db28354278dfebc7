"""Does acting pay? TRL's fixed group size against :class:`~grpo_theory.torch.GroupSizeScheduler`
at equal completions generated, in real ``trl.GRPOTrainer`` runs of a tiny Llama on CPU
(standalone: ``python -m grpo_theory.studies.trl_scheduler``; needs the ``torch`` extra)."""
