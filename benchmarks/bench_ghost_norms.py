"""Score statistics by ghost norms against one plain forward + backward pass.

For n responses (``--n``, default 16, ~24 tokens after ~40-token left-padded prompts, some
ending at an EOS) of a randomly initialised model built in memory (no download) with the shape of
SmolLM2-135M (Llama, 30 blocks, d 576, ffn 1536, 9/3 heads, vocab 49152, tied) and of
Qwen2.5-0.5B (Qwen2, 24 blocks, d 896, ffn 4864, 14/2 heads, vocab 151936, q/k/v biases, tied),
each case runs in its own subprocess and reports wall time (after one compiling call) and peak
RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) of

* ``plain``: one forward + backward pass of ``sum_n log pi(y_n|x_n)`` through the policy's own
  apply function (tunix's module), the parameter gradient (D floats) as output;
* ``ghost``: ``HFPolicy.score_contractions(..., method="ghost")`` with K = 1 weight row (the
  advisor's pass 1: every ``||s_n||^2`` and ``sum_n w_n s_n``), NumPy float64 outputs;
* ``per_sample``: the same by ``vmap(grad)`` in chunks (``method="per_sample"``), run only when
  its estimated memory (chunk x D floats plus the model) fits ``--mem-limit-gb``, else reported
  as skipped.

``base_rss`` is the process's RSS after building the model (parameters and the imports), before
any of the timed work. Usage: ``python benchmarks/bench_ghost_norms.py [--out FILE]``; writes a
Markdown table (default ``benchmarks/results/ghost_norms.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

CASES = {
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                         rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                         rms_norm_eps=1e-6, use_sliding_window=False),
}
MODES = ("plain", "ghost", "per_sample")


def _rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _current_rss_gb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def _build(case: str, seed: int = 0):
    """A random-weight HFPolicy of the case's shape (in memory; nothing is read or downloaded)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from grpo_theory.lm.checkpoints import files as io, hf, load

    cfg = dict(CASES[case], hidden_act="silu", max_position_embeddings=4096, eos_token_id=2,
               rope_scaling=None)
    arch = io.check_config(cfg, case)
    graphdef, abstract, zero = load.tunix_model(arch, jnp.float32)
    leaves, tree = jax.tree_util.tree_flatten(abstract)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    params = []
    for k, a in zip(keys, leaves):
        if len(a.shape) == 1:  # norm weights
            params.append(jnp.ones(a.shape, jnp.float32))
        else:
            params.append(0.02 * jax.random.normal(k, a.shape, jnp.float32))
    params = jax.tree_util.tree_unflatten(tree, params)
    pol = hf.hf_policy(arch, params, graphdef, zero, (2,), 2, jnp.float32, 1.0, None, case, None)
    rng = np.random.default_rng(seed)
    n, p, r = _ARGS.n, 40, 24
    x = rng.integers(10, arch["vocab_size"], size=(n, p))
    for i in range(n):
        x[i, : rng.integers(0, 7)] = hf.PROMPT_PAD  # prompts of 34..40 tokens
    y = rng.integers(10, arch["vocab_size"], size=(n, r))
    y[::3, 18] = 2  # every third response ends at an EOS
    w = rng.standard_normal((1, n)) / n
    return pol, x, y, w


