"""Framework conformance: each preset and aggregation mode against a transcription of the
framework's own code (plain NumPy, as close to the original as possible).

Sources read (the commit of each repository's snapshot):

* TRL        huggingface/trl   f2cd577 (v1.9.0-26)   trl/trainer/grpo_trainer.py, trl/trainer/utils.py
* verl       volcengine/verl   b178a3c (v0.7.0-125)  verl/trainer/ppo/core_algos.py,
                                                      verl/utils/groupwise.py, verl/utils/torch_functional.py
* OpenRLHF   OpenRLHF/OpenRLHF 3c3be62 (v0.11.0)     openrlhf/trainer/ppo_utils/experience_maker.py
* tunix      google/tunix      c7d8950 (v0.1.7-326)  tunix/rl/algo_core.py
* oat        sail-sg/oat       c1a074c (v0.2.3)      oat/algorithms/ppo.py
* EasyDeL    erfanzar/EasyDeL  090a03b (0.3.0)       easydel/trainers/group_relative_policy_optimization/
                                                      grpo_trainer.py

Rewards are float64 in the transcriptions unless the framework casts to float32 (verl's
``group_mean_std``, OpenRLHF's whitening): those are compared at a float32 tolerance derived from
the computation's conditioning. Group kinds: random, binary, constant (dyadic values, where every
framework's arithmetic is exact; for other constants frameworks return rounding noise of order
ulp/eps and the package returns exactly 0, its documented zero-variance rule), G = 2 and tiny
spreads (1e-6 around a dyadic centre).
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grpo_theory as gt
from grpo_theory.companions import length_weighting as LW
from grpo_theory.core import frameworks as F
from grpo_theory.core import reinforce_baseline

F32 = float(np.finfo(np.float32).eps)

# --- group generators: (B, G) float64 arrays --------------------------------------------------


def _groups(kind: str, B: int, G: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.uniform(-1.0, 2.0, (B, G))
    if kind == "binary":
        return rng.integers(0, 2, (B, G)).astype(np.float64)
    if kind == "constant":  # every group constant (dyadic values), different across groups
        return np.repeat(rng.integers(-8, 9, (B, 1)) / 8.0, G, axis=1)
    if kind == "mixed":  # some constant groups inside a batch
        z = rng.integers(0, 2, (B, G)).astype(np.float64)
        z[0] = 1.0
        return z
    if kind == "tiny":
        return 0.5 + 1e-6 * rng.uniform(-1.0, 1.0, (B, G))
    raise AssertionError(kind)


KINDS = ["random", "binary", "constant", "mixed", "tiny"]
SHAPES = [(1, 2), (3, 2), (4, 5), (2, 16)]  # G = 2 included
CASES = [(k, B, G, s) for k in KINDS for (B, G) in SHAPES for s in (0,)]


def _close(pkg, ref, rtol=1e-9):
    """|pkg - ref| <= rtol * max(1, max|ref|) elementwise (relative to the advantages' scale)."""
    pkg, ref = np.asarray(pkg, np.float64), np.asarray(ref, np.float64)
    assert pkg.shape == ref.shape
    scale = max(1.0, float(np.max(np.abs(ref))))
    np.testing.assert_allclose(pkg, ref, rtol=0, atol=rtol * scale)


def _pkg(name, z):
    return np.asarray(gt.compute_advantages(name, jnp.asarray(z)))


# --- transcriptions: advantages -----------------------------------------------------------------
# Each takes rewards (B, G) (flattened to the framework's (B*G,) layout where it uses one) and
# returns advantages (B, G).


def trl_advantages(z, scale_rewards="group"):
    # TRL f2cd577 trl/trainer/grpo_trainer.py::_generate_and_score_completions
    # (multi_objective_aggregation="sum_then_normalize"), trl/trainer/utils.py::nanstd (Bessel)
    def nanstd(t, axis=None):
        mean = np.nanmean(t, axis=axis, keepdims=True)
        variance = np.nanmean((t - mean) ** 2, axis=axis, keepdims=True)
        count = np.sum(~np.isnan(t), axis=axis, keepdims=True)
        variance = variance * (count / (count - 1))
        std = np.sqrt(variance)
        return std.squeeze() if axis is None else np.squeeze(std, axis)

    B, G = z.shape
    rewards = z.reshape(-1)
    mean_grouped_rewards = np.nanmean(rewards.reshape(-1, G), axis=1).repeat(G)
    if scale_rewards in ("group", "none"):
        std_rewards = nanstd(rewards.reshape(-1, G), axis=1).repeat(G)
    elif scale_rewards == "batch":
        std_rewards = np.broadcast_to(nanstd(rewards), rewards.shape)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return np.nan_to_num(advantages, nan=0.0).reshape(B, G)


def easydel_advantages(z, scale_rewards="group"):
    # EasyDeL 090a03b easydel/trainers/group_relative_policy_optimization/grpo_trainer.py
    # (_preprocess_batch_input): jnp.nanstd is ddof 0
    B, G = z.shape
    rewards = z.reshape(-1)
    mean_grouped_rewards = np.nanmean(rewards.reshape(-1, G), axis=-1)
    advantages = rewards - mean_grouped_rewards.repeat(G, axis=0)
    if scale_rewards in ("group", "none"):
        std_rewards = np.nanstd(rewards.reshape(-1, G), axis=-1).repeat(G, axis=0)
    elif scale_rewards == "batch":
        std_rewards = np.broadcast_to(np.nanstd(rewards), advantages.shape)
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return np.nan_to_num(advantages).reshape(B, G)


def verl_grpo_loop(z, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    # verl b178a3c verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage (torch.std: ddof 1)
    B, G = z.shape
    scores = z.reshape(-1).copy()
    index = np.repeat(np.arange(B), G)
    id2score, id2mean, id2std = {}, {}, {}
    for i in range(len(scores)):
        id2score.setdefault(index[i], []).append(scores[i])
    for idx, vals in id2score.items():
        if len(vals) == 1:
            id2mean[idx], id2std[idx] = 0.0, 1.0
        else:
            t = np.array(vals)
            id2mean[idx], id2std[idx] = np.mean(t), np.std(t, ddof=1)
    for i in range(len(scores)):
        if norm_adv_by_std_in_grpo:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        else:
            scores[i] = scores[i] - id2mean[index[i]]
    return scores.reshape(B, G)


def verl_grpo_vectorized(z, epsilon=1e-6):
    # verl b178a3c core_algos.py::compute_grpo_vectorized_outcome_advantage and
    # verl/utils/groupwise.py::group_mean_std (float32, one-pass moments, variance floored at eps)
    B, G = z.shape
    scores = z.reshape(-1).astype(np.float32)
    g = np.repeat(np.arange(B), G)
    count = np.zeros(B, np.float32)
    np.add.at(count, g, np.float32(1))
    s1 = np.zeros(B, np.float32)
    np.add.at(s1, g, scores)
    s2 = np.zeros(B, np.float32)
    np.add.at(s2, g, scores * scores)
    mean = s1 / np.maximum(count, 1)
    var_num = s2 - (s1 * s1) / np.maximum(count, 1)
    denom = np.maximum(count - 1, 1)
    var = var_num / denom
    std = np.sqrt(np.maximum(var, np.float32(epsilon)))
    scalars = (scores - mean[g]) / (std[g] + np.float32(epsilon))
    return scalars.reshape(B, G)


def verl_rloo(z):
    # verl b178a3c core_algos.py::compute_rloo_outcome_advantage
    B, G = z.shape
    scores = z.reshape(-1).copy()
    index = np.repeat(np.arange(B), G)
    id2score = {}
    for i in range(len(scores)):
        id2score.setdefault(index[i], []).append(scores[i])
    id2mean = {k: np.mean(np.array(v)) for k, v in id2score.items()}
    for i in range(len(scores)):
        n = len(id2score[index[i]])
        if n > 1:
            scores[i] = scores[i] * n / (n - 1) - id2mean[index[i]] * n / (n - 1)
    return scores.reshape(B, G)


def verl_reinforce_plus_plus_baseline(z, response_length=1):
    # verl b178a3c core_algos.py::compute_reinforce_plus_plus_baseline_outcome_advantage and
    # verl/utils/torch_functional.py::masked_mean / masked_var / masked_whiten
    B, G = z.shape
    scores = z.reshape(-1).copy()
    index = np.repeat(np.arange(B), G)
    id2score = {}
    for i in range(len(scores)):
        id2score.setdefault(index[i], []).append(scores[i])
    id2mean = {k: (0.0 if len(v) == 1 else np.mean(np.array(v))) for k, v in id2score.items()}
    for i in range(len(scores)):
        scores[i] = scores[i] - id2mean[index[i]]
    mask = np.ones((B * G, response_length))
    values = np.tile(scores[:, None], (1, response_length)) * mask

    def masked_mean(v, m):
        return (np.where(m.astype(bool), v, 0.0) * m).sum() / (m.sum() + 1e-8)

    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    var = var * (mask.sum() / (mask.sum() - 1))  # unbiased
    whitened = (values - mean) / np.sqrt(var + 1e-8)
    return (whitened * mask)[:, 0].reshape(B, G)


def openrlhf_advantages(z, estimator, response_length=1, no_std_norm=False):
    # OpenRLHF 3c3be62 openrlhf/trainer/ppo_utils/experience_maker.py (reward shaping, then
    # "Normalize advantages across all experiences" for reinforce_baseline); with gamma = 1 and no
    # KL every token of a response carries its shaped reward
    B, n = z.shape
    rewards = z.copy()
    if estimator == "rloo":
        baseline = (rewards.sum(-1, keepdims=True) - rewards) / (n - 1)
        rewards = rewards - baseline
    elif estimator in ("reinforce_baseline", "dr_grpo"):
        rewards = rewards - rewards.mean(-1, keepdims=True)
    elif estimator == "group_norm":
        rewards = (rewards - rewards.mean(-1, keepdims=True)) / (rewards.std(-1, ddof=1, keepdims=True) + 1e-9)
    if estimator != "reinforce_baseline":
        return rewards
    advantages = np.tile(rewards.reshape(-1, 1), (1, response_length))
    all_advantages = advantages.flatten().astype(np.float32)
    all_action_masks = np.ones_like(all_advantages)
    num_actions = all_action_masks.sum()
    mean = (all_advantages * all_action_masks).sum() / num_actions
    if not no_std_norm:
        var = (((all_advantages - mean) ** 2) * all_action_masks).sum() / num_actions
        rstd = np.float32(1.0) / np.sqrt(np.maximum(var, np.float32(1e-8)))
    else:
        rstd = 1
    out = (all_advantages - mean) * rstd
    return out.reshape(B * n, response_length)[:, 0].reshape(B, n)


def tunix_advantages(z, estimator):
    # tunix c7d8950 tunix/rl/algo_core.py: compute_advantages ("grpo"),
    # compute_rloo_advantages ("rloo"), compute_drgrpo_advantages ("drgrpo")
    B, G = z.shape
    rewards = z.reshape(-1)
    if estimator == "grpo":
        mean_grouped_rewards = rewards.reshape(-1, G).mean(axis=-1).repeat(G)
        std_grouped_rewards = rewards.reshape(-1, G).std(axis=-1, ddof=1).repeat(G)
        out = (rewards - mean_grouped_rewards) / (std_grouped_rewards + 1e-6)
    elif estimator == "rloo":
        reshaped = rewards.reshape(-1, G)
        loo_mean = (reshaped.sum(axis=-1, keepdims=True) - reshaped) / (G - 1)
        out = (reshaped - loo_mean).flatten()
    elif estimator == "drgrpo":
        out = rewards - rewards.reshape(-1, G).mean(axis=1).repeat(G)
    return out.reshape(B, G)


def oat_advantages(z, critic_type):
    # oat c1a074c oat/algorithms/ppo.py::compute_monte_carlo_advantages (torch .std(): ddof 1)
    B, G = z.shape
    rewards = z.reshape(-1)
    values = rewards.reshape(-1, G).mean(axis=1).repeat(G)
    advantages = rewards - values
    if critic_type == "grpo":
        std = rewards.reshape(-1, G).std(axis=1, ddof=1).repeat(G)
        advantages = advantages / (std + 1e-8)
    return advantages.reshape(B, G)


# --- preset table: (framework, option) -> (package estimator, transcription, float32?) --------

REFERENCE = {
    ("trl", "scale_rewards=group"): lambda z: trl_advantages(z, "group"),
    ("trl", "scale_rewards=batch"): lambda z: trl_advantages(z, "batch"),
    ("trl", "scale_rewards=none"): lambda z: trl_advantages(z, "none"),
    ("verl", "grpo"): verl_grpo_loop,
    ("verl", "grpo,norm_adv_by_std_in_grpo=False"):
        lambda z: verl_grpo_loop(z, norm_adv_by_std_in_grpo=False),
    ("verl", "grpo_vectorized (v0.7)"): verl_grpo_vectorized,
    ("verl", "rloo"): verl_rloo,
    ("verl", "reinforce_plus_plus_baseline"): verl_reinforce_plus_plus_baseline,
    ("openrlhf", "group_norm"): lambda z: openrlhf_advantages(z, "group_norm"),
    ("openrlhf", "dr_grpo"): lambda z: openrlhf_advantages(z, "dr_grpo"),
    ("openrlhf", "rloo"): lambda z: openrlhf_advantages(z, "rloo"),
    ("openrlhf", "reinforce_baseline"): lambda z: openrlhf_advantages(z, "reinforce_baseline"),
    ("tunix", "grpo"): lambda z: tunix_advantages(z, "grpo"),
    ("tunix", "rloo"): lambda z: tunix_advantages(z, "rloo"),
    ("tunix", "drgrpo"): lambda z: tunix_advantages(z, "drgrpo"),
    ("oat", "grpo"): lambda z: oat_advantages(z, "grpo"),
    ("oat", "drgrpo"): lambda z: oat_advantages(z, "drgrpo"),
    ("easydel", "scale_rewards=group"): lambda z: easydel_advantages(z, "group"),
    ("easydel", "scale_rewards=batch"): lambda z: easydel_advantages(z, "batch"),
    ("easydel", "scale_rewards=none"): lambda z: easydel_advantages(z, "none"),
}
FLOAT32 = {("verl", "grpo_vectorized (v0.7)"), ("openrlhf", "reinforce_baseline")}


# verl 0.9.1 rows without a transcription here: checked against the installed verl itself
# (tests/verl/test_verl_transcriptions.py, which covers every verl row)
VERL_INSTALLED = {("verl", o) for o in (
    "grpo_vectorized", "rloo_vectorized", "reinforce_plus_plus_baseline (unequal lengths)",
    "grpo_passk", "grpo_passk,norm_adv_by_std_in_grpo=False", "opo", "reinforce_plus_plus",
    "remax", "gpg", "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline")}


def test_every_advantage_option_has_a_transcription():
    assert set(F.advantage_options()) == set(REFERENCE) | VERL_INSTALLED
    assert not set(REFERENCE) & VERL_INSTALLED


def _float32_tolerance(key, z, ref):
    """Error bound of the float32 routes: input rounding and the one-pass moments' cancellation,
    relative to the (floored) variance, times the advantages' size."""
    G = z.shape[-1]
    amax = float(np.max(np.abs(ref))) + 1.0
    if key == ("verl", "grpo_vectorized (v0.7)"):
        var = np.maximum(np.var(z, axis=-1, ddof=1), 1e-6)
        cond = G * np.max(z ** 2, axis=-1) / var / (G - 1) + np.max(np.abs(z), axis=-1) / np.sqrt(var)
        return 16 * F32 * (float(np.max(cond)) + 1.0) * amax
    c = z - z.mean(-1, keepdims=True)
    var = max(float(np.mean((c - c.mean()) ** 2)), 1e-8)
    return 16 * F32 * (z.size * float(np.max(np.abs(z))) ** 2 / var / z.size
                       + float(np.max(np.abs(z))) / np.sqrt(var) + 1.0) * amax


@pytest.mark.parametrize("key", sorted(REFERENCE))
@pytest.mark.parametrize("kind,B,G,seed", CASES)
def test_presets_match_framework_code(key, kind, B, G, seed):
    z = _groups(kind, B, G, seed)
    ref = REFERENCE[key](z)
    pkg = _pkg(F.preset(*key), z)
    if key in FLOAT32:
        np.testing.assert_allclose(pkg, ref, rtol=0, atol=_float32_tolerance(key, z, ref))
    else:
        _close(pkg, ref)
    if kind == "constant":  # zero-variance groups: exactly 0 in the package
        assert np.all(pkg == 0.0)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(2, 9), st.integers(0, 2**31 - 1),
       st.sampled_from(["random", "binary", "tiny", "grid"]))
def test_presets_match_framework_code_hypothesis(B, G, seed, kind):
    """Random shapes and rewards on top of the fixed grid of test_presets_match_framework_code
    (every kind x shape); each new (B, G) compiles every preset, so the examples are few."""
    if kind == "grid":  # rewards on a 1/8 grid: ties and constant groups are frequent
        z = np.random.default_rng(seed).integers(0, 4, (B, G)) / 8.0
    else:
        z = _groups(kind, B, G, seed)
    for key, ref_fn in REFERENCE.items():
        ref, pkg = ref_fn(z), _pkg(F.preset(*key), z)
        if key in FLOAT32:
            np.testing.assert_allclose(pkg, ref, rtol=0, atol=_float32_tolerance(key, z, ref))
        else:
            _close(pkg, ref)


@pytest.mark.parametrize("L", [1, 3])
def test_reinforce_baseline_token_weighting(L):
    """The frameworks whiten over tokens: L tokens per response changes verl's Bessel factor."""
    z = _groups("random", 3, 4, 7)
    ests = {"verl": reinforce_baseline("verl", tokens_per_response=L),
            "openrlhf": reinforce_baseline("openrlhf", tokens_per_response=L)}
    _close(gt.compute_advantages(ests["verl"], z), verl_reinforce_plus_plus_baseline(z, L))
    np.testing.assert_allclose(gt.compute_advantages(ests["openrlhf"], z),
                               openrlhf_advantages(z, "reinforce_baseline", L), rtol=0, atol=1e-5)
    no_norm = reinforce_baseline("openrlhf", L, std_norm=False)
    np.testing.assert_allclose(gt.compute_advantages(no_norm, z),
                               openrlhf_advantages(z, "reinforce_baseline", L, no_std_norm=True),
                               rtol=0, atol=1e-6)


def test_easydel_eps_is_1e_4():
    """EasyDeL's eps (1e-4): binary groups of 16 differed by 8e-4 with eps = 1e-6."""
    z = np.array([[1.0] * 3 + [0.0] * 13])
    ref = easydel_advantages(z)
    _close(_pkg("grpo_std_easydel", z), ref, rtol=1e-12)
    assert np.max(np.abs(_pkg("grpo_std_easydel", z) - ref)) < 1e-12
    old = (z - z.mean()) / (z.std() + 1e-6)
    assert np.max(np.abs(old - ref)) > 1e-4


def test_vectorized_floor_differs_from_loop_on_tiny_spreads():
    z = _groups("tiny", 2, 8, 3)
    vec, loop = _pkg("grpo_vectorized_verl", z), _pkg("grpo_std_verl", z)
    assert np.max(np.abs(vec)) < 2e-3 < 0.2 < np.max(np.abs(loop))


def test_batch_coupling_is_real():
    """Batch-coupled advantages of a group change with another prompt's group; group ones do not."""
    z = _groups("random", 3, 4, 11)
    z2 = z.copy()
    z2[2] = 10 * z2[2]
    for name in ("grpo_std_trl_batch", "grpo_std_easydel_batch", "reinforce_plus_plus_baseline",
                 "reinforce_baseline"):
        assert gt.get_estimator(name).batch_coupled
        assert np.max(np.abs(_pkg(name, z)[0] - _pkg(name, z2)[0])) > 1e-3, name
    for name in ("grpo_std_trl", "grpo_vectorized_verl", "grpo_std_easydel"):
        assert not gt.get_estimator(name).batch_coupled
        np.testing.assert_array_equal(_pkg(name, z)[0], _pkg(name, z2)[0])
    # leading axes are independent batches: (R, B, G) equals R separate (B, G) calls
    zz = np.stack([z, z2])
    for name in ("grpo_std_trl_batch", "reinforce_plus_plus_baseline"):
        both = _pkg(name, zz)
        _close(both[0], _pkg(name, z), rtol=1e-14)
        _close(both[1], _pkg(name, z2), rtol=1e-14)


def _mse(r):
    return float(getattr(r, "mse", getattr(r, "value", np.nan)))


def test_batch_scaling_of_one_group_is_group_scaling_in_monte_carlo():
    """B = 1: TRL "batch" scaling is TRL "group" scaling; same draws, same MSE (to rounding), and
    the exact MSE of the group form lies in the Monte Carlo interval."""
    from grpo_theory.problems import default_bandit

    bandit = default_bandit()
    for batch, group in (("grpo_std_trl_batch", "grpo_std_trl"),
                         ("grpo_std_easydel_batch", "grpo_std_easydel")):
        a = gt.mc_mse(bandit, batch, 4, batch_size=1, n_reps=4000, seed=3)
        b = gt.mc_mse(bandit, group, 4, batch_size=1, n_reps=4000, seed=3)
        assert _mse(a) == pytest.approx(_mse(b), rel=1e-10)
        exact = float(gt.exact_mse(bandit, group, 4, 1))
        assert abs(_mse(a) - exact) < 4 * float(a.se)


def test_batch_coupled_presets_train():
    from grpo_theory.problems import default_bandit

    bandit = default_bandit()
    for name in ("grpo_std_trl_batch", "reinforce_plus_plus_baseline", "reinforce_baseline"):
        res = gt.train(bandit, name, batch_size=4, group_size=4, n_steps=30, eta=0.5)
        obj = np.asarray(res.objective)
        assert np.all(np.isfinite(obj)) and obj[..., -1].mean() > obj[..., 0].mean(), name


def test_batch_coupled_in_monte_carlo_and_exact():
    bandit = gt.SoftmaxBandit(np.array([[0.3, -0.2, 0.1], [0.0, 0.5, -0.4]]),
                              np.array([[0.9, 0.2, 0.5], [0.1, 0.6, 0.3]]))
    for name in ("grpo_std_trl_batch", "reinforce_plus_plus_baseline", "reinforce_baseline"):
        r = gt.mc_mse(bandit, name, 4, batch_size=3, n_reps=400)
        assert np.isfinite(r.mse) and r.mse > 0
        with pytest.raises(ValueError, match="batch"):
            gt.exact_mse(bandit, name, 4, batch_size=3)


# --- aggregation modes ---------------------------------------------------------------------------
# loss_mat (N, T) with N = B*G responses (rows ordered by group) and a right-padded mask; each
# framework's loss is linear in loss_mat with one weight per response, and the package's
# coefficient satisfies weight = c_bg / B (ghat = (1/B) sum c A s).


def verl_agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None,
                  global_batch_size=None, loss_scale_factor=None):
    # verl b178a3c verl/trainer/ppo/core_algos.py::agg_loss
    def masked_sum(values, mask, axis=None):
        return (np.where(mask.astype(bool), values, 0.0) * mask).sum(axis=axis)

    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "seq-mean-token-sum":
        seq_losses = np.sum(loss_mat * loss_mask, axis=-1)
        seq_mask = (np.sum(loss_mask, axis=-1) > 0).astype(float)
        if global_batch_size is None:
            global_batch_size = seq_mask.sum()
        return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
    if loss_agg_mode == "seq-mean-token-mean":
        seq_mask = np.sum(loss_mask, axis=-1)
        seq_losses = np.sum(loss_mat * loss_mask, axis=-1) / (seq_mask + 1e-8)
        seq_mask = (seq_mask > 0).astype(float)
        if global_batch_size is None:
            global_batch_size = seq_mask.sum()
        return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        seq_losses = np.sum(loss_mat * loss_mask, axis=-1)
        if loss_scale_factor is None:
            loss_scale_factor = loss_mask.shape[-1]
        return np.sum(seq_losses) / loss_scale_factor
    raise ValueError(loss_agg_mode)


