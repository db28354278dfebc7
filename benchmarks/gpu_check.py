r"""Device check: what JAX runs on, exact vs Monte Carlo on a large bandit, and timings.

Run::

    python benchmarks/gpu_check.py            # the full check (meant for a GPU)
    python benchmarks/gpu_check.py --quick    # a small CPU smoke run (well under a minute)

Four parts, printed as they finish and written to ``<out>/<device>.json`` and ``<device>.md``
(``<device>-quick.*`` with ``--quick``; ``<device>`` is the first device's kind, e.g.
``nvidia-h200`` or ``cpu``; default ``--out results-full/gpu``):

1. **Devices**: JAX and jaxlib versions, the default backend, the default float32 matmul
   precision, and every device (platform, kind, memory when the backend reports it).
2. **Exact vs Monte Carlo** on a large linear softmax bandit
   (:func:`grpo_theory.problems.linear_bandit`: P prompts x K responses, d shared parameters;
   full: P = 1000, K = 100, d = 16): ``gt.exact_mse`` against ``gt.mc_mse`` for ``grpo`` and
   ``oracle`` at several G (batch B), ``z = (mc - exact) / se``. A row is PASS when
   ``|z| <= 4``: the 4-sigma band of the ``mse-table`` experiment (a false FAIL per row has
   probability 2 (1 - Phi(4)) = 6.3e-5).
3. **Monte Carlo engine speed**: replicates/s of the same ``mc_mse`` calls, timed on a second
   call with a new seed (compilation excluded; ``mc_mse`` returns host floats, so the device work
   has finished when it returns); full runs also sweep the replicate chunk size.
4. **Language-model GRPO step** of the package's transformer (:mod:`grpo_theory.lm`) in float32
   and bfloat16 (``ModelConfig.dtype``): ``train_grpo`` at budget N = B G, seconds per step
   (median of ``--repeats`` timed calls after one compiling call; each call also scores a small
   held-out set twice), and the bfloat16 logits' agreement with float32 at the highest matmul
   precision within :func:`bf16_logit_tolerance` (PASS/FAIL). On NVIDIA GPUs JAX's default
   float32 matmul uses TF32 tensor cores; the float32 rows run at that default (printed in part
   1; ``JAX_DEFAULT_MATMUL_PRECISION=highest`` gives true float32).

Exit status 1 when any check FAILs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import grpo_theory as gt
from grpo_theory.lm import model, policy, task
from grpo_theory.lm.training import grpo
from grpo_theory.problems import linear_bandit

__all__ = ["Settings", "QUICK", "FULL", "Z_TOL", "BF16_UNIT_ROUNDOFF", "device_info",
           "device_name", "bf16_logit_tolerance", "exact_vs_mc", "time_mc_chunks",
           "bf16_agreement", "time_lm_step", "markdown", "main"]

#: |z| above which an exact-vs-Monte-Carlo row FAILs (the mse-table experiment's band)
Z_TOL = 4.0
#: unit roundoff of bfloat16 (8 significant bits, round to nearest): u = 2^-8
BF16_UNIT_ROUNDOFF = 2.0**-8


@dataclass(frozen=True)
class Settings:
    """Sizes of one run (``QUICK`` for a CPU smoke run, ``FULL`` for an accelerator)."""

    n_prompts: int  # P of the bandit
    n_responses: int  # K
    dim: int  # d, the shared parameter dimension
    batch_size: int  # B prompts per Monte Carlo replicate
    group_sizes: tuple  # G values checked
    estimators: tuple
    n_reps: int  # Monte Carlo replicates per row
    chunks: tuple  # replicate chunk sizes timed (None = mc_mse's default)
    lm_models: tuple  # (d_model, n_layers, n_heads) of the timed transformers
    lm_budget: int  # N = B G responses per GRPO step
    lm_group: int  # G of the GRPO step
    lm_steps: int  # steps per timed train_grpo call
    lm_eval: int  # held-out questions scored at the start and end of each call
    repeats: int  # timed calls per measurement (median)


QUICK = Settings(n_prompts=50, n_responses=20, dim=8, batch_size=4, group_sizes=(4,),
                 estimators=("grpo", "oracle"), n_reps=20_000, chunks=(None,),
                 lm_models=((32, 1, 2),), lm_budget=32, lm_group=4, lm_steps=2, lm_eval=8,
                 repeats=1)
FULL = Settings(n_prompts=1000, n_responses=100, dim=16, batch_size=8, group_sizes=(2, 8, 32),
                estimators=("grpo", "oracle"), n_reps=400_000, chunks=(None, 256, 2048),
                lm_models=((64, 2, 4), (256, 4, 8)), lm_budget=1024, lm_group=16, lm_steps=10,
                lm_eval=50, repeats=3)


def _say(msg: str) -> None:
    print(msg, flush=True)


def device_info() -> dict:
    """JAX versions, backend, default matmul precision and every device (memory if reported).

    Returns:
        A JSON-ready dict.
    """
    import jaxlib

    devices = []
    for d in jax.devices():
        row = dict(id=d.id, platform=d.platform, kind=d.device_kind)
        try:
            stats = d.memory_stats()
        except Exception:  # backends without memory statistics (CPU) may raise
            stats = None
        if stats and "bytes_limit" in stats:
            row["memory_gib"] = round(stats["bytes_limit"] / 2**30, 2)
        devices.append(row)
    return dict(jax=jax.__version__, jaxlib=jaxlib.__version__, backend=jax.default_backend(),
                matmul_precision=str(jax.config.jax_default_matmul_precision or "default"),
                package=gt.__version__, devices=devices)


def device_name(info: dict) -> str:
    """File-name form of the first device's kind, e.g. ``"NVIDIA H200"`` -> ``nvidia-h200``."""
    kind = info["devices"][0]["kind"] if info["devices"] else info["backend"]
    return re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") or "device"


