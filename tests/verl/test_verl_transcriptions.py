"""verl's own advantage functions against the package's transcriptions.

Every estimator of verl 0.9.1's registry but GAE (``get_adv_estimator_fn(name)``, called as
verl's trainer calls it: token rewards, response mask, ``index`` = uid array, ``config`` =
``AlgoConfig``) on enumerated batches: every binary reward pattern of B = 2 prompts x G = 2..4
responses, plus random real rewards, with unequal response lengths in ``response_mask`` and the
reward on each response's last valid token. The package's estimator (the row of
``FRAMEWORK_OPTIONS``) must give the same token advantages to float32 rounding (verl computes in
float32; the package gets the same float32-rounded rewards). The rival tests show the comparison
catches a wrong preset: ``grpo_mean`` for ``grpo``, the unweighted mean for ``opo``, one token per
response for the token-weighted whitening, the unweighted mean for the optimal token baseline.
"""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.core import PromptContext, gdpo
from grpo_theory.core import frameworks as F
from grpo_theory.core import reinforce_baseline

# verl 0.9.1 comes with `make test` (the verl extra, then verl itself with --no-deps): a missing
# verl fails here, it is never skipped
import torch  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

T = 5  # tokens per response row (lengths 1..T)
B = 2
K = 4  # vocabulary of the one-token softmax policy (optimal token baseline)

# verl option (a FRAMEWORK_OPTIONS row) -> (verl registry name, verl keyword arguments, batch)
# batch: "lengths" (unequal lengths 1..T), "equal" (all L = 3), "one_token" (T = 1)
CASES = {
    "grpo": ("grpo", {}, "lengths"),
    "grpo,norm_adv_by_std_in_grpo=False": ("grpo", {"norm_adv_by_std_in_grpo": False}, "lengths"),
    "grpo_vectorized": ("grpo_vectorized", {}, "lengths"),
    "rloo": ("rloo", {}, "lengths"),
    "rloo_vectorized": ("rloo_vectorized", {}, "lengths"),
    "reinforce_plus_plus_baseline": ("reinforce_plus_plus_baseline", {}, "one_token"),
    "reinforce_plus_plus_baseline (unequal lengths)":
        ("reinforce_plus_plus_baseline", {}, "lengths"),
    "grpo_passk": ("grpo_passk", {}, "lengths"),
    "grpo_passk,norm_adv_by_std_in_grpo=False":
        ("grpo_passk", {"config": {"norm_adv_by_std_in_grpo": False}}, "lengths"),
    "opo": ("opo", {}, "lengths"),
    "reinforce_plus_plus": ("reinforce_plus_plus", {}, "lengths"),
    "remax": ("remax", {}, "lengths"),
    "gpg": ("gpg", {}, "lengths"),
    "gdpo": ("gdpo", {}, "lengths"),
    "optimal_token_baseline": ("optimal_token_baseline", {}, "one_token"),
    "tir_optimal_token_baseline": ("tir_optimal_token_baseline", {}, "one_token"),
}


def _patterns(G: int, seed: int) -> np.ndarray:
    """(N, B, G) rewards: every binary pattern, then 16 batches of random real rewards (rounded
    to float32, the precision verl receives)."""
    binary = np.array(list(itertools.product((0.0, 1.0), repeat=B * G))).reshape(-1, B, G)
    real = np.random.default_rng(seed).uniform(-1.0, 2.0, (16, B, G))
    return np.concatenate([binary, real]).astype(np.float32).astype(np.float64)


