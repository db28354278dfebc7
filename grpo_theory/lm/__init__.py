"""Small language-model validation: arithmetic task, a plain-JAX transformer, the policy
interface, supervised warm-ups, the Figure 4 gradient-MSE study and GRPO training.

This ``__init__`` is the face of :mod:`grpo_theory.lm`: ``__all__`` lists the public names; the
modules below it hold the code (and their less used helpers).

**The reward of this layer** works on token arrays, in JAX:
``reward(tokens, answers) -> (N,) float`` in {0, 1} for responses ``tokens`` (N, R) and integer
answers (N,) (:class:`~grpo_theory.lm.task.TokenReward`: :func:`reward_tokens`, the final-integer
rule; :func:`reward_exact_tokens` compares with canonical targets instead; :func:`reward` picks
one by the task's format). :func:`reward_text` and :func:`reward_answer_text` are the same rules on
decoded text, ``reward(text, answer) -> float`` (:class:`~grpo_theory.lm.task.TextReward`), the
contract of the advisor's rewards.
"""

from . import model, policy, task  # noqa: F401
from .model import ModelConfig, init_params, make_apply, make_sampler, n_params
from .policy import LMPolicy, score_contractions, seq_log_probs, token_log_probs
from .task import (Questions, TaskConfig, TextReward, TokenReward, eval_set, generate_questions,
                   parse_final_integer, reward, reward_answer_text, reward_exact_tokens,
                   reward_text, reward_tokens, train_pool)
from .warmup import WarmupConfig, study_policies, three_policies, train_supervised
from .families import FAMILIES, ModelSpec, TensorSpec, family
from .budget import (ModelOptions, chunk_for_budget, default_memory_budget, ghost_contractions,
                     ghost_moments, ghost_route, lm_rollout_statistics, parse_memory, score_dots)
# Hugging Face checkpoints (Qwen2 / Llama) via tunix; tunix itself is imported on first use
from .checkpoints import (HFPolicy, from_pretrained, load_policy, model_policy, read_config,
                          read_gguf, read_gguf_config)
from .training import (exact_accuracy, lm_rule, predicted_group_size, train_dppo, train_grpo,
                       train_with_rule)

# the names the layers above use beside the ones listed first (one import path: this face)
from .policy import checked_tokens, generic_sample
from .task import RESPONSE_LEN, encode_prompts, integer_answer, target_responses
from .warmup import QUICK_WARMUP

__all__ = [
    # the transformer and its policy
    "ModelConfig", "init_params", "make_apply", "make_sampler", "n_params",
    "LMPolicy", "seq_log_probs", "token_log_probs", "score_contractions",
    # the arithmetic task and its rewards
    "TaskConfig", "Questions", "generate_questions", "eval_set", "train_pool",
    "parse_final_integer", "TokenReward", "TextReward", "reward", "reward_tokens",
    "reward_exact_tokens", "reward_text", "reward_answer_text",
    # checkpoints: Hugging Face, GGUF, a local model by path
    "HFPolicy", "from_pretrained", "read_config", "read_gguf", "read_gguf_config",
    "model_policy", "load_policy", "ModelOptions",
    # memory budgets
    "chunk_for_budget", "default_memory_budget", "parse_memory",
    # warm-ups and GRPO training
    "WarmupConfig", "train_supervised", "three_policies", "study_policies",
    "train_grpo", "exact_accuracy", "predicted_group_size", "train_dppo",
    "lm_rule", "train_with_rule",
    # per-sample score statistics (ghost norms)
    "ghost_moments", "ghost_contractions", "score_dots", "lm_rollout_statistics",
    # model families (one spec each, a registry by name) and the ghost-norm route rule
    "ModelSpec", "TensorSpec", "FAMILIES", "family", "ghost_route",
]
__all__ += ["checked_tokens", "generic_sample", "RESPONSE_LEN", "encode_prompts", "integer_answer",
            "target_responses", "QUICK_WARMUP"]

#: the LM studies' library names this face held before, now in their one home
_MOVED = {n: "grpo_theory.experiments.lm_support" for n in (
    "gradient_mse_study", "group_rank_table", "numerical_rank", "mixture_constants",
    "mixture_objective", "mixture_mse_prediction")}


def __getattr__(name):
    """A one-line error naming the new home of a name that left this face."""
    if name in _MOVED:
        raise AttributeError(f"grpo_theory.lm.{name} is study code and moved to {_MOVED[name]} "
                             f"(from {_MOVED[name]} import {name})")
    raise AttributeError(f"module 'grpo_theory.lm' has no attribute {name!r}")