def bf16_logit_tolerance(cfg: model.ModelConfig, max_abs_logit: float) -> float:
    r"""Bound on ``max |logits_bf16 - logits_f32|`` used by the agreement check.

    One matrix product with operands rounded to bfloat16 (unit roundoff u = 2^-8) and float32
    accumulation errs by at most ``(2u + u^2) sum_i |a_i b_i|`` (the float32 accumulation adds
    about ``d 2^-24``, negligible). A logit passes through ``6 L + 1`` such products in series
    (per layer q/k/v, scores, weighted values, output projection, two MLP products; then the
    head), and the layer norms put each product's error on the scale of the signal. To first
    order the relative errors add, so the logit error is at most
    ``tol = (2u + u^2) (6 L + 1) max|logit|``.

    Args:
        cfg: the model configuration (``n_layers`` = L).
        max_abs_logit: ``max |logit|`` of the float32 reference (PAD excluded).

    Returns:
        The tolerance (float).
    """
    u = BF16_UNIT_ROUNDOFF
    return float((2 * u + u * u) * (6 * cfg.n_layers + 1) * max_abs_logit)


def exact_vs_mc(s: Settings, seed: int = 0, log=_say) -> list[dict]:
    """Exact vs Monte Carlo MSE rows (module docstring, part 2), with engine timings (part 3).

    Args:
        s: the run's sizes.
        seed: Monte Carlo seed of the checked call (the timed call uses ``seed + 1``).
        log: printer.

    Returns:
        One dict per (estimator, G).
    """
    bandit = linear_bandit(n_prompts=s.n_prompts, n_responses=s.n_responses, dim=s.dim)
    rows = []
    for est in s.estimators:
        for G in s.group_sizes:
            t0 = time.perf_counter()
            exact = float(gt.exact_mse(bandit, est, G, s.batch_size))
            t_exact = time.perf_counter() - t0
            t0 = time.perf_counter()
            r = gt.mc_mse(bandit, est, G, s.batch_size, n_reps=s.n_reps, seed=seed)
            t_first = time.perf_counter() - t0
            t0 = time.perf_counter()
            gt.mc_mse(bandit, est, G, s.batch_size, n_reps=s.n_reps, seed=seed + 1)
            t_run = time.perf_counter() - t0
            z = (r.mse - exact) / r.se if r.se > 0 else float("nan")
            ok = bool(np.isfinite(z) and abs(z) <= Z_TOL)
            row = dict(estimator=est, G=G, B=s.batch_size, exact_mse=exact, mc_mse=r.mse,
                       mc_se=r.se, z=z, n_reps=s.n_reps, verdict="PASS" if ok else "FAIL",
                       exact_s=t_exact, mc_first_call_s=t_first, mc_s=t_run,
                       reps_per_s=s.n_reps / t_run)
            rows.append(row)
            log(f"  {est:>6} G={G:<3} B={s.batch_size}: exact {exact:.6g}  MC {r.mse:.6g} "
                f"+- {r.se:.2g}  z={z:+.2f}  {row['verdict']}  "
                f"({row['reps_per_s']:,.0f} reps/s; first call {t_first:.1f}s, "
                f"exact {t_exact:.2f}s)")
    return rows


