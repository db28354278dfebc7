r"""``RolloutAllocator``: a per-prompt group size G_i inside TRL, through its largest-G layout.

::

    trainer = GRPOTrainer(..., args=GRPOConfig(num_generations=8, ...))   # W = 8, the widest G_i
    allocator = RolloutAllocator(trainer, PassRateSizes("knapsack"), budget=40,
                                 weighting="prompt")
    trainer.add_callback(allocator)
    trainer.train()   # logs allocation/rollouts, allocation/{mean,min,max}_group_size,
                      # allocation/prompt_mean_reward

TRL 1.16.0 lays a generation batch out as B prompts times ``num_generations`` = W consecutive rows
(its ``RepeatSampler``) and groups rewards with ``rewards.view(-1, W)``. This module keeps that
layout and decides, before each generation batch is generated, how many of a prompt's W rows are
real: G_i with ``min_size <= G_i <= W`` and ``sum_i G_i <= budget``. The other rows are masked,
as C-GRPO pads a stopped prompt (``trl-cgrpo`` 0.2.0):

* **not generated**: the batch's ``_generate_single_turn`` is called on the real rows only; a
  masked row gets the one-token completion ``[eos]``. The rollouts spent are sum_i G_i, not B W
  (the training forward and backward passes still run over all B W rows).
* **not scored**: the reward functions see the real rows only; a masked row's rewards are NaN,
  TRL's mark of an unscorable completion, which its ``nanmean`` / ``nanstd`` baseline leaves out
  and whose advantage it sets to 0. So each group's advantage is TRL's, over its G_i real rows.
* **out of every normaliser**: a masked row's ``completion_mask`` is 0 (it leaves the token counts
  of ``bnpo`` / ``dapo``, ``num_items_in_batch`` recounted), and the advantages are rescaled so
  that the row-normalised losses (``grpo``, ``dr_grpo``, whose mean runs over all B W rows of a
  micro-batch) have the weighting below.

Two weightings of the step's gradient, with ``S_r`` the sum of row r's token scores, ``L_r`` its
tokens, ``L`` the ``max_completion_length``, ``T`` the batch's real tokens and ``N = sum_i G_i``:

* ``"trl"``: TRL's loss on the real rows alone, as if it laid out groups of unequal size, with
  A_r TRL's advantage in its group: ``(1 / N) sum_r A_r S_r / L_r`` (``grpo``),
  ``(1 / (N L)) sum_r A_r S_r`` (``dr_grpo``), ``(1 / T) sum_r A_r S_r`` (``bnpo``, ``dapo``;
  per micro-batch for ``bnpo``); the row-normalised losses get advantages times B W / N. Prompts
  then weigh G_i / N (or their tokens) and the mean-centred advantage carries (G_i - 1) / G_i: a
  prompt weighting that depends on the allocation, a bias that
  :func:`grpo_theory.allocation.audit` computes exactly.
* ``"prompt"``: each prompt's leave-one-out estimate, prompts weighted equally,
  ``(1 / B) sum_i (1 / G_i) sum_j (r_ij - mean_{k != j} r_ik) h_ij`` with ``h = S / L_r``
  (``grpo``) or ``S / L`` (``dr_grpo``) (advantages
  ``(r - mean_i) W / (G_i - 1)``; ``scale_rewards="none"``, ``loss_type`` ``grpo`` or
  ``dr_grpo``). With sizes decided before sampling (every :class:`SizeRule` here decides from
  earlier batches only), its expectation given the sizes is the mean over prompts of
  ``E[h (r - V)]``, V the prompt's mean reward: the same target at every allocation (the policy
  gradient itself, over a constant, with ``dr_grpo``, whose ``h`` is the sequence score).

Under DDP (``torchrun`` / ``accelerate launch``) process r holds rows
``[r n, (r + 1) n)`` of the generation batch, n = ``generation_batch_size / num_processes`` (a
group may be split between processes). The batch's rows are gathered, the main process decides
the sizes and broadcasts them, and each process generates and scores only its own real rows
(TRL's ``_calculate_rewards`` is called on them without its final ``gather``; the allocator
gathers each process's full block, masked rows NaN, in TRL's order). ``num_items_in_batch`` counts
the real tokens of every process, as TRL's does, so ``dapo`` and the row losses train the same
estimator as one process on the same rows; ``bnpo`` normalises by each process's micro-batch
tokens, as TRL does under DDP. FSDP, DeepSpeed and Megatron-LM are refused (their forward passes
are collective, and the processes generate different numbers of rows).

TRL's own generation only (no vLLM, continuous batching, ``rollout_func``, tools or
environments), text prompts, ``beta = 0`` and no entropy bonus (terms not proportional to the
advantage, which the rescaling would leave unweighted); refused otherwise when the callback is
made. Not with :class:`~grpo_theory.torch.GroupSizeAdvisor` or the scheduler, which assume equal
groups.
"""

