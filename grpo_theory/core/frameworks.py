"""Each framework's options, named as in the framework, mapped to the package's presets and modes.

The conventions were read in each framework's source (commit and version below) and are checked
against plain-NumPy transcriptions of that code in ``tests/contracts/test_frameworks.py``:

=========  ==================  ===========================================================
TRL        f2cd577 (v1.9.0+)   ``trl/trainer/grpo_trainer.py``, ``grpo_config.py``
verl       b178a3c (v0.7.0+)   ``verl/trainer/ppo/core_algos.py``, ``verl/utils/groupwise.py``
verl       0.9.1 (PyPI)        every ``register_adv_est`` estimator but GAE, checked against the
                               installed verl (``tests/verl/test_verl_transcriptions.py``)
OpenRLHF   3c3be62 (v0.11.0)   ``openrlhf/trainer/ppo_utils/experience_maker.py``
tunix      c7d8950 (v0.1.7+)   ``tunix/rl/algo_core.py``
oat        c1a074c (v0.2.3)    ``oat/algorithms/ppo.py``, ``oat/args.py``
EasyDeL    090a03b (0.3.0)     ``easydel/trainers/group_relative_policy_optimization/``
=========  ==================  ===========================================================

``kind="advantage"`` rows name a registered estimator (:func:`grpo_theory.get_estimator`);
``kind="aggregation"`` rows name a loss-aggregation mode of
:func:`grpo_theory.companions.length_weighting.mode_coefficients`.
"""

from __future__ import annotations


def _row(framework, option, package, kind="advantage", default="", note=""):
    return dict(framework=framework, option=option, package=package, kind=kind, default=default,
                note=note)


