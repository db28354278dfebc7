"""Training the small transformer at equal rollouts: fixed G* against DAPO's dynamic sampling,
C-GRPO's conformal stopping and Knapsack RL's allocation (standalone:
``python -m grpo_theory.studies.allocation_lm``; trains, so it is not part of ``reproduce``)."""