def trl_loss(per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch=None,
             num_processes=1):
    # TRL f2cd577 trl/trainer/grpo_trainer.py::_compute_loss (training mode, one accumulation step)
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / np.maximum(mask.sum(-1), 1.0)).mean()
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / max(mask.sum(), 1.0)
    if loss_type == "dr_grpo":
        return (per_token_loss * mask).sum() / (per_token_loss.shape[0] * max_completion_length)
    if loss_type == "dapo":
        normalizer = max(num_items_in_batch, 1.0) / num_processes
        return (per_token_loss * mask).sum() / normalizer
    raise ValueError(loss_type)


def _lengths_and_mask(B, G, T, seed):
    rng = np.random.default_rng(seed)
    L = rng.integers(1, T + 1, (B, G))
    mask = (np.arange(T)[None, :] < L.reshape(-1, 1)).astype(np.float64)
    return L.astype(np.float64), mask


def _response_weights(loss_fn, mask):
    """The weight of each response in a linear loss: the loss of a unit row on its mask."""
    N, T = mask.shape
    out = np.empty(N)
    for n in range(N):
        e = np.zeros((N, T))
        e[n] = 1.0
        out[n] = loss_fn(e) / mask[n].sum()  # every token of response n carries the same value
    return out


MODES = [("verl", m) for m in ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm",
                               "token-mean")] + [("trl", m) for m in ("grpo", "dr_grpo", "bnpo", "dapo")]