def time_mc_chunks(s: Settings, estimator: str = "grpo", group_size: int | None = None,
                   log=_say) -> list[dict]:
    """Replicates/s of ``mc_mse`` at each chunk size of ``s.chunks`` (compile excluded).

    Args:
        s: the run's sizes.
        estimator: registry name.
        group_size: G (default: the largest of ``s.group_sizes``).
        log: printer.

    Returns:
        One dict per chunk size (``chunk=None``: the engine's default).
    """
    bandit = linear_bandit(n_prompts=s.n_prompts, n_responses=s.n_responses, dim=s.dim)
    group_size = max(s.group_sizes) if group_size is None else group_size
    out = []
    for chunk in s.chunks:
        run = lambda sd: gt.mc_mse(bandit, estimator, group_size, s.batch_size,
                                   n_reps=s.n_reps, seed=sd, chunk=chunk)
        run(0)
        ts = []
        for i in range(s.repeats):
            t0 = time.perf_counter()
            run(i + 1)
            ts.append(time.perf_counter() - t0)
        dt = statistics.median(ts)
        out.append(dict(estimator=estimator, G=group_size, B=s.batch_size,
                        chunk="default" if chunk is None else chunk, n_reps=s.n_reps,
                        seconds=dt, reps_per_s=s.n_reps / dt))
        log(f"  chunk {out[-1]['chunk']!s:>7}: {s.n_reps / dt:,.0f} replicates/s ({dt:.3f}s)")
    return out


def _cfg(spec, dtype):
    d, L, H = spec
    return model.ModelConfig(d_model=d, n_layers=L, n_heads=H, dtype=dtype)


def bf16_agreement(spec, n_rows: int = 64, seed: int = 0) -> dict:
    """bfloat16 logits (and float32 at the default matmul precision) vs float32 at 'highest'.

    PASS when both differences are within :func:`bf16_logit_tolerance` and the gradient of the
    bfloat16 model's log-likelihood with respect to the (float32) parameters is float32.

    Args:
        spec: ``(d_model, n_layers, n_heads)``.
        n_rows: sequences scored (held-out questions followed by their correct answers).
        seed: parameter seed.

    Returns:
        A dict with the maximum absolute logit differences, the tolerance and the verdict.
    """
    c32, c16 = _cfg(spec, "float32"), _cfg(spec, "bfloat16")
    params = model.init_params(seed, c32)
    q = task.eval_set(n=n_rows)
    x = task.encode_prompts(q, "answer")
    toks = jnp.asarray(np.concatenate([x, task.target_responses(q, "answer")], axis=1))
    p = x.shape[1]

    def logits(cfg):  # a fresh function per call: traced (and compiled) under the current precision
        return np.asarray(jax.jit(lambda w, t: model.apply(w, t, p, cfg))(params, toks))

    with jax.default_matmul_precision("highest"):
        ref = logits(c32)
    f32, bf16 = logits(c32), logits(c16)
    y = toks[:, p:]
    grads = jax.jit(jax.grad(lambda w: jnp.mean(policy.seq_log_probs(
        model.make_apply(c16), w, toks[:, :p], y))))(params)
    grad_dtypes = sorted({str(a.dtype) for a in jax.tree_util.tree_leaves(grads)})
    real = ref > -1e8  # PAD's logit is fixed at -1e9
    scale = float(np.abs(ref[real]).max())
    tol = bf16_logit_tolerance(c16, scale)
    d16 = float(np.abs(bf16 - ref)[real].max())
    d32 = float(np.abs(f32 - ref)[real].max())
    ok = bool(np.isfinite(d16) and d16 <= tol and d32 <= tol and grad_dtypes == ["float32"])
    return dict(model=f"d={spec[0]} L={spec[1]} H={spec[2]}", max_abs_logit=scale,
                max_diff_bf16=d16, max_diff_f32_default=d32, tolerance=tol,
                bf16_grad_dtypes=grad_dtypes, verdict="PASS" if ok else "FAIL")