from __future__ import annotations

import json
import math
import numbers

import numpy as np
import torch
from transformers import TrainerCallback

from grpo_theory import _validation as V
from grpo_theory.allocation import PassRateRule, Rule, pass_rate_allocation

from . import _trl as TRL
from ._checks import ALLOCATOR_MARK
from .distributed import check_distributed, on_main


#: the losses linear in the advantage with a known normaliser: row mean or token count
ROW_LOSSES, TOKEN_LOSSES = ("grpo", "dr_grpo"), ("bnpo", "dapo")


def _integral(g) -> bool:
    """An integer or an integral float (``3.0``); not a bool, a string or ``2.7``."""
    if isinstance(g, (bool, np.bool_)) or not isinstance(g, (numbers.Real, np.number)):
        return False
    return math.isfinite(float(g)) and float(g) == int(g)


def prompt_key(row: dict) -> str:
    """A prompt's identity: its dataset row's ``prompt`` as canonical JSON."""
    return json.dumps(row.get("prompt"), sort_keys=True, default=str)


class SizeRule:
    """How many completions each prompt of a generation batch gets (the base class).

    A rule decides from what it has seen before the batch, never from the batch's own samples
    (which would bias each prompt's estimate); :meth:`observe` is how it sees a batch after.
    """

    def sizes(self, prompts: list, budget: int, width: int, min_size: int) -> list[int]:
        """G_i for each prompt (its dataset row), ``min_size <= G_i <= width``,
        ``sum_i G_i <= budget``."""
        raise NotImplementedError

    def observe(self, prompts: list, sizes: list[int], rewards: list[np.ndarray]) -> None:
        """A generation batch's prompts, sizes and real rows' rewards (one array per prompt),
        after scoring. The default keeps nothing."""


class UniformSizes(SizeRule):
    """``budget // B`` each, the remainder one each to the first prompts (the control arm).

    >>> UniformSizes().sizes([{}] * 3, budget=10, width=4, min_size=2)
    [4, 3, 3]
    """

    def sizes(self, prompts, budget, width, min_size):
        q, extra = divmod(int(budget), len(prompts))
        return [min(width, q + (i < extra)) for i in range(len(prompts))]


class FunctionSizes(SizeRule):
    """Sizes from ``fn(prompts, budget, width, min_size)``: predictions the user owns (a pass-rate
    model, an earlier run's statistics)."""

    def __init__(self, fn):
        if not callable(fn):
            raise ValueError(f"FunctionSizes needs a callable, got {fn!r}")
        self.fn = fn

    def sizes(self, prompts, budget, width, min_size):
        return self.fn(prompts, budget, width, min_size)