@pytest.mark.parametrize("framework,mode", MODES)
@pytest.mark.parametrize("B,G,T,seed", [(1, 2, 4, 0), (3, 4, 6, 1), (2, 8, 5, 2), (4, 2, 1, 3)])
def test_aggregation_modes_match_framework_code(framework, mode, B, G, T, seed):
    L, mask = _lengths_and_mask(B, G, T, seed)
    if framework == "verl":
        def loss(m):
            return verl_agg_loss(m, mask, mode)
    else:
        num_items = mask.sum()  # dapo: accelerator.gather(loss_mask.sum()).sum(), one process

        def loss(m):
            return trl_loss(m, mask, mode, max_completion_length=T, num_items_in_batch=num_items)
    w = _response_weights(loss, mask)
    c = np.asarray(LW.mode_coefficients(mode, L, max_length=T, batch=True)).reshape(-1)
    # verl's seq-mean-token-mean divides by (L + 1e-8): a relative 1e-8 / L the package omits
    rtol = 1.5e-8 if mode == "seq-mean-token-mean" and framework == "verl" else 1e-12
    np.testing.assert_allclose(c / B, w, rtol=rtol, atol=0)
    # and on a random loss matrix: linearity with per-response weights
    m = np.random.default_rng(seed + 10).normal(size=mask.shape)
    np.testing.assert_allclose(loss(m), np.sum(c / B * (m * mask).sum(-1)), rtol=rtol)


