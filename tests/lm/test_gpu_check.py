"""The GPU path on CPU: ``benchmarks/gpu_check.py --quick`` end to end, and the bfloat16 model.

The bfloat16 tolerances are rounding-error bounds (u = 2^-8, the unit roundoff of bfloat16):

* one matrix product with operands rounded to bfloat16 and float32 accumulation of d terms:
  ``|fl(a) fl(b) - a b| <= (2u + u^2 + gamma_d) (|a| |b|)`` elementwise, with
  ``gamma_d = d 2^-24 / (1 - d 2^-24)`` the float32 accumulation term (a rigorous bound);
* the logits: ``6 L + 1`` such products in series, relative errors adding to first order
  (``gpu_check.bf16_logit_tolerance``);
* the gradient of the log-likelihood: the backward pass doubles the products in series, so the
  relative error of the gradient is at most ``2 (2u + u^2) (6 L + 1)`` to first order.
"""

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from grpo_theory.lm import model, policy, task

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
U = 2.0**-8
SPEC = dict(d_model=32, n_layers=1, n_heads=2)


@functools.lru_cache(maxsize=None)
def _gpu_check():
    """The script as a module (registered in sys.modules: its dataclass needs that)."""
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _batch(n=64):
    q = task.eval_set(n=n)
    return task.encode_prompts(q, "answer"), task.target_responses(q, "answer")


def test_quick_run_writes_passing_outputs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "backend cpu" in proc.stdout and "device 0: cpu" in proc.stdout
    res = json.loads((tmp_path / "cpu-quick.json").read_text())
    md = (tmp_path / "cpu-quick.md").read_text()
    assert res["verdict"] == "PASS" and "Verdict: **PASS**" in md
    assert res["device_info"]["backend"] == "cpu" and res["device_info"]["devices"]
    rows = res["exact_vs_mc"]
    assert {(r["estimator"], r["G"]) for r in rows} == {("grpo", 4), ("oracle", 4)}
    for r in rows:
        assert r["verdict"] == "PASS" and abs(r["z"]) <= 4.0
        assert abs(r["mc_mse"] - r["exact_mse"]) == pytest.approx(abs(r["z"]) * r["mc_se"])
        assert r["exact_mse"] > 0 and r["reps_per_s"] > 0
    assert all(c["reps_per_s"] > 0 for c in res["mc_chunks"])
    assert [a["verdict"] for a in res["bf16"]] == ["PASS"]
    assert res["bf16"][0]["bf16_grad_dtypes"] == ["float32"]
    assert 0 < res["bf16"][0]["max_diff_bf16"] <= res["bf16"][0]["tolerance"]
    assert sorted(r["dtype"] for r in res["lm_step"]) == ["bfloat16", "float32"]
    assert all(r["step_s"] > 0 and r["finite_accuracy"] for r in res["lm_step"])


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SystemExit) as e:
        _gpu_check().main(["--quick", "--out", str(f)])
    assert e.value.code == 2 and "--out" in capsys.readouterr().err


def test_device_name_is_a_file_name():
    gc = _gpu_check()
    info = dict(backend="gpu", devices=[dict(kind="NVIDIA H200")])
    assert gc.device_name(info) == "nvidia-h200"
    assert gc.device_name(dict(backend="cpu", devices=[])) == "cpu"


def test_dtype_option_is_validated():
    assert model.ModelConfig().dtype == "float32"
    cfg = model.ModelConfig(dtype=jnp.bfloat16)
    assert cfg.dtype == "bfloat16" and cfg == model.ModelConfig(dtype="bfloat16")
    assert hash(cfg) == hash(model.ModelConfig(dtype="bfloat16"))
    for bad in ("float16", "float64", "int8", "nonsense", 3):
        with pytest.raises(ValueError, match="dtype"):
            model.ModelConfig(dtype=bad)


def test_bf16_matmul_within_rounding_bound():
    a = jax.random.normal(jax.random.PRNGKey(1), (40, 96), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(2), (96, 30), jnp.float32)
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = a.shape[1]
    gamma = d * 2.0**-24 / (1 - d * 2.0**-24)
    bound = (2 * U + U * U + gamma) * (np.abs(a64) @ np.abs(b64))
    got = model._mm(a, b, "bfloat16")
    assert got.dtype == jnp.float32
    err = np.abs(np.asarray(got, np.float64) - a64 @ b64)
    assert np.all(err <= bound)
    assert err.max() > 1e-3 * bound.max()  # operands really were rounded
    np.testing.assert_array_equal(model._mm(a, b, "float32"), a @ b)


def test_bf16_logits_agree_with_float32():
    gc = _gpu_check()
    c32, c16 = model.ModelConfig(**SPEC), model.ModelConfig(**SPEC, dtype="bfloat16")
    params = model.init_params(0, c32)
    x, y = _batch()
    toks, p = np.concatenate([x, y], axis=1), x.shape[1]
    l32 = np.asarray(jax.jit(model.make_apply(c32), static_argnums=2)(params, toks, p))
    l16 = jax.jit(model.make_apply(c16), static_argnums=2)(params, toks, p)
    assert l16.dtype == jnp.float32
    l16 = np.asarray(l16)
    real = l32 > -1e8
    diff = np.abs(l16 - l32)[real]
    tol = gc.bf16_logit_tolerance(c16, np.abs(l32[real]).max())
    assert 0 < diff.max() <= tol
    # the response tokens' log-probabilities: log-softmax is 2-Lipschitz in the max norm
    def tok_lp(lg):
        lp = jax.nn.log_softmax(jnp.asarray(lg[:, p - 1: -1]), axis=-1)
        return np.take_along_axis(np.asarray(lp), y[..., None], axis=-1)

    assert np.abs(tok_lp(l16) - tok_lp(l32)).max() <= 2 * tol


def test_bf16_gradients_are_float32_and_close():
    c32, c16 = model.ModelConfig(**SPEC), model.ModelConfig(**SPEC, dtype="bfloat16")
    params = model.init_params(0, c32)
    x, y = _batch()

    def grad(cfg):
        return jax.jit(jax.grad(lambda w: jnp.mean(policy.seq_log_probs(
            model.make_apply(cfg), w, x, y))))(params)

    g16 = grad(c16)
    assert {a.dtype for a in jax.tree_util.tree_leaves(g16)} == {jnp.dtype(jnp.float32)}
    v32, v16 = ravel_pytree(grad(c32))[0], ravel_pytree(g16)[0]
    rel = float(jnp.linalg.norm(v16 - v32) / jnp.linalg.norm(v32))
    assert 0 < rel <= 2 * (2 * U + U * U) * (6 * c16.n_layers + 1)
    opt = optax.adam(1e-3)  # the parameter update stays float32
    upd, _ = opt.update(g16, opt.init(params), params)
    new = optax.apply_updates(params, upd)
    assert {a.dtype for a in jax.tree_util.tree_leaves(new)} == {jnp.dtype(jnp.float32)}


def test_bf16_kv_sampler_draws_valid_responses():
    c16 = model.ModelConfig(**SPEC, dtype="bfloat16")
    params = model.init_params(0, c16)
    x, _ = _batch(16)
    y = np.asarray(model.sample(params, c16, 3, x, task.RESPONSE_LEN["answer"]))
    assert y.shape == (16, task.RESPONSE_LEN["answer"])
    assert y.min() >= 0 and y.max() < c16.vocab_size
    # PAD only after an EOS (the sampler's contract)
    mask = np.asarray(policy.response_mask(y))
    assert np.all((y == task.PAD) <= (mask == 0))