def time_lm_step(s: Settings, spec, dtype: str, seed: int = 0) -> dict:
    """Seconds per GRPO step of ``train_grpo`` (median of ``s.repeats`` calls after one compile).

    Args:
        s: sizes (budget, group size, steps per call, held-out questions, repeats).
        spec: ``(d_model, n_layers, n_heads)``.
        dtype: ``"float32"`` or ``"bfloat16"``.
        seed: parameter seed (call ``i`` trains with seed ``i``).

    Returns:
        A dict: model, dtype, first-call and per-step seconds, responses/s, whether the held-out
        accuracies were finite.
    """
    cfg = _cfg(spec, dtype)
    params = model.init_params(seed, cfg)
    pol = policy.LMPolicy(params, model.make_apply(cfg), model.make_sampler(cfg))
    pool = task.train_pool(n=2000)
    evalq = task.eval_set(n=s.lm_eval)

    def run(sd):
        return grpo.train_grpo(pol, pool, evalq, s.lm_budget, s.lm_group, s.lm_steps, [], 1e-3,
                               sd)

    t0 = time.perf_counter()
    rows = run(0)
    t_first = time.perf_counter() - t0
    ts = []
    for i in range(s.repeats):
        t0 = time.perf_counter()
        rows = run(i + 1)  # returns host floats: the device work is done
        ts.append(time.perf_counter() - t0)
    dt = statistics.median(ts) / s.lm_steps
    finite = bool(all(np.isfinite(r["accuracy"]) for r in rows))
    return dict(model=f"d={spec[0]} L={spec[1]} H={spec[2]}", n_params=model.n_params(params),
                dtype=dtype, budget=s.lm_budget, G=s.lm_group, steps_per_call=s.lm_steps,
                first_call_s=t_first, step_s=dt, responses_per_s=s.lm_budget / dt,
                finite_accuracy=finite)


def _table(rows: list[dict], cols: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
        return str(v)

    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(fmt(r[c]) for c in cols) + " |\n" for r in rows)


