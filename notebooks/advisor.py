# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Which group size G? The advisor, step by step
#
# GRPO samples G responses for each of B prompts, N = B G responses per step. Theorem 7 of the
# paper says the gradient MSE at a fixed budget is
#
# $$N \cdot \mathrm{MSE}(N/G, G) = c_1 G + c_2 + \frac{c_3}{G - 1},$$
#
# minimised at $G^* = 1 + \sqrt{c_3 / c_1}$ whatever N. The constants depend on the policy and
# the prompts, so they have to be measured: the advisor estimates them, without bias, from
# `n_samples` sampled responses for each of `n_prompts` prompts (rewards and per-sample score
# norms only), with 95% intervals.
#
# This notebook runs on tiny settings (seconds): a randomly initialised copy of the package's
# transformer and a stand-in reward with some variance. For a real model change `MODEL` to
# `"instruct"` (a warm-up checkpoint of the package), a `.npz` checkpoint or a Hugging Face
# checkpoint directory, drop `REWARD` (the default is the integer-answer reward), and raise
# `N_PROMPTS` / `N_SAMPLES`. The same thing from the shell:
#
# ```
# grpo-theory advise --prompts prompts.jsonl --model instruct --budgets 256,1024,4096
# ```

# %%
import tempfile
from pathlib import Path

import jax

from grpo_theory.advisor.advise import advise
from grpo_theory.advisor import write_prompts
from grpo_theory.lm import ModelConfig, init_params, task
from grpo_theory.lm.warmup import save_checkpoint

N_PROMPTS, N_SAMPLES = 8, 6
work = Path(tempfile.mkdtemp(prefix="advisor_nb_"))

# %% [markdown]
# ## 1. Prompts and a policy
#
# Prompts are a JSONL file, one `{"question": ..., "answer": ...}` per line. Here: questions of
# the package's arithmetic task. The policy: a tiny random transformer saved as a package
# checkpoint (`.npz`).

# %%
prompts = write_prompts(work / "prompts.jsonl", task.eval_set(n=40))
print(prompts.read_text().splitlines()[:3])

cfg = dict(d_model=16, n_layers=1, n_heads=2)
MODEL = work / "tiny.npz"
save_checkpoint(MODEL, init_params(jax.random.PRNGKey(0), ModelConfig(**cfg)), dict(config=cfg))


def REWARD(text, answer):
    """Stand-in reward for the random model: 1 if the response starts with a digit."""
    return float(text[:1].isdigit())


# %% [markdown]
# ## 2. Estimate
#
# `advise` samples the responses, computes the rewards, streams the per-sample score norms and
# the per-prompt gradients, and returns the estimates with the tables the command writes.

# %%
res = advise(prompts, MODEL, REWARD, n_prompts=N_PROMPTS, n_samples=N_SAMPLES,
             budgets=(64, 256, 1024), group_sizes=(2, 3, 4, 6, 8, 16), out=work / "advice",
             response_len=3, progress=False)
print(res.text())

# %% [markdown]
# ## 3. Read the intervals
#
# * `V-hat` is each sampled prompt's pass rate: prompts at 0 or 1 give all-equal groups, whose
#   GRPO advantage is zero (no gradient). The share of such groups falls with G.
# * c1 (variance of the per-prompt gradient across prompts) favours small G, c3 (the price of
#   GRPO's leave-one-out baseline) favours large G.
# * The G* interval is Fieller's interval for c3/c1 mapped through 1 + sqrt(.). When the c1
#   interval reaches 0, the upper end is `inf`: the data cannot rule out that larger groups are
#   always better. Then sample more prompts before trusting the point estimate.

# %%
e = res.estimate
print(res.constants[["estimate", "ci_low", "ci_high"]].round(4))
lo, hi = e.g_star_ci
print(f"G* = {e.g_star:.2f}, G* 95% CI [{lo:.2f}, {hi:.2f}]")
print("c1 interval excludes 0:", e.c1_ci[0] > 0)
print(res.by_group.round(4).to_string(index=False))

# %% [markdown]
# ## 4. Choose G for a budget
#
# The recommended integer G minimises $c_1 G + c_2 + c_3/(G-1)$ on $[2, N]$; the range is what
# the G* interval allows. Inside that range the predicted MSEs differ little, so any G there is
# a defensible choice; a narrower range needs more prompts. While the c1 interval reaches 0
# there is no recommendation (G and B are missing, and `e.no_recommendation_reason` says why):
# sample more prompts.

# %%
print(res.budgets.to_string(index=False))
row = res.budgets[res.budgets.N == 256].iloc[0]
G = e.recommended_group_size(256)
chosen = (f"{G} (B = {256 // G})" if G is not None
          else f"none ({e.no_recommendation_reason})")
print(f"chosen G for N=256: {chosen}, allowed range [{int(row.G_low)}, {int(row.G_high)}]")
print("files:", [p.name for p in res.files])