class PassRateSizes(SizeRule):
    r"""Sizes from each prompt's pass rate on its earlier visits,
    ``p = (successes + prior w) / (visits' completions + w)``, by
    :func:`grpo_theory.allocation.pass_rate_allocation` (``"knapsack"``: Knapsack RL's
    ``v(G, p) = (1 - p^G - (1 - p)^G) p (1 - p)^2``; ``"vip"``: G proportional to
    ``sqrt(p (1 - p))``; ``"sgpo"``: to 1 / p). A prompt not seen before has p = ``prior``.
    Rewards must lie in [0, 1] (a pass rate); NaN rewards are left out.

    Args:
        method: ``"knapsack"``, ``"vip"`` or ``"sgpo"``, or the allocation package's rule
            value (:func:`grpo_theory.allocation.pass_rate_rule`, the same rule the exact audit
            and the JAX training loops run; the allocator's budget, width and least size
            apply).
        prior: the pass rate of an unseen prompt, in [0, 1].
        prior_weight: w, the prior's weight in completions (>= 0).

    >>> rule = PassRateSizes(prior=0.5)
    >>> rule.observe([{"prompt": "a"}], [4], [np.array([1.0, 1.0, 1.0, 1.0])])
    >>> rule.pass_rate({"prompt": "a"}), rule.pass_rate({"prompt": "b"})
    (0.9, 0.5)
    >>> rule.sizes([{"prompt": "a"}, {"prompt": "b"}], budget=8, width=6, min_size=2)
    [2, 6]
    """

    def __init__(self, method="knapsack", prior: float = 0.5, prior_weight: float = 1.0):
        if isinstance(method, PassRateRule):
            method = method.method
        if method not in ("knapsack", "vip", "sgpo"):
            raise ValueError(f"method must be 'knapsack', 'vip' or 'sgpo', got {method!r}")
        self.method = method
        self.prior = V.real_scalar("prior", prior)
        if not 0 <= self.prior <= 1:
            raise ValueError(f"prior must be a pass rate in [0, 1], got {prior!r}")
        self.prior_weight = V.real_scalar("prior_weight", prior_weight)
        if self.prior_weight < 0:
            raise ValueError(f"prior_weight must be >= 0, got {prior_weight!r}")
        self.counts: dict[str, list[float]] = {}  # prompt key -> [successes, completions]

    def pass_rate(self, prompt: dict) -> float:
        """The prompt's smoothed pass rate from its earlier visits."""
        s, n = self.counts.get(prompt_key(prompt), (0.0, 0.0))
        if n + self.prior_weight == 0:
            return self.prior
        return (s + self.prior * self.prior_weight) / (n + self.prior_weight)

    def sizes(self, prompts, budget, width, min_size):
        p = np.array([self.pass_rate(x) for x in prompts], dtype=float)
        return list(pass_rate_allocation(p, budget, method=self.method, min_size=min_size,
                                         max_size=width).sizes)

    def observe(self, prompts, sizes, rewards):
        for x, z in zip(prompts, rewards):
            z = np.asarray(z, dtype=float)
            z = z[~np.isnan(z)]
            if np.any((z < 0) | (z > 1)):
                raise ValueError(f"PassRateSizes needs rewards in [0, 1] (a pass rate), got "
                                 f"{z.tolist()!r}; use FunctionSizes for other rewards")
            c = self.counts.setdefault(prompt_key(x), [0.0, 0.0])
            c[0] += float(z.sum())
            c[1] += float(z.size)


class RuleSizes(PassRateSizes):
    """Sizes from the allocation package's rule value decided before sampling
    (``allocation.fixed(G)``, ``allocation.pass_rate_rule(...)``: the value the exact audit and
    the JAX training loops run), through :meth:`~grpo_theory.allocation.Rule.presampled_sizes`
    with each prompt's pass rate counted as :class:`PassRateSizes` counts it and the allocator's
    budget, width and least size. A rule that decides from the rewards it samples (DAPO's
    dynamic sampling, conformal stopping) is refused by name: TRL generates a batch at once.

    >>> from grpo_theory import allocation
    >>> RuleSizes(allocation.fixed(3)).sizes([{}] * 4, budget=12, width=4, min_size=2)
    [3, 3, 3, 3]
    """

    def __init__(self, rule, prior: float = 0.5, prior_weight: float = 1.0):
        if not isinstance(rule, Rule):
            raise ValueError(f"rule must be an allocation rule (grpo_theory.allocation.Rule), "
                             f"got {rule!r}")
        rule.check_decided_before_sampling()
        super().__init__("knapsack", prior, prior_weight)
        self.rule = rule

    def sizes(self, prompts, budget, width, min_size):
        p = np.array([self.pass_rate(x) for x in prompts], dtype=float)
        return [int(g) for g in self.rule.presampled_sizes(p, budget, width, min_size)]


