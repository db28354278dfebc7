"""The package's unbiased estimators in verl's advantage registry (a verl plug-in).

verl 0.9.1 imports, when ``verl`` is imported, every entry point of the group ``verl.plugins``
(``VERL_USE_EXTERNAL_PLUGINS=auto``, its default) and every module named in
``VERL_USE_EXTERNAL_MODULES``. The package's ``verl`` extra declares this module as such an
entry point, so after ``pip install "grpo-theory[verl]"`` a verl user sets one config value:

    algorithm.adv_estimator=grpo_theory_jspo

Registered (each ``fn(token_level_rewards, response_mask, index, config, **kwargs) ->
(advantages, returns)``, the outcome reward being the sum of a response's token rewards, as in
verl's own outcome estimators):

* ``grpo_theory_jspo``: JSPO's two-level leave-one-out baseline (other prompts' means shrunk
  into the leave-one-out mean; :mod:`grpo_theory.core.baselines`): unbiased. Groups must have
  equal sizes (as JSPO's code assumes) and the batch at least two prompts.
* ``grpo_theory_rloo_prompt``: leave-one-out with equal prompt weights: with unequal group sizes
  (filtered groups, per-prompt ``n``) verl's token-mean loss weights a prompt by its number of
  responses; the advantages here are scaled by ``N / (P n_x)`` so every prompt counts once and
  the gradient stays unbiased for the mean over prompts. With equal sizes it is ``rloo``.

Not registered: the leave-one-out score-norm-weighted baseline (``norm_weighted_loo``) needs
each response's ``sum_pi_squared`` and ``old_log_probs``, which verl's ``compute_advantage``
passes to its own optimal-token-baseline names only.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core import get_estimator

#: the prefix of every name this plug-in registers
PREFIX = "grpo_theory_"


def _groups(index, n_rows: int):
    """``(order (P, G) row indices, sizes (P,))`` of the groups of ``index`` in order of first
    appearance; ``order`` is None when the sizes differ."""
    if index is None:
        raise ValueError("the grpo_theory estimators group responses by prompt: verl must pass "
                         "index (the batch's 'uid' column)")
    ids = np.asarray(index, dtype=object)
    if ids.shape != (n_rows,):
        raise ValueError(f"index must have one entry per response ({n_rows}), got shape "
                         f"{ids.shape}")
    rows: dict = {}
    for i, u in enumerate(ids.tolist()):
        rows.setdefault(u, []).append(i)
    sizes = np.array([len(r) for r in rows.values()])
    order = np.array(list(rows.values())) if len(set(sizes.tolist())) == 1 else None
    return list(rows.values()), order, sizes


def _scores(token_level_rewards, response_mask):
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.ndim != 2:
        raise ValueError("token_level_rewards and response_mask must both be (bs, T), got "
                         f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}")
    return token_level_rewards.sum(dim=-1).detach().double().cpu().numpy()


def _out(adv, response_mask):
    a = torch.as_tensor(adv, dtype=torch.float32, device=response_mask.device)
    a = a.unsqueeze(-1) * response_mask
    return a, a


def compute_jspo_advantage(token_level_rewards, response_mask, index=None, config=None,
                           **kwargs):
    """verl estimator ``grpo_theory_jspo`` (module docstring)."""
    r = _scores(token_level_rewards, response_mask)
    _, order, sizes = _groups(index, r.shape[0])
    if order is None:
        raise ValueError("grpo_theory_jspo needs equal group sizes (JSPO's baseline assumes "
                         f"them), got sizes {sorted(set(sizes.tolist()))}; use "
                         "grpo_theory_rloo_prompt for unequal groups")
    z = r[order]  # (P, G)
    a = np.asarray(get_estimator("jspo")(z))
    adv = np.empty_like(r)
    adv[order] = a
    return _out(adv, response_mask)


def compute_rloo_prompt_advantage(token_level_rewards, response_mask, index=None, config=None,
                                  **kwargs):
    """verl estimator ``grpo_theory_rloo_prompt`` (module docstring)."""
    r = _scores(token_level_rewards, response_mask)
    groups, _, sizes = _groups(index, r.shape[0])
    if sizes.min() < 2:
        raise ValueError("grpo_theory_rloo_prompt needs at least 2 responses a prompt (leave-one-"
                         f"out), got a group of {int(sizes.min())}")
    N, P = r.shape[0], len(groups)
    adv = np.empty_like(r)
    for rows in groups:
        z = r[rows]
        n = len(rows)
        adv[rows] = (z - (z.sum() - z) / (n - 1)) * N / (P * n)
    return _out(adv, response_mask)


ESTIMATORS = {PREFIX + "jspo": compute_jspo_advantage,
              PREFIX + "rloo_prompt": compute_rloo_prompt_advantage}
"""The registered names and their functions."""


def register() -> list[str]:
    """Register :data:`ESTIMATORS` in verl's advantage registry (idempotent); their names."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    for name, fn in ESTIMATORS.items():
        if ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            register_adv_est(name)(fn)
    return list(ESTIMATORS)


register()
