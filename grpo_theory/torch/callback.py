r"""``GroupSizeAdvisor``: the advisor inside ``trl.GRPOTrainer`` (a ``transformers.TrainerCallback``).

::

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...)
    trainer.add_callback(GroupSizeAdvisor(trainer, every=10))
    trainer.train()   # logs advisor/c1, advisor/c2, advisor/c3, advisor/g_star, advisor/recommended_G ...

On optimisation steps 1, 1 + ``every``, ... the callback estimates c1, c2, c3 and G* from the
completions that step trains on (no extra generation; :mod:`grpo_theory.torch.schedule` for
gradient accumulation, ``steps_per_generation`` and ``num_iterations``): it wraps, on this
trainer instance only, ``_calculate_rewards`` (to keep the rewards: ``nansum(rewards_per_func * reward_weights)``,
TRL's ``multi_objective_aggregation="sum_then_normalize"``) and ``_generate_and_score_completions``
(whose output holds the left-padded ``prompt_ids``/``prompt_mask`` and the ``completion_ids``/
``completion_mask`` of the generation batch, ``num_generations`` consecutive rows per prompt).
The estimate runs in ``on_pre_optimizer_step`` (after the step's micro-batches, before its
update), at the parameters that generated the completions, so the scores are the policy's own.
Each logged ``advisor/*`` value is that of one estimate, the latest of TRL's logging window
(TRL's ``log`` averages each ``_metrics`` list over the window: the callback keeps one value in
each of its lists, as TRL does for ``num_tokens``); ``history`` keeps every estimate. Both are private methods of TRL 1.16.0; a TRL without them is refused
with a ``ValueError`` when the callback is made.

Conventions of TRL 1.16.0 (``trl/trainer/grpo_trainer.py``; checked in the tests):

* ``scale_rewards`` ("group" default, "batch", "none"; True/False mean "group"/"none") selects the
  advantage; the package's preset is ``grpo_theory.core.frameworks.preset("trl",
  "scale_rewards=<value>")`` (``grpo_std_trl``, ``grpo_std_trl_batch``, ``grpo_mean``), reported as
  :attr:`GroupSizeAdvisor.preset`. The constants themselves do not depend on it.
* ``loss_type``: "dapo" (default), "bnpo", "dr_grpo", "cispo", "vespo" divide the summed token
  losses by a count common to the whole batch, "luspo" sums each sequence: each sequence's score
  enters as ``grad log pi(y|x)`` times a common factor, which scales c1, c2, c3 alike and leaves
  G* unchanged; the scores are the plain ``grad log pi(y|x)``. "grpo" and "sapo" divide each
  sequence by its own number of completion tokens ``L``: the statistics are then those of the
  weighted score ``grad log pi(y|x) / L`` (``sequence_weights = 1/L``), which is what is trained
  (a length-weighted score is not a true score, ``E[s/L | x] != 0`` in general, so read c2 as the
  statistic of that weighting).
* TRL's loss forward passes no ``position_ids`` (positions 0..T-1 over the left padding) where
  ``generate`` and :func:`grpo_theory.torch.sequence_log_probs` number real tokens from 0: with
  rotary embeddings only position differences enter attention, so the log-probabilities agree.
* ``num_iterations > 1`` reuses a generation batch; the statistics hold for its first update
  (:mod:`grpo_theory.torch.schedule`).
* Under DDP (``torchrun``, ``accelerate launch``) the step's rows of every process are gathered,
  the estimate runs once on the main process and its values are logged on every process
  (:mod:`grpo_theory.torch.distributed`); FSDP, DeepSpeed and Megatron-LM are refused.
* The budget is the number of completions per optimisation step,
  ``per_device_train_batch_size * gradient_accumulation_steps * num_processes``; B = budget / G.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from transformers import TrainerCallback

from grpo_theory import _validation as V
from grpo_theory.advisor import MIN_PROMPTS, MIN_SAMPLES
from grpo_theory.core import preset as framework_preset

from . import _trl as TRL
from ._checks import ALLOCATOR_MARK, check_causal
from .distributed import check_distributed, gather_rollouts, on_main
from .estimate import estimate_from_torch_rollouts
from .layers import check_trainable_layers
from .schedule import Schedule, pool_batches


LOGGED = ("c1", "c2", "c3", "g_star", "g_star_low", "g_star_high", "recommended_G",
          "noise_scale", "noise_scale_low", "noise_scale_high",
          "zero_variance_share", "mse_ratio_grpo_oracle", "budget", "group_size")
"""The metrics logged (each prefixed "advisor/")."""
_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
#: loss types whose token losses are divided by each sequence's own length
_PER_SEQUENCE = ("grpo", "sapo")
#: loss types whose normaliser is common to the batch (or absent)
_COMMON = ("dapo", "bnpo", "dr_grpo", "cispo", "vespo", "luspo")


def trl_preset(scale_rewards) -> str:
    """The package's advantage preset of TRL's ``scale_rewards`` option.

    Args:
        scale_rewards: "group", "batch", "none", True ("group") or False ("none").

    Returns:
        ``"grpo_std_trl"``, ``"grpo_std_trl_batch"`` or ``"grpo_mean"``.
    """
    value = ({True: "group", False: "none"}[scale_rewards] if isinstance(scale_rewards, bool)
             else scale_rewards)
    if value not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be 'group', 'batch', 'none', True or False, got "
                         f"{scale_rewards!r}")
    return framework_preset("trl", f"scale_rewards={value}")


def trl_sequence_weighting(loss_type: str) -> str:
    """``"length"`` (each score divided by its sequence's token count) for TRL's ``"grpo"`` and
    ``"sapo"`` loss types, ``"none"`` (a factor common to the batch) for the others."""
    if loss_type in _PER_SEQUENCE:
        return "length"
    if loss_type in _COMMON:
        return "none"
    raise ValueError(f"loss_type must be one of {sorted(_PER_SEQUENCE + _COMMON)}, got "
                     f"{loss_type!r}")


class GroupSizeAdvisor(TrainerCallback):
    """Estimate and log c1, c2, c3, G* and the recommended group size during GRPO training.

    Args:
        trainer: the ``trl.GRPOTrainer`` (TRL's convention for callbacks that need the trainer:
            ``trainer.add_callback(GroupSizeAdvisor(trainer, every=K))``).
        every: estimate on optimisation steps 1, 1 + K, 1 + 2K, ... (K >= 1; with a
            generation batch feeding several steps, on the first step of each batch that feeds
            one of these, :func:`grpo_theory.torch.schedule.estimated_steps`).
        budget: completions per optimisation step for the recommendation; default the
            trainer's own (module docstring).
        weighting: ``"auto"`` (from the trainer's ``loss_type``, :func:`trl_sequence_weighting`),
            ``"none"`` or ``"length"``.
        alpha: level of the G* interval (0.05: 95%).
        store_means: see :func:`grpo_theory.torch.score_statistics`.

    Attributes:
        preset: the package's advantage preset of the trainer's ``scale_rewards``.
        weighting: the sequence weighting used.
        history: one dict per estimate (``step`` and the :data:`LOGGED` values, ``preset``).
        last_estimate: the last :class:`grpo_theory.advisor.ScalingEstimate`.
    """

    def __init__(self, trainer, *, every: int = 10, budget: int | None = None,
                 weighting: str = "auto", alpha: float = 0.05, store_means: bool | None = None):
        self.every = V.positive_int("every", every)
        self.alpha = V.real_scalar("alpha", alpha, positive=True)
        if not self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1) (0.05: a 95% interval), got {alpha!r}")
        self.store_means = None if store_means is None else V.boolean("store_means",
                                                                      store_means)
        if not isinstance(weighting, str):
            raise ValueError(f"weighting must be 'auto', 'none' or 'length', got {weighting!r}")
        for name in (TRL.GENERATE_AND_SCORE, TRL.CALCULATE_REWARDS, TRL.METRICS,
                     "num_generations", "scale_rewards", "loss_type", "accelerator", "args",
                     "reward_weights", "temperature", "state", "model", "num_iterations",
                     "callback_handler"):
            if not hasattr(trainer, name):
                raise ValueError(f"trainer must be a trl.GRPOTrainer (TRL 1.16): it has no "
                                 f"{name!r}; this TRL version is not supported by "
                                 f"GroupSizeAdvisor")
        if trainer.__dict__.get(ALLOCATOR_MARK) is not None:
            raise ValueError("GroupSizeAdvisor cannot run beside the trainer's RolloutAllocator "
                             "(its groups have unequal sizes; the advisor assumes equal ones)")
        args = trainer.args
        self.group_size = V.integer("trainer.num_generations", trainer.num_generations)
        if self.group_size < MIN_SAMPLES:
            raise ValueError(f"GroupSizeAdvisor needs num_generations >= {MIN_SAMPLES} (the "
                             f"advisor's U-statistics use 3 distinct completions per prompt), "
                             f"got {self.group_size}")
        self.schedule = Schedule(args.gradient_accumulation_steps, args.steps_per_generation,
                                 trainer.num_iterations, self.every)
        rows = int(args.generation_batch_size) * self.schedule.batches_per_step
        if rows // self.group_size < MIN_PROMPTS:
            raise ValueError(f"GroupSizeAdvisor needs >= {MIN_PROMPTS} prompts per estimate, got "
                             f"generation_batch_size {args.generation_batch_size} x "
                             f"{self.schedule.batches_per_step} batch(es) / num_generations "
                             f"{self.group_size}; raise per_device_train_batch_size or "
                             f"gradient_accumulation_steps")
        check_distributed(trainer.accelerator)
        if getattr(trainer, "multi_objective_aggregation", "sum_then_normalize") != \
                "sum_then_normalize":
            raise ValueError("GroupSizeAdvisor needs multi_objective_aggregation="
                             "'sum_then_normalize' (the reward is the weighted sum of the reward "
                             "functions)")
        own = (int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps)
               * int(trainer.accelerator.num_processes))
        self.budget = V.integer("budget", own if budget is None else budget, 2)
        V.real_scalar("trainer.temperature", trainer.temperature, positive=True)
        check_causal(trainer.model)
        check_trainable_layers(trainer.model)  # a PEFT setup the score pass cannot follow
        if weighting == "auto":
            weighting = trl_sequence_weighting(trainer.loss_type)
        if weighting not in ("none", "length"):
            raise ValueError(f"weighting must be 'auto', 'none' or 'length', got {weighting!r}")
        self.weighting = weighting
        self.preset = trl_preset(trainer.scale_rewards)
        self.trainer = trainer
        self.history: list[dict] = []
        self.last_estimate = None
        self.last_rollouts = None
        self._rewards = None
        self._pending = []  # (output, rewards) of the generation batches of the current step
        gen, calc = TRL.generate_and_score(trainer), TRL.calculate_rewards(trainer)

        def calculate_rewards(*a, **k):
            rpf = calc(*a, **k)
            w = trainer.reward_weights.to(rpf.device)
            self._rewards = (rpf * w.unsqueeze(0)).nansum(dim=1)
            self._rewards[torch.isnan(rpf).all(dim=1)] = torch.nan
            return rpf

        def generate_and_score(*a, **k):
            out = gen(*a, **k)
            if trainer.model.training and self.schedule.due(trainer.state.global_step):
                if self not in trainer.callback_handler.callbacks:
                    raise ValueError("GroupSizeAdvisor estimates in on_pre_optimizer_step: add "
                                     "it with trainer.add_callback(advisor)")
                self._pending.append((out, self._rewards))
            return out

        TRL.set_calculate_rewards(trainer, calculate_rewards)
        TRL.set_generate_and_score(trainer, generate_and_score)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        """Estimate from the generation batches this step trains on (pooled, and gathered
        across processes), before its update."""
        if self._pending:
            pending, self._pending = self._pending, []
            acc = self.trainer.accelerator
            if acc.num_processes > 1:  # the rows of every process, in the rewards' order
                pending = [(dict(zip(_KEYS, gather_rollouts(acc, *(out[k] for k in _KEYS)))),
                            z) for out, z in pending]
            out, z = pool_batches(pending)
            rec = on_main(acc, lambda: self._estimate(out, z))
            if rec is not None:
                self._log(rec)

    def _log(self, rec):
        """Log one estimate on every process (the same values: TRL's main process reports)."""
        metrics = TRL.train_metrics(self.trainer)
        for k, v in rec.items():  # one value per list: TRL's window mean is this estimate
            metrics[f"advisor/{k}"] = [float(v)]
        self.history.append(dict(step=int(self.trainer.state.global_step) + 1, **rec,
                                 preset=self.preset, weighting=self.weighting))

    def _estimate(self, out, z):
        """The logged values from the step's rows (None: no estimate this step)."""
        G = self.group_size
        x, xm = out["prompt_ids"], out["prompt_mask"]
        y, ym = out["completion_ids"], out["completion_mask"]
        N = y.shape[0]
        if z is None or z.shape[0] != N:
            got = None if z is None else z.shape[0]
            raise ValueError(f"GroupSizeAdvisor: the rewards of the batch ({got} rows) do not "
                             f"match its {N} completions")
        if bool(torch.isnan(z).any()):
            warnings.warn(f"GroupSizeAdvisor: no estimate at step "
                          f"{self.trainer.state.global_step + 1}: some completions have no reward "
                          f"(every reward function returned None)", RuntimeWarning, stacklevel=2)
            return None
        m = N // G
        xs = x * xm  # a group split across processes may be padded with different ids
        if m * G != N or not (torch.equal(xs[::G].repeat_interleave(G, 0), xs)
                              and torch.equal(xm[::G].repeat_interleave(G, 0), xm)):
            raise ValueError("GroupSizeAdvisor: the generation batch is not made of groups of "
                             "num_generations consecutive rows sharing a prompt")
        zz = z.detach().double().cpu().numpy().reshape(m, G)
        yy, mm = y.reshape(m, G, -1), ym.reshape(m, G, -1)
        w = None
        if self.weighting == "length":
            w = (1.0 / mm.sum(-1).clamp(min=1).double()).cpu().numpy()
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        rollouts = dict(prompt_ids=x[::G], prompt_mask=xm[::G], response_ids=yy,
                        response_mask=mm, rewards=zz, sequence_weights=w,
                        temperature=float(self.trainer.temperature))
        with torch.enable_grad():
            est = estimate_from_torch_rollouts(
                model, rollouts["prompt_ids"], yy, zz, prompt_mask=rollouts["prompt_mask"],
                response_mask=mm, sequence_weights=w, temperature=rollouts["temperature"],
                alpha=self.alpha, store_means=self.store_means)
        B = self.budget / G
        lo, hi = est.g_star_ci
        oracle = est.mse(B, G, "oracle")
        same = np.all(zz == zz[:, :1], axis=1)
        G_rec = est.recommended_group_size(self.budget)
        if G_rec is not None:
            recommended = float(G_rec)
        else:  # no between-prompt spread resolved: no recommendation (not the whole budget)
            recommended = math.nan
            warnings.warn(f"step {int(self.trainer.state.global_step) + 1}: c1 is not resolved "
                          f"above 0 (95% interval [{est.c1_ci[0]:.3g}, {est.c1_ci[1]:.3g}]): "
                          "advisor/recommended_G is logged as NaN", stacklevel=2)
        try:
            ns = est.noise_scale(G)
            ns_val, (ns_lo, ns_hi) = ns.value, ns.interval(self.alpha)
        except ValueError:  # ||grad J||^2 not estimated above 0: no noise scale
            ns_val = ns_lo = ns_hi = math.nan
        rec = {"c1": est.c1, "c2": est.c2, "c3": est.c3, "g_star": est.g_star,
               "g_star_low": lo, "g_star_high": hi, "recommended_G": recommended,
               "noise_scale": ns_val, "noise_scale_low": ns_lo, "noise_scale_high": ns_hi,
               "zero_variance_share": float(np.mean(same)),
               "mse_ratio_grpo_oracle": (est.mse(B, G, "grpo") / oracle if oracle > 0
                                         else math.nan),
               "budget": float(self.budget), "group_size": float(G)}
        self.last_estimate, self.last_rollouts = est, rollouts
        return {k: float(v) for k, v in rec.items()}