def _run_case(case: str, mode: str, chunk: int, mem_limit_gb: float) -> dict:
    import jax
    import jax.numpy as jnp

    from grpo_theory.lm.budget import ghost
    from grpo_theory.lm import seq_log_probs

    pol, x, y, w = _build(case)
    d = pol.dim
    out = dict(case=case, mode=mode, n=int(x.shape[0]), tokens=int(x.shape[1] + y.shape[1]),
               D=d, base_rss_gb=_current_rss_gb())
    if mode == "plain":
        f = jax.jit(jax.grad(lambda p: jnp.sum(seq_log_probs(pol.apply_fn, p, x, y,
                                                             pol.temperature, pol.eos_ids))))
        call = lambda: jax.block_until_ready(f(pol.params))
        out["gflop"] = f.lower(pol.params).cost_analysis()["flops"] / 1e9
    elif mode == "ghost":
        call = lambda: pol.score_contractions(x, y, w, chunk=x.shape[0], method="ghost")
        out["gflop"] = ghost._ghost_jit.lower(
            ghost._arch_key(pol.config), pol.params, jnp.asarray(x, jnp.int32),
            jnp.asarray(y, jnp.int32), jnp.asarray(w, jnp.float32), pol.temperature,
            x.shape[0], pol.eos_ids, "auto", True).cost_analysis()["flops"] / 1e9
    else:
        need = (chunk * d * 4 + 3 * d * 4 + 2 * d * 8) / 2**30
        out["chunk"] = chunk
        if need > mem_limit_gb:
            out["skipped"] = (f"estimated {need:.1f} GB (chunk {chunk} x D float32 scores + "
                              f"model + outputs) > {mem_limit_gb} GB limit")
            return out
        call = lambda: pol.score_contractions(x, y, w, chunk=chunk, method="per_sample")
    t0 = time.perf_counter()
    call()
    out["first_call_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    call()
    out["time_s"] = time.perf_counter() - t0
    out["peak_rss_gb"] = _rss_gb()
    return out


def _child(case, mode, chunk, mem_limit_gb, n) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", case, mode, "--chunk",
           str(chunk), "--mem-limit-gb", str(mem_limit_gb), "--n", str(n)]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return dict(case=case, mode=mode, failed=f"exit {proc.returncode}: "
                                                 f"{proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _table(rows, load, wall) -> str:
    import jax
    lines = [
        "# Ghost-norm score statistics vs one plain forward + backward pass",
        "",
        "Command: `python benchmarks/bench_ghost_norms.py` (one run, every case in its own "
        "subprocess).",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores shared with other jobs "
        f"(load average before / after: {load[0]} / {load[1]}), JAX {jax.__version__} on CPU, "
        f"float32 parameters, x64 off (statistics accumulated in float32). Total wall time "
        f"{wall:.0f} s.",
        "",
        "Work: n responses of 24 tokens after left-padded prompts of 34-40 tokens (64 positions),"
        " every third response ending at an EOS; statistics = every ||s_n||^2 and one weighted "
        "sum sum_n w_n s_n (K = 1, the advisor's pass 1). Random weights (normal, sd 0.02).",
        "",
        "| model | D | mode | n | time (s) | first call incl. compile (s) | peak RSS (GB) | "
        "RSS before work (GB) | time / plain | peak / plain | GFLOP (XLA cost analysis) | "
        "GFLOP / plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    plain = {r["case"]: r for r in rows if r["mode"] == "plain" and "time_s" in r}
    for r in rows:
        if "time_s" not in r:
            why = r.get("skipped") or r.get("failed")
            lines.append(f"| {r['case']} | {r.get('D', '')} | {r['mode']} | {r.get('n', '')} | "
                         f"not run: {why} | | | | | | | |")
            continue
        p = plain.get(r["case"])
        tr = f"{r['time_s'] / p['time_s']:.2f}" if p else ""
        mr = f"{r['peak_rss_gb'] / p['peak_rss_gb']:.2f}" if p else ""
        mode = r["mode"] + (f" (chunk {r['chunk']})" if "chunk" in r else "") + (
            " (earlier run)" if r.get("earlier_run") else "")
        gf = f"{r['gflop']:.0f}" if "gflop" in r else "n/a"
        fr = (f"{r['gflop'] / p['gflop']:.2f}" if p and "gflop" in r and "gflop" in p
              else "")
        lines.append(f"| {r['case']} | {r['D']:,} | {mode} | {r['n']} | {r['time_s']:.2f} | "
                     f"{r['first_call_s']:.1f} | {r['peak_rss_gb']:.2f} | "
                     f"{r['base_rss_gb']:.2f} | {tr} | {mr} | {gf} | {fr} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    global _ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", nargs=2, metavar=("CASE", "MODE"))
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--previous", default=None,
                    help="JSON lines of rows measured by an earlier run, put in the table first")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=2, help="per-sample route's chunk")
    ap.add_argument("--mem-limit-gb", type=float, default=6.0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "ghost_norms.md"))
    _ARGS = ap.parse_args(argv)
    if _ARGS.child:
        print(json.dumps(_run_case(*_ARGS.child, _ARGS.chunk, _ARGS.mem_limit_gb)))
        return
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    rows = []
    if _ARGS.previous:
        with open(_ARGS.previous) as f:
            rows = [dict(json.loads(line), earlier_run=True) for line in f if line.strip()]
    for case in _ARGS.cases.split(","):
        for mode in _ARGS.modes.split(","):
            r = _child(case, mode, _ARGS.chunk, _ARGS.mem_limit_gb, _ARGS.n)
            print(json.dumps(r), flush=True)
            rows.append(r)
    load = (" ".join(f"{v:.1f}" for v in load0), " ".join(f"{v:.1f}" for v in os.getloadavg()))
    text = _table(rows, load, time.perf_counter() - t0)
    os.makedirs(os.path.dirname(os.path.abspath(_ARGS.out)), exist_ok=True)
    with open(_ARGS.out, "w") as f:
        f.write(text)
    print(text)


_ARGS = None

if __name__ == "__main__":
    main()