def markdown(result: dict) -> str:
    """The markdown summary of a result dict (as written by :func:`main`)."""
    info = result["device_info"]
    kind = info["devices"][0]["kind"] if info["devices"] else info["backend"]
    lines = [f"# Device check: {kind} ({'quick' if result['quick'] else 'full'} run)",
             "", f"Command: `{result['command']}`  ", f"Date: {result['date']}  ",
             f"JAX {info['jax']} (jaxlib {info['jaxlib']}), backend `{info['backend']}`, "
             f"default matmul precision `{info['matmul_precision']}`, grpo-theory "
             f"{info['package']}", "", "## Devices", "",
             _table([dict(d, memory_gib=d.get("memory_gib", "n/a")) for d in info["devices"]],
                    ["id", "platform", "kind", "memory_gib"]),
             f"## Exact vs Monte Carlo (PASS when |z| <= {Z_TOL:g})", "",
             f"Bandit: {result['settings']['n_prompts']} prompts x "
             f"{result['settings']['n_responses']} responses, d = {result['settings']['dim']}.",
             "", _table(result["exact_vs_mc"], ["estimator", "G", "B", "exact_mse", "mc_mse",
                                                 "mc_se", "z", "verdict", "n_reps",
                                                 "reps_per_s", "mc_first_call_s"]),
             "## Monte Carlo engine by chunk size", "",
             _table(result["mc_chunks"], ["estimator", "G", "B", "chunk", "n_reps", "seconds",
                                          "reps_per_s"]),
             "## bfloat16 agreement (max |logit difference| vs float32 at 'highest')", "",
             _table(result["bf16"], ["model", "max_abs_logit", "max_diff_bf16",
                                     "max_diff_f32_default", "tolerance", "verdict"]),
             "## Language-model GRPO step", "",
             _table(result["lm_step"], ["model", "n_params", "dtype", "budget", "G", "step_s",
                                        "responses_per_s", "first_call_s"]),
             f"Verdict: **{result['verdict']}**", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run the check; returns the exit status (0 when every check PASSes)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: a CPU smoke run")
    ap.add_argument("--out", default="results-full/gpu", help="output folder")
    ap.add_argument("--seed", type=int, default=0, help="Monte Carlo seed")
    ap.add_argument("--n-reps", type=int, default=None, help="override the replicates per row")
    args = ap.parse_args(argv)
    s = QUICK if args.quick else FULL
    if args.n_reps is not None:
        if args.n_reps < 2:
            ap.error(f"--n-reps must be >= 2, got {args.n_reps}")
        s = Settings(**{**asdict(s), "n_reps": args.n_reps})
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out {out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)

    t_start = time.perf_counter()
    info = device_info()
    name = device_name(info) + ("-quick" if args.quick else "")
    _say(f"JAX {info['jax']} (jaxlib {info['jaxlib']}), backend {info['backend']}, "
         f"default matmul precision {info['matmul_precision']}")
    for d in info["devices"]:
        mem = f", {d['memory_gib']} GiB" if "memory_gib" in d else ""
        _say(f"  device {d['id']}: {d['platform']} {d['kind']}{mem}")

    _say(f"exact vs Monte Carlo: linear bandit P={s.n_prompts} K={s.n_responses} d={s.dim}, "
         f"{s.n_reps:,} replicates per row")
    checks = exact_vs_mc(s, args.seed)
    _say(f"Monte Carlo engine by chunk size (grpo, G={max(s.group_sizes)}):")
    chunks = time_mc_chunks(s)
    _say("bfloat16 agreement with float32 (highest precision):")
    agree = []
    for spec in s.lm_models:
        a = bf16_agreement(spec)
        agree.append(a)
        _say(f"  {a['model']}: max|logit| {a['max_abs_logit']:.3g}, bf16 diff "
             f"{a['max_diff_bf16']:.3g}, float32-default diff {a['max_diff_f32_default']:.3g}, "
             f"tolerance {a['tolerance']:.3g}, bf16 gradient {'/'.join(a['bf16_grad_dtypes'])}"
             f"  {a['verdict']}")
    _say(f"GRPO step: budget N={s.lm_budget}, G={s.lm_group}")
    steps = []
    for spec in s.lm_models:
        for dtype in model.COMPUTE_DTYPES:
            r = time_lm_step(s, spec, dtype)
            steps.append(r)
            _say(f"  {r['model']} {dtype:>8}: {r['step_s'] * 1e3:.1f} ms/step "
                 f"({r['responses_per_s']:,.0f} responses/s; first call {r['first_call_s']:.1f}s)")
    bad = [r for r in checks + agree if r["verdict"] != "PASS"]
    bad += [r for r in steps if not r["finite_accuracy"]]
    verdict = "FAIL" if bad else "PASS"
    result = dict(device=name, quick=args.quick, verdict=verdict,
                  command="python benchmarks/gpu_check.py " + " ".join(
                      sys.argv[1:] if argv is None else argv),
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  wall_s=time.perf_counter() - t_start, settings=asdict(s), device_info=info,
                  exact_vs_mc=checks, mc_chunks=chunks, bf16=agree, lm_step=steps)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{name}.md").write_text(markdown(result))
    _say(f"{verdict}: wrote {out / name}.json and .md ({result['wall_s']:.0f}s)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
