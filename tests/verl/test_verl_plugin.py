"""The verl plug-in: verl's own lookup finds the package's estimators in a fresh process (entry
point, or the environment variable), and verl's own ``compute_advantage`` path trains with them.

Rival: a fresh process with plug-ins switched off and no module named finds nothing."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import torch
import verl.trainer.ppo.core_algos  # noqa: F401  (the verl extra and verl 0.9.1: make test)

from grpo_theory.core import get_estimator

LOOKUP = """
import json, torch
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn
names = sorted(n for n in ADV_ESTIMATOR_REGISTRY if n.startswith("grpo_theory_"))
out = {"names": names}
if names:
    r = torch.tensor([[0., 1.], [0., 0.], [0., 1.], [0., 0.], [0., 0.], [0., 1.]])
    m = torch.ones(6, 2)
    a, _ = get_adv_estimator_fn("grpo_theory_jspo")(token_level_rewards=r, response_mask=m,
                                                    index=["a", "a", "a", "b", "b", "b"])
    out["adv"] = a[:, -1].tolist()
print(json.dumps(out))
"""


def _fresh(env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", LOOKUP], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _want():
    z = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    return np.asarray(get_estimator("jspo")(z)).reshape(-1)


def test_entry_point_registers_in_a_fresh_process():
    got = _fresh({})  # VERL_USE_EXTERNAL_PLUGINS defaults to auto
    assert got["names"] == ["grpo_theory_jspo", "grpo_theory_rloo_prompt"]
    np.testing.assert_allclose(got["adv"], _want(), rtol=1e-6)


def test_environment_variable_registers_too():
    got = _fresh({"VERL_USE_EXTERNAL_PLUGINS": "none",
                  "VERL_USE_EXTERNAL_MODULES": "grpo_theory.torch.verl_plugin"})
    assert got["names"] == ["grpo_theory_jspo", "grpo_theory_rloo_prompt"]
    np.testing.assert_allclose(got["adv"], _want(), rtol=1e-6)


def test_nothing_without_the_plugin():
    assert _fresh({"VERL_USE_EXTERNAL_PLUGINS": "none"})["names"] == []


def _verl_compute_advantage():
    """verl's own ``compute_advantage``, read from the installed ``verl/trainer/ppo/ray_trainer.py``
    and executed with that module's names. Importing ``ray_trainer`` itself pulls in the whole
    trainer (torchdata, torchtitan, ...), which the ``verl`` extra does not install on CPU; the
    function needs only ``core_algos``, ``DataProto`` and the typing names, so its source is
    taken from the file (never a copy kept here) and run as is."""
    import ast
    import importlib.util
    from pathlib import Path
    from typing import Optional

    from verl import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    path = Path(importlib.util.find_spec("verl.trainer.ppo").origin).parent / "ray_trainer.py"
    tree = ast.parse(path.read_text())
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in
           ("compute_advantage", "compute_response_mask")]
    assert {f.name for f in fns} == {"compute_advantage", "compute_response_mask"}
    ns = dict(core_algos=core_algos, AdvantageEstimator=AdvantageEstimator, DataProto=DataProto,
              AlgoConfig=AlgoConfig, Optional=Optional, torch=torch, np=np)
    exec(compile(ast.Module(body=fns, type_ignores=[]), str(path), "exec"), ns)
    return DataProto, ns["compute_advantage"]


def test_verl_compute_advantage_path():
    """verl's own ``compute_advantage`` on a ``DataProto`` batch built here."""
    DataProto, compute_advantage = _verl_compute_advantage()

    rng = np.random.default_rng(0)
    P, G, T = 3, 4, 5
    z = rng.integers(0, 2, (P, G)).astype(np.float32)
    lengths = rng.integers(1, T + 1, P * G)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
    rewards = np.zeros((P * G, T), np.float32)
    rewards[np.arange(P * G), lengths - 1] = z.reshape(-1)
    uid = np.array([f"p{i // G}" for i in range(P * G)], dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": torch.tensor(rewards),
                                        "response_mask": torch.tensor(mask)},
                               non_tensors={"uid": uid})
    out = compute_advantage(data, adv_estimator="grpo_theory_jspo")
    adv = out.batch["advantages"].numpy()
    want = np.asarray(get_estimator("jspo")(z.astype(np.float64))).reshape(-1)
    np.testing.assert_allclose(adv, want[:, None] * mask, rtol=1e-6, atol=1e-7)
    out = compute_advantage(data, adv_estimator="grpo_theory_rloo_prompt")
    loo = np.asarray(get_estimator("rloo")(z.astype(np.float64))).reshape(-1)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), loo[:, None] * mask, rtol=1e-6,
                               atol=1e-7)