FRAMEWORK_OPTIONS: list[dict] = [
    _row("trl", "scale_rewards=group", "grpo_std_trl", default="default (v1.9)",
         note="group mean, nanstd (ddof 1) + 1e-4"),
    _row("trl", "scale_rewards=batch", "grpo_std_trl_batch",
         note="group mean, nanstd of the whole batch (ddof 1) + 1e-4; batch-coupled"),
    _row("trl", "scale_rewards=none", "grpo_mean", note="group mean only"),
    _row("trl", "loss_type=grpo", "grpo", "aggregation", note="1/(G L_i)"),
    _row("trl", "loss_type=dr_grpo", "dr_grpo", "aggregation", note="1/(N max_completion_length)"),
    _row("trl", "loss_type=bnpo", "bnpo", "aggregation", note="/ micro-batch token count"),
    _row("trl", "loss_type=dapo", "dapo", "aggregation", default="default (v1.9)",
         note="/ generation-batch token count over all processes"),
    _row("verl", "grpo", "grpo_std_verl", default="adv_estimator default: gae (v0.7)",
         note="loop form: torch.std (ddof 1) + 1e-6; norm_adv_by_std_in_grpo=True (default)"),
    _row("verl", "grpo,norm_adv_by_std_in_grpo=False", "grpo_mean", note="Dr. GRPO"),
    _row("verl", "grpo_vectorized", "grpo_std_verl",
         note="0.9.1: two-pass float32 group moments without a variance floor "
              "(group_mean_std(eps=0)), / (std + 1e-6): the loop form in float32"),
    _row("verl", "grpo_vectorized (v0.7)", "grpo_vectorized_verl",
         note="v0.7: float32 one-pass variance floored at 1e-6, / (std + 1e-6)"),
    _row("verl", "rloo", "rloo", note="G/(G-1) (Z - mean)"),
    _row("verl", "reinforce_plus_plus_baseline", "reinforce_plus_plus_baseline_verl",
         note="group mean, then masked_whiten over the batch (Bessel, var + 1e-8); batch-coupled"),
    # verl 0.9.1's other estimators, checked against the installed verl
    # (tests/verl/test_verl_transcriptions.py; core/verl_estimators.py)
    _row("verl", "rloo_vectorized", "rloo", note="bincount form of rloo: the same advantages"),
    _row("verl", "reinforce_plus_plus_baseline (unequal lengths)",
         "reinforce_plus_plus_baseline_verl_tokens",
         note="masked_whiten weights each response by its length; needs length"),
    _row("verl", "grpo_passk", "grpo_passk_verl",
         note="only the group's best response: (Z_max - Z_2nd) / (std + 1e-6); ties give 0"),
    _row("verl", "grpo_passk,norm_adv_by_std_in_grpo=False", "grpo_passk_verl_noscale",
         note="Z_max - Z_2nd on the best response"),
    _row("verl", "opo", "opo_verl", note="Z - sum L Z / sum L (length-weighted group mean); "
                                          "needs length"),
    _row("verl", "reinforce_plus_plus", "reinforce_plus_plus_verl",
         note="gamma = 1 (default): Z whitened over the batch's tokens, no group baseline; "
              "needs length; batch-coupled"),
    _row("verl", "remax", "remax_verl",
         note="Z - reward of the greedy response (reward_baselines); needs greedy_reward"),
    _row("verl", "gpg", "gpg_verl",
         note="(Z - mean) * BG / #{Z != 0} over the batch (f_norm 1); batch-coupled"),
    _row("verl", "gdpo", "gdpo_verl",
         note="grpo per channel, weighted sum, masked_whiten; one channel without "
              "gdpo_reward_keys (with them: gdpo(weights) and channels); needs length"),
    _row("verl", "optimal_token_baseline", "optimal_token_baseline_verl",
         note="one-token responses: Z - sum W Z / (sum W + 1e-8), W = 1 - 2 pi + sum pi^2 "
              "= score_sq"),
    _row("verl", "tir_optimal_token_baseline", "optimal_token_baseline_verl",
         note="the same as optimal_token_baseline on one-token responses"),
    _row("verl", "loss_agg_mode=token-mean", "token-mean", "aggregation", default="default (v0.7)",
         note="/ global token count"),
    _row("verl", "loss_agg_mode=seq-mean-token-mean", "seq-mean-token-mean", "aggregation"),
    _row("verl", "loss_agg_mode=seq-mean-token-sum", "seq-mean-token-sum", "aggregation"),
    _row("verl", "loss_agg_mode=seq-mean-token-sum-norm", "seq-mean-token-sum-norm", "aggregation",
         note="/ loss_scale_factor (default T_max), not / number of sequences"),
    _row("openrlhf", "group_norm", "grpo_std_openrlhf", default="estimator default: gae (v0.11)",
         note="std (ddof 1) + 1e-9"),
    _row("openrlhf", "dr_grpo", "grpo_mean"),
    _row("openrlhf", "rloo", "rloo"),
    _row("openrlhf", "reinforce_baseline", "reinforce_baseline_openrlhf",
         note="group mean, then float32 whitening over the batch (ddof 0, max(var, 1e-8)); "
              "batch-coupled"),
    _row("tunix", "grpo", "grpo_std_tunix", default="default (v0.1.7+)", note="std (ddof 1) + 1e-6"),
    _row("tunix", "rloo", "rloo"),
    _row("tunix", "drgrpo", "grpo_mean"),
    _row("oat", "grpo", "grpo_std_oat", note="std (ddof 1) + 1e-8"),
    _row("oat", "drgrpo", "grpo_mean", default="default (v0.2.3)"),
    _row("easydel", "scale_rewards=group", "grpo_std_easydel", default="default (0.3.0)",
         note="jnp.nanstd (ddof 0) + 1e-4"),
    _row("easydel", "scale_rewards=batch", "grpo_std_easydel_batch",
         note="nanstd of the batch (ddof 0) + 1e-4; batch-coupled"),
    _row("easydel", "scale_rewards=none", "grpo_mean"),
]
"""One row per option a user selects in a framework. ``default`` says whether (and for which
version) the option is the framework's default."""


def preset(framework: str, option: str) -> str:
    """The package name (estimator or aggregation mode) of a framework's option.

    Args:
        framework: ``"trl"``, ``"verl"``, ``"openrlhf"``, ``"tunix"``, ``"oat"`` or ``"easydel"``.
        option: the option as written in :data:`FRAMEWORK_OPTIONS` (e.g. ``"scale_rewards=batch"``).

    Returns:
        The registered estimator name or aggregation-mode name.
    """
    for row in FRAMEWORK_OPTIONS:
        if row["framework"] == framework and row["option"] == option:
            return row["package"]
    known = sorted({(r["framework"], r["option"]) for r in FRAMEWORK_OPTIONS})
    raise ValueError(f"(framework, option) must be one of {known}, got {(framework, option)!r}")


def advantage_options() -> list[tuple[str, str]]:
    """All ``(framework, option)`` pairs that select an advantage estimator."""
    return [(r["framework"], r["option"]) for r in FRAMEWORK_OPTIONS if r["kind"] == "advantage"]


def framework_table() -> str:
    """:data:`FRAMEWORK_OPTIONS` as a Markdown table (framework / option / default / package)."""
    lines = ["| framework | option | default (version) | package preset or mode | convention |",
             "|---|---|---|---|---|"]
    for r in FRAMEWORK_OPTIONS:
        lines.append(f"| {r['framework']} | `{r['option']}` | {r['default'] or '-'} | "
                     f"`{r['package']}` | {r['note']} |")
    return "\n".join(lines)