def test_verl_seq_mean_token_sum_norm_vs_trl_dr_grpo():
    """verl divides the batch sum by loss_scale_factor only; TRL's dr_grpo also by N = BG."""
    L, mask = _lengths_and_mask(3, 4, 6, 5)
    verl = np.asarray(LW.mode_coefficients("seq-mean-token-sum-norm", L, max_length=6, batch=True))
    trl = np.asarray(LW.mode_coefficients("dr_grpo", L, max_length=6, batch=True))
    np.testing.assert_allclose(verl, 12 * trl, rtol=1e-14)
    w = _response_weights(lambda m: verl_agg_loss(m, mask, "seq-mean-token-sum-norm",
                                                  loss_scale_factor=2.5), mask)
    c = LW.mode_coefficients("seq-mean-token-sum-norm", L, batch=True, loss_scale_factor=2.5)
    np.testing.assert_allclose(np.asarray(c).reshape(-1) / 3, w, rtol=1e-12)
    assert LW.mode_alpha("dr_grpo") == 1.0 and LW.mode_alpha("dapo") is None


def test_global_token_normaliser_spans_processes():
    """verl token-mean with a global token count and dp_size, TRL dapo with num_items_in_batch
    gathered over processes: the gradient averaged over ranks equals the single-batch mode."""
    B, G, T = 4, 3, 5
    L, mask = _lengths_and_mask(B, G, T, 8)
    m = np.random.default_rng(3).normal(size=mask.shape)
    c = np.asarray(LW.mode_coefficients("token-mean", L, batch=True)).reshape(-1)
    single = np.sum(c / B * (m * mask).sum(-1))
    halves = [slice(0, B * G // 2), slice(B * G // 2, B * G)]
    total = mask.sum()
    verl = np.mean([verl_agg_loss(m[h], mask[h], "token-mean", dp_size=2, batch_num_tokens=total)
                    for h in halves])  # DDP averages the ranks' gradients
    trl = np.mean([trl_loss(m[h], mask[h], "dapo", T, num_items_in_batch=total, num_processes=2)
                   for h in halves])
    np.testing.assert_allclose(verl, single, rtol=1e-12)
    np.testing.assert_allclose(trl, single, rtol=1e-12)


def test_aggregation_bad_inputs():
    L = np.ones((2, 3))
    with pytest.raises(ValueError, match="mode must be one of"):
        LW.mode_coefficients("sum-of-everything", L)
    with pytest.raises(ValueError, match="max_length"):
        LW.mode_coefficients("dr_grpo", L)
    with pytest.raises(ValueError, match="loss_scale_factor"):
        LW.mode_coefficients("seq-mean-token-sum-norm", L, loss_scale_factor=0.0)
    with pytest.raises(ValueError, match=r"lengths must have shape \(\.\.\., B, G\)"):
        LW.mode_coefficients("token-mean", np.ones(3), batch=True)


def test_readme_table_names_exist():
    names = set(gt.available_estimators())
    modes = set(LW.AGGREGATION_MODES) | set(LW.TRL_LOSS_TYPES)
    for row in F.FRAMEWORK_OPTIONS:
        assert row["package"] in (names if row["kind"] == "advantage" else modes), row
