"""Small language-model validation (issue 5): arithmetic task, a plain-JAX transformer, the
policy interface, supervised warm-ups, the Figure 4 gradient-MSE study and GRPO training."""

from . import model, policy, task  # noqa: F401
from .model import ModelConfig, init_params, make_apply, make_sampler  # noqa: F401
from .policy import LMPolicy, score_contractions, seq_log_probs  # noqa: F401
from .task import TaskConfig, eval_set, parse_final_integer, reward_text, reward_tokens  # noqa: F401
# Hugging Face checkpoints (Qwen2 / Llama) via tunix; tunix itself is imported on first use
from .hf import HFPolicy, from_pretrained  # noqa: F401
# the model options, the loader by spec and the advisor's streamed statistics
from .options import ModelOptions  # noqa: F401
from .loading import load_policy  # noqa: F401
from .statistics import lm_rollout_statistics  # noqa: F401