def test_equal_prompt_weights_with_unequal_groups():
    """Each prompt's advantages sum to its leave-one-out sum scaled by N / (P n_x): every prompt
    counts once whatever its group size (the rival, plain rloo, weighs prompt b twice)."""
    from grpo_theory.torch.verl_plugin import compute_rloo_prompt_advantage

    z = torch.tensor([1., 0., 1., 0., 0., 1.])
    r = torch.zeros(6, 1)
    r[:, 0] = z
    m = torch.ones(6, 1)
    a, _ = compute_rloo_prompt_advantage(r, m, index=["a", "a", "b", "b", "b", "b"])
    za, zb = np.array([1., 0.]), np.array([1., 0., 0., 1.])
    loo_a = za - (za.sum() - za) / 1
    loo_b = zb - (zb.sum() - zb) / 3
    np.testing.assert_allclose(a[:, 0].numpy(), np.r_[loo_a * 6 / 4, loo_b * 6 / 8], rtol=1e-6)
    with pytest.raises(ValueError, match="equal group sizes"):
        from grpo_theory.torch.verl_plugin import compute_jspo_advantage

        compute_jspo_advantage(r, m, index=["a", "a", "b", "b", "b", "b"])
    with pytest.raises(ValueError, match="index"):
        compute_rloo_prompt_advantage(r, m, index=None)


def test_verl_proxy_definitions_match_the_audit():
    """verl's own ``compute_variance_proxy_metrics`` on one sampled batch of one-token responses
    of a softmax over logits: its W is the squared score norm, its proxy2 the mean of A^2 W and
    its proxy3 (proxy2 - ||ghat||^2)/(N - 1): the quantities whose expectations
    ``verl_proxy_audit`` computes exactly."""
    import jax

    from verl import DataProto
    from verl.trainer.ppo.metric_utils import compute_variance_proxy_metrics

    from grpo_theory.core import SoftmaxBandit, estimate_gradient, sample_groups

    p = np.array([0.1, 0.3, 0.6, 0.9])
    toy = SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * 4)
    pr = toy.problem()
    x, y, z = sample_groups(jax.random.PRNGKey(3), pr, 4, 4)
    est = get_estimator("grpo")
    adv = np.asarray(est(z)).reshape(-1)
    g = np.asarray(estimate_gradient(pr, est, x, y, z))
    probs = np.asarray(pr.probs)
    xs, ys = np.repeat(np.asarray(x), 4), np.asarray(y).reshape(-1)
    old = np.log(probs[xs, ys])[:, None]
    spi = np.sum(probs[xs] ** 2, axis=1)[:, None]
    data = DataProto.from_dict(tensors={
        "old_log_probs": torch.tensor(old), "sum_pi_squared": torch.tensor(spi),
        "advantages": torch.tensor(adv[:, None]), "response_mask": torch.ones(16, 1,
                                                                              dtype=torch.float64)})
    m = compute_variance_proxy_metrics(data, gradient_norm=float(np.linalg.norm(g)))
    sq = np.sum(np.asarray(pr.scores) ** 2, axis=-1)[xs, ys]
    power = np.mean(adv**2 * sq)
    assert m["variance_proxy/proxy2_total_power"] == pytest.approx(power, rel=1e-6)  # float32
    assert m["variance_proxy/proxy3_pure_noise"] == pytest.approx(
        max(0.0, (power - g @ g) / 15), rel=1e-5, abs=1e-9)