class RolloutAllocator(TrainerCallback):
    """Per-prompt group sizes in a ``trl.GRPOTrainer`` (module docstring).

    Args:
        trainer: the ``GRPOTrainer`` (before ``train()``); its ``num_generations`` is the width W.
        rule: a :class:`SizeRule`, or an allocation rule decided before sampling
            (``allocation.fixed(G)``, ``allocation.pass_rate_rule(...)``; wrapped in
            :class:`RuleSizes`).
        budget: completions generated per generation batch, ``min_size B <= budget <= B W``.
        weighting: ``"trl"`` or ``"prompt"`` (module docstring).
        min_size: the least G_i (>= 2: a leave-one-out baseline needs two).

    Attributes:
        history: one dict per generation batch (``step``, the 1-based optimisation step it is
            generated on; ``sizes``; ``rollouts``; ``prompt_mean_reward``, the mean over its
            prompts of each prompt's mean reward: TRL's logged ``reward`` weighs prompts by
            G_i).
    """

    def __init__(self, trainer, rule: SizeRule, *, budget: int, weighting: str = "trl",
                 min_size: int = 2):
        if isinstance(rule, Rule):
            rule = RuleSizes(rule)
        if not isinstance(rule, SizeRule):
            raise ValueError(f"rule must be a SizeRule (UniformSizes, PassRateSizes, "
                             f"FunctionSizes) or an allocation rule decided before sampling "
                             f"(allocation.fixed(G), allocation.pass_rate_rule(...)), got {rule!r}")
        if weighting not in ("trl", "prompt"):
            raise ValueError(f"weighting must be 'trl' or 'prompt', got {weighting!r}")
        self.rule, self.weighting = rule, weighting
        self._refuse(trainer)
        W = int(trainer.num_generations)
        rows = int(trainer.args.generation_batch_size)
        self.width, self.prompts = W, rows // W
        acc = trainer.accelerator
        self.n_local, self.rank = rows // acc.num_processes, acc.process_index
        self.min_size = V.integer("min_size", min_size, 2)
        if self.min_size > W:
            raise ValueError(f"min_size {min_size} exceeds num_generations {W}, the layout's "
                             f"width")
        lo, hi = self.min_size * self.prompts, rows
        self.budget = V.integer("budget", budget, 1)
        if not lo <= self.budget <= hi:
            raise ValueError(f"budget must lie in [{lo}, {hi}] (min_size {self.min_size} to "
                             f"num_generations {W} completions for each of the {self.prompts} "
                             f"prompts of a generation batch), got {budget!r}")
        if weighting == "prompt":
            if trainer.scale_rewards != "none":
                raise ValueError("weighting='prompt' needs scale_rewards='none' (the "
                                 "leave-one-out advantage of the raw rewards), got "
                                 f"scale_rewards={trainer.scale_rewards!r}")
            if trainer.loss_type not in ROW_LOSSES:
                raise ValueError(f"weighting='prompt' needs loss_type in {ROW_LOSSES} (a row "
                                 f"normaliser; token-normalised losses weight prompts by their "
                                 f"tokens), got {trainer.loss_type!r}")
            if trainer.multi_objective_aggregation != "sum_then_normalize":
                raise ValueError("weighting='prompt' needs multi_objective_aggregation="
                                 "'sum_then_normalize'")
        self.trainer = trainer
        self.history: list[dict] = []
        self._mask = None
        self._rewards = None
        self._wrap(trainer)
        trainer.__dict__[ALLOCATOR_MARK] = self  # a GroupSizeAdvisor made later refuses it

    @staticmethod
    def _refuse(trainer):
        from .callback import GroupSizeAdvisor
        from .scheduler import GroupSizeScheduler

        for name in (TRL.GENERATE_AND_SCORE, TRL.GENERATE_SINGLE_TURN,
                     TRL.CALCULATE_REWARDS, "num_generations", "accelerator", "args", "use_vllm",
                     "loss_type", "scale_rewards", "beta", "callback_handler", "reward_funcs",
                     "eos_token_ids"):
            if not hasattr(trainer, name):
                raise ValueError(f"trainer must be a trl.GRPOTrainer (TRL 1.16): it has no "
                                 f"{name!r}; RolloutAllocator does not support it")
        if trainer.__dict__.get(ALLOCATOR_MARK) is not None:
            raise ValueError("trainer already has a RolloutAllocator (one per trainer)")
        check_distributed(trainer.accelerator, "RolloutAllocator",
                          "each process generates only its real rows, so the processes' forward "
                          "passes differ in number and shape")
        checks = [(trainer.use_vllm, "use_vllm=False (vLLM requests n completions per "
                                     "prompt; per-prompt n is not wired)"),
                  (trainer.use_transformers_continuous_batching,
                   "use_transformers_continuous_batching=False"),
                  (trainer.rollout_func is not None, "no rollout_func (it generates itself)"),
                  (bool(trainer.tools), "no tools"),
                  (trainer.environment_factories is not None, "no environment_factory"),
                  (trainer.beta != 0.0, "beta=0 (the KL term is not proportional to the "
                                        "advantage)"),
                  (TRL.entropy_bonus_enabled(trainer), "entropy_coef=0 (no entropy bonus)"),
                  (trainer.loss_type not in ROW_LOSSES + TOKEN_LOSSES,
                   f"loss_type in {ROW_LOSSES + TOKEN_LOSSES} (got {trainer.loss_type!r})")]
        for bad, fix in checks:
            if bad:
                raise ValueError(f"RolloutAllocator needs {fix}")
        import trl
        import trl.trainer.grpo_trainer as grpo

        if not callable(getattr(grpo, "gather", None)):
            raise ValueError(f"RolloutAllocator needs TRL's GRPOTrainer to gather rewards through "
                             f"its module's gather (TRL 1.16.0 does); trl {trl.__version__} "
                             f"does not")
        for cb in trainer.callback_handler.callbacks:
            if isinstance(cb, (GroupSizeAdvisor, GroupSizeScheduler)):
                raise ValueError(f"RolloutAllocator cannot run beside {type(cb).__name__}, "
                                 f"which assumes equal groups")

    def _wrap(self, tr):
        gen, single, calc = (TRL.generate_and_score(tr), TRL.generate_single_turn(tr),
                             TRL.calculate_rewards(tr))
        eos = int(tr.eos_token_ids[0])

        def generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, *a,
                                 **k):
            m = self._mask
            if m is None:
                return single(prompt_ids, images, multimodal_fields, num_generations, *a, **k)
            if images is not None or multimodal_fields:
                raise ValueError("RolloutAllocator supports text prompts only (this batch has "
                                 "images or multimodal fields)")
            idx = m.nonzero().flatten().tolist()
            ids, lps = (single([prompt_ids[i] for i in idx], images, multimodal_fields,
                               num_generations, *a, **k) if idx else ([], None))
            out_ids = [[eos] for _ in prompt_ids]
            out_lps = None if lps is None else [[0.0] for _ in prompt_ids]
            for j, i in enumerate(idx):
                out_ids[i] = ids[j]
                if lps is not None:
                    out_lps[i] = lps[j]
            return out_ids, out_lps

        def calculate_rewards(inputs, prompts, completions, completion_ids_list):
            m = self._mask
            if m is None:
                return calc(inputs, prompts, completions, completion_ids_list)
            idx = m.nonzero().flatten().tolist()
            device = tr.accelerator.device
            local = torch.full((len(prompts), len(tr.reward_funcs)), math.nan,
                               dtype=torch.float32, device=device)
            if idx:  # this process's real rows, scored without TRL's gather (_trl.ungathered)
                with TRL.ungathered():
                    sub = calc([inputs[i] for i in idx], [prompts[i] for i in idx],
                               [completions[i] for i in idx],
                               [completion_ids_list[i] for i in idx])
                local[m.to(device)] = sub.to(local.dtype)
            full = tr.accelerator.gather(local)  # what TRL's gather returns: process order
            self._rewards = full
            return full

        def generate_and_score(inputs, *a, **k):
            if not tr.model.training:  # evaluation: TRL's own layout
                return gen(inputs, *a, **k)
            prompts, sizes = self._decide(inputs)
            W, n = self.width, self.n_local
            mask = torch.tensor([j < g for g in sizes for j in range(W)])
            self._mask = mask[self.rank * n:(self.rank + 1) * n]  # this process's rows
            try:
                out = gen(inputs, *a, **k)
            finally:
                m, self._mask = self._mask, None
            self._finish(out, m, prompts, sizes)
            return out

        TRL.set_generate_single_turn(tr, generate_single_turn)
        TRL.set_calculate_rewards(tr, calculate_rewards)
        TRL.set_generate_and_score(tr, generate_and_score)

    def _decide(self, inputs):
        """The generation batch's prompts (its rows gathered in process order) and their sizes,
        decided on the main process by the rule and checked there."""
        W, acc = self.width, self.trainer.accelerator
        if len(inputs) != self.n_local:
            raise ValueError(f"RolloutAllocator: a process's generation batch of {len(inputs)} "
                             f"rows, not the {self.n_local} of generation_batch_size "
                             f"{self.prompts * W} over {acc.num_processes} process(es)")
        rows = list(inputs)
        if acc.num_processes > 1:
            from accelerate.utils import gather_object

            rows = gather_object(rows)
        prompts = [rows[i * W] for i in range(self.prompts)]
        for i, x in enumerate(prompts):
            key = prompt_key(x)
            if any(prompt_key(r) != key for r in rows[i * W:(i + 1) * W]):
                raise ValueError("RolloutAllocator: the generation batch is not TRL's layout of "
                                 f"{W} consecutive rows per prompt (was the sampler replaced?)")
        return prompts, on_main(acc, lambda: self._sizes(prompts))

    def _sizes(self, prompts):
        W = self.width
        sizes = self.rule.sizes(prompts, self.budget, W, self.min_size)
        try:
            sizes = list(sizes)
        except TypeError:
            sizes = None
        if sizes is None or not all(_integral(g) for g in sizes):  # 2.7 is not truncated to 2
            raise ValueError(f"{type(self.rule).__name__}.sizes must return integers, got "
                             f"{sizes!r}")
        sizes = [int(g) for g in sizes]
        if (len(sizes) != self.prompts or any(not self.min_size <= g <= W for g in sizes)
                or sum(sizes) > self.budget):
            raise ValueError(f"{type(self.rule).__name__}.sizes returned {sizes}: needs "
                             f"{self.prompts} sizes in [{self.min_size}, {W}] summing to at "
                             f"most the budget {self.budget}")
        return sizes

    def _finish(self, out, m, prompts, sizes):
        """Mask the padding rows out of the loss and weight the advantages (module docstring)."""
        tr, W = self.trainer, self.width
        keep = m.to(out["completion_mask"].device)
        out["completion_mask"][~keep] = 0
        loss_mask = out["completion_mask"]
        if "tool_mask" in out:
            loss_mask = loss_mask * out["tool_mask"]
        # the real tokens of every process, as TRL counts them
        out["num_items_in_batch"] = tr.accelerator.gather(loss_mask.sum()).sum().to(
            out["num_items_in_batch"].dtype)
        N, n = sum(sizes), self.n_local
        G = torch.tensor(sizes, dtype=out["advantages"].dtype,
                         device=out["advantages"].device).repeat_interleave(W)
        G = G[self.rank * n:(self.rank + 1) * n]
        if self.weighting == "prompt":
            factor = W / (G - 1)
        elif tr.loss_type in ROW_LOSSES:
            factor = torch.full_like(G, self.prompts * W / N)
        else:
            factor = torch.ones_like(G)
        out["advantages"] = out["advantages"] * factor * keep.to(G.dtype)
        z = self._rewards
        weights = tr.reward_weights.to(z.device)
        total = (z * weights).nansum(dim=1).where(~torch.isnan(z).all(dim=1), z[:, 0])
        total = total.double().cpu().numpy().reshape(self.prompts, W)
        per_prompt = [total[i, :g] for i, g in enumerate(sizes)]
        self.rule.observe(prompts, sizes, per_prompt)
        means = [float(np.nanmean(z)) if np.isfinite(z).any() else math.nan for z in per_prompt]
        prompt_mean = float(np.nanmean(means)) if np.isfinite(means).any() else math.nan
        step = int(tr.state.global_step) + 1
        self.history.append({"step": step, "sizes": list(sizes), "rollouts": N,
                             "prompt_mean_reward": prompt_mean})
        metrics = TRL.train_metrics(tr)
        metrics["allocation/rollouts"].append(float(N))
        metrics["allocation/prompt_mean_reward"].append(prompt_mean)
        metrics["allocation/mean_group_size"].append(N / self.prompts)
        metrics["allocation/min_group_size"].append(float(min(sizes)))
        metrics["allocation/max_group_size"].append(float(max(sizes)))
