"""Does acting pay? At equal completions generated, in real ``trl.GRPOTrainer`` runs of a tiny
Llama on CPU (standalone; needs the ``torch`` extra): TRL's fixed group size against
:class:`~grpo_theory.torch.GroupSizeScheduler` (``python -m grpo_theory.studies.trl_scheduler``,
:mod:`.study`), and uniform group sizes against per-prompt pass-rate allocations through
:class:`~grpo_theory.torch.RolloutAllocator`
(``python -m grpo_theory.studies.trl_scheduler.allocation``, :mod:`.allocation`)."""