def _batch(z: np.ndarray, kind: str, seed: int) -> dict:
    """Everything both sides read for rewards ``z`` (N, B, G)."""
    N, _, G = z.shape
    rng = np.random.default_rng(seed + 1)
    if kind == "lengths":
        length, t = rng.integers(1, T + 1, z.shape), T
    elif kind == "equal":
        length, t = np.full(z.shape, 3), T
    else:
        length, t = np.ones(z.shape, int), 1
    greedy = rng.choice([0.0, 0.5, 1.0], (N, B))  # ReMax: the greedy response's reward
    logits = np.broadcast_to(rng.normal(0.0, 1.5, (B, K)), (N, B, K))  # one-token softmax
    y = rng.integers(0, K, z.shape)  # the sampled token of each response
    channels = np.stack([z, rng.integers(0, 2, z.shape).astype(np.float32)], -1)
    return dict(z=z, length=length, t=t, greedy=greedy, logits=logits, y=y,
                channels=channels.astype(np.float32).astype(np.float64))


def _verl_advantages(name: str, kw: dict, d: dict, n: int, weights=None) -> np.ndarray:
    """verl's token advantages (B*G, t) for batch ``n``, called as verl's trainer calls them."""
    z, length, t = d["z"][n], d["length"][n], d["t"]
    Bn, G = z.shape
    bs, last = Bn * G, length.reshape(-1) - 1
    mask = (np.arange(t)[None, :] <= last[:, None]).astype(np.float32)
    rewards = np.zeros((bs, t), np.float32)
    rewards[np.arange(bs), last] = z.reshape(-1)
    cfg = dict(kw.get("config", {}))
    args = dict(token_level_rewards=torch.tensor(rewards), response_mask=torch.tensor(mask),
                index=np.array([f"uid-{b}" for b in range(Bn) for _ in range(G)], dtype=object))
    args.update({k: v for k, v in kw.items() if k != "config"})
    if name == "remax":
        args["reward_baselines"] = torch.tensor(np.repeat(d["greedy"][n], G), dtype=torch.float32)
    if name.endswith("optimal_token_baseline"):
        logp = torch.log_softmax(torch.tensor(d["logits"][n], dtype=torch.float32), -1)  # (B, K)
        args["old_log_probs"] = torch.gather(logp, 1, torch.tensor(d["y"][n])).reshape(bs, 1)
        args["sum_pi_squared"] = (logp.exp() ** 2).sum(-1).repeat_interleave(G).reshape(bs, 1)
    if weights is not None:  # GDPO with reward channels, as verl's trainer passes them
        cfg.update(gdpo_reward_keys=["ch0", "ch1"], gdpo_reward_weights=list(weights))
        args["non_tensor_batch"] = {f"ch{k}": d["channels"][n][..., k].reshape(-1)
                                    for k in range(2)}
        args["batch"] = {"prompts": torch.zeros(bs, 3, dtype=torch.long),
                         "attention_mask": torch.cat([torch.ones(bs, 3, dtype=torch.long),
                                                     torch.tensor(mask).long()], 1)}
    args["config"] = AlgoConfig(**cfg)
    adv, _ = core_algos.get_adv_estimator_fn(name)(**args)
    return adv.numpy()


def _package_advantages(est, d: dict) -> np.ndarray:
    """The package's advantages (N, B, G) for every batch at once (leading axis N)."""
    est = gt.get_estimator(est)
    score_sq = None
    if "score_sq" in est.needs:
        # ||s(x, y)||^2 from the dense score vectors of the SoftmaxBandit (B prompts, K tokens)
        lg = d["logits"][0]
        table = gt.SoftmaxBandit(jnp.asarray(lg), np.full(lg.shape, 0.5)).problem()
        sq = np.broadcast_to(np.asarray(table.score_sq_norms()), d["logits"].shape)
        score_sq = np.take_along_axis(sq, d["y"], -1)
        # the weight verl reads, 1 - 2 pi(y) + sum pi^2, is the softmax's squared score norm
        probs = np.exp(d["logits"]) / np.exp(d["logits"]).sum(-1, keepdims=True)
        np.testing.assert_allclose(
            score_sq, 1 - 2 * np.take_along_axis(probs, d["y"], -1)
            + (probs ** 2).sum(-1, keepdims=True), rtol=1e-10, atol=1e-12)
    ctx = PromptContext(length=jnp.asarray(d["length"], jnp.float64),
                        greedy_reward=jnp.asarray(d["greedy"]), score_sq=score_sq,
                        channels=jnp.asarray(d["channels"]))
    return np.asarray(est(jnp.asarray(d["z"]), ctx))


