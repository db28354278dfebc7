"""The settings of ``rollout-allocation``, field by field."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Settings", "SETTINGS"]


@dataclass(frozen=True)
class Settings:
    """One setting of the study.

    Attributes:
        deltas: reward gaps of the family members ``scaling_family_bandit(delta)``.
        policies: ``"initial"`` (theta0 = 0, grad J != 0) and/or ``"optimum"`` (theta*) for each
            delta.
        mix: also audit the two-prompt difficulty mix (3 responses, pass rates 0.1 and 0.9).
        grid: C-GRPO's budget grid (qhat = 1).
        batch_sizes: B at which every rule is audited (bias does not shrink with B, variance
            does).
        mc_batches: Monte Carlo batches (B = 1) per rule for the exact-vs-Monte-Carlo check on
            the first member.
        plugin_previous: rollouts per prompt of the previous sample the plug-in estimates from.
        plugin_draws: independent previous samples per plug-in cell.
        train_delta: the family member trained on (from theta0 = 0).
        train_batch: prompts per step B.
        train_steps: steps per run (every rule gets the same number of steps; the comparison is
            at common rollout budgets).
        train_seeds: runs per rule (>= 16).
        train_lr: the constant step size.
        train_budgets: the rollout budgets compared, as fractions of the fixed-G* rule's total.
        n_boot: bootstrap resamples for the training CIs.
    """

    deltas: tuple
    policies: tuple
    mix: bool
    grid: tuple
    batch_sizes: tuple
    mc_batches: int
    plugin_previous: tuple
    plugin_draws: int
    train_delta: float
    train_batch: int
    train_steps: int
    train_seeds: int
    train_lr: float
    train_budgets: tuple
    n_boot: int


SETTINGS = {
    "quick": Settings(deltas=(0.1,), policies=("initial", "optimum"), mix=True, grid=(2, 4, 8),
                      batch_sizes=(1, 16), mc_batches=4000, plugin_previous=(4, 64),
                      plugin_draws=100, train_delta=0.1, train_batch=16, train_steps=60,
                      train_seeds=16, train_lr=0.5, train_budgets=(0.25, 0.5, 1.0), n_boot=1000),
    "full": Settings(deltas=(0.5, 0.25, 0.1, 0.047, 0.0226), policies=("initial", "optimum"),
                     mix=True, grid=(2, 4, 8, 16, 32), batch_sizes=(1, 16, 256),
                     mc_batches=20000, plugin_previous=(4, 16, 64, 256), plugin_draws=400,
                     train_delta=0.1, train_batch=16, train_steps=200, train_seeds=64,
                     train_lr=0.5, train_budgets=(0.1, 0.25, 0.5, 1.0), n_boot=4000),
}
