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
from .model import ModelConfig, init_params, make_apply, make_sampler  # noqa: F401
from .policy import LMPolicy, score_contractions, seq_log_probs  # noqa: F401
from .task import TaskConfig, eval_set, parse_final_integer, reward_text, reward_tokens  # noqa: F401
# Hugging Face checkpoints (Qwen2 / Llama) via tunix; tunix itself is imported on first use
from .hf import HFPolicy, from_pretrained  # noqa: F401
from .model import n_params
from .policy import token_log_probs
from .task import (Questions, TextReward, TokenReward, generate_questions, reward,
                   reward_answer_text, reward_exact_tokens, train_pool)
from .hf import read_config
from .gguf import read_gguf, read_gguf_config
from .local_model import model_policy
from .memory import chunk_for_budget, default_memory_budget, parse_memory
from .warmup import WarmupConfig, study_policies, three_policies, train_supervised
from .grpo import exact_accuracy, predicted_group_size, train_grpo
from .ghost import ghost_contractions, ghost_moments, score_dots
from .rank import group_rank_table, numerical_rank
from .mixture import mixture_constants, mixture_objective
from .mixture_mc import mixture_mse_prediction
from .gradmse import gradient_mse_study
from .dppo import train_dppo
from .allocation_train import lm_rule, train_with_rule
from .spec import ModelSpec, TensorSpec
from .families import FAMILIES, family
from .ghost_rule import ghost_route
from .options import ModelOptions
from .loading import load_policy
from .statistics import lm_rollout_statistics

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
    # the LM studies' library code
    "gradient_mse_study", "group_rank_table", "numerical_rank", "mixture_constants",
    "mixture_objective", "mixture_mse_prediction",
]