def _compare(est, name: str, kw: dict, kind: str, G: int, seed: int, weights=None):
    d = _batch(_patterns(G, seed), kind, seed)
    pkg = _package_advantages(est, d)
    for n in range(len(d["z"])):
        ref = _verl_advantages(name, kw, d, n, weights)
        t = d["t"]
        mask = np.arange(t)[None, :] < d["length"][n].reshape(-1)[:, None]
        tokens = pkg[n].reshape(-1, 1) * mask
        np.testing.assert_allclose(tokens, ref, rtol=2e-5,
                                   atol=2e-5 * (1.0 + float(np.max(np.abs(ref)))),
                                   err_msg=f"{est} vs verl {name}, batch {n}: {d['z'][n]}")


@pytest.mark.parametrize("G", [2, 3, 4])
@pytest.mark.parametrize("option", sorted(CASES))
def test_package_estimator_equals_verl(option, G):
    name, kw, kind = CASES[option]
    _compare(F.preset("verl", option), name, kw, kind, G, seed=G)


@pytest.mark.parametrize("G", [2, 4])
def test_equal_lengths_whitening_equals_the_fixed_length_preset(G):
    """At equal lengths L the token-weighted whitening is ``reinforce_baseline("verl", L)``."""
    _compare(reinforce_baseline("verl", tokens_per_response=3), "reinforce_plus_plus_baseline",
             {}, "equal", G, seed=10 + G)


@pytest.mark.parametrize("G", [2, 3])
def test_gdpo_reward_channels_equal_verl(G):
    """GDPO with two reward channels (verl's gdpo_reward_keys and gdpo_reward_weights)."""
    _compare(gdpo([1.0, 0.5]), "gdpo", {}, "lengths", G, seed=20 + G, weights=[1.0, 0.5])


def test_every_verl_estimator_is_covered():
    """A new estimator in verl's registry (or a verl row without a check) fails here."""
    # the package's own plug-in names (grpo_theory/torch/verl_plugin.py) are not verl's
    registry = {n for n in core_algos.ADV_ESTIMATOR_REGISTRY if not n.startswith("grpo_theory_")}
    assert registry == {e.value for e in core_algos.AdvantageEstimator}
    assert registry - {"gae"} == {name for name, _, _ in CASES.values()}
    verl_rows = {opt for fw, opt in F.advantage_options() if fw == "verl"}
    # the v0.7 form of grpo_vectorized is checked against its transcription in
    # tests/contracts/test_frameworks.py; verl 0.9.1 no longer computes it (rival test below)
    assert verl_rows == set(CASES) | {"grpo_vectorized (v0.7)"}


@pytest.mark.parametrize("option,rival", [
    ("grpo", "grpo_mean"),
    ("grpo_vectorized", "grpo_vectorized_verl"),  # v0.7's variance floor and one-pass moments
    ("opo", "grpo_mean"),
    ("reinforce_plus_plus_baseline (unequal lengths)", "reinforce_plus_plus_baseline_verl"),
    ("optimal_token_baseline", "grpo_mean"),
    ("grpo_passk", "grpo_std_verl"),
    ("gpg", "grpo_mean"),
    ("remax", "grpo_mean"),
    ("gdpo", "reinforce_plus_plus_baseline_verl_tokens"),
])
def test_a_wrong_preset_fails(option, rival):
    """The same batches as test_package_estimator_equals_verl at G = 2 catch each rival."""
    name, kw, kind = CASES[option]
    with pytest.raises(AssertionError):
        _compare(rival, name, kw, kind, 2, seed=2)
