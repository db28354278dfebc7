"""Repeated statistics calls in one process under one memory budget: the chunk each call
chooses, the resident memory each leaves, the live JAX arrays and the peak.

A random-weight Hugging Face checkpoint of a small Llama shape (4 blocks, d_model 256, SwiGLU
512, vocab 4096, 2.9M parameters, in a temporary directory) is loaded by
:func:`grpo_theory.lm.from_pretrained`; then :func:`grpo_theory.lm.budget.statistics.
lm_rollout_statistics` (sampling, the ghost-norm pass, the dots pass) runs ``--calls`` times
with ``chunk=None`` and the same budget: the resident memory at the first call plus the
model's ``M(c)`` at ``--rows`` sequences (:func:`grpo_theory.lm.budget.memory.chunk_bytes`). Each
rule runs in its own process:

* ``live``: the package's rule, ``B = max(0, RSS_0 - L_0) + L_now - P``
  (:func:`grpo_theory.lm.budget.memory.resident_base`);
* ``rss``: the earlier rule, ``B = RSS_now - D b`` read at every call (everything resident
  counted, also what the previous call left for reuse).

After the calls, ``gc.collect()`` and then ``jax.clear_caches()`` are run and the resident
memory read after each (what of the growth they give back). Peak: ``VmHWM`` of
``/proc/self/status``.

    python benchmarks/bench_memory_repeat.py            # writes results/memory_repeat.md/.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
SHAPE = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=256,
             intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=4096, tie_word_embeddings=True,
             rope_theta=10000.0, rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False)
MIB = 2**20


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def run_rule(ckpt: str, rule: str, calls: int, rows: int, n_prompts: int, n_samples: int,
             prompt_len: int, response_len: int) -> dict:
    """The calls of one rule in this process."""
    import jax

    from grpo_theory import lm
    from grpo_theory.lm.budget import memory as M, options as O
    from grpo_theory.lm import lm_rollout_statistics

    pol = lm.from_pretrained(ckpt)
    d, b = O.score_memory(pol)
    if rule == "rss":
        O.resident_base = lambda params: max(0, M.process_rss() - d * b)
    rng = np.random.default_rng(0)
    x = rng.integers(3, SHAPE["vocab_size"], size=(n_prompts, prompt_len))
    a = pol.row_bytes(prompt_len + response_len, response_len)
    budget = M.chunk_bytes(d, rows, dtype_bytes=b, row_bytes=a,
                           base_bytes=max(0, M.process_rss() - d * b))
    out = dict(rule=rule, n_params=d, row_bytes=a, budget=budget, calls=[])
    for i in range(calls):
        rss0, live0 = M.process_rss(), M.live_array_bytes()
        try:
            st = lm_rollout_statistics(pol, x, lambda r, y: rng.standard_normal(len(r)),
                                       n_samples, i, response_len, chunk=None,
                                       memory_budget=budget)
            chunk = int(st.chunk)
        except ValueError as e:
            chunk = f"refused: {str(e).split(':')[0]}"
        out["calls"].append(dict(chunk=chunk, rss_before=rss0, rss_after=M.process_rss(),
                                 live_before=live0, live_after=M.live_array_bytes(),
                                 peak=_status("VmHWM")))
    gc.collect()
    out["rss_after_gc"] = M.process_rss()
    jax.clear_caches()
    gc.collect()
    out["rss_after_clear_caches"] = M.process_rss()
    return out


def write_checkpoint(path: Path) -> str:
    sys.path.insert(0, str(ROOT))
    import bench_lm_statistics as B

    B.SHAPES["small"] = SHAPE
    return str(B.write_checkpoint(path, "small"))


def table(rows: list[dict], args) -> str:
    lines = ["# Repeated statistics calls under one memory budget", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
             f"{platform.python_version()}; `python benchmarks/bench_memory_repeat.py` "
             f"({args.n_prompts} prompts x {args.n_samples} samples, {args.prompt_len} prompt + "
             f"{args.response_len} response tokens, budget sized for {args.rows} sequences). "
             "Memory in MiB; `live` is the bytes of `jax.live_arrays()`.", ""]
    for r in rows:
        lines += [f"## rule `{r['rule']}`: D = {r['n_params']:,}, a = {r['row_bytes'] / MIB:.2f} "
                  f"MiB per sequence, budget {r['budget'] / MIB:.0f} MiB", "",
                  "| call | chunk | RSS before | RSS after | live before | live after | "
                  "peak so far | peak / budget |", "|---|---|---|---|---|---|---|---|"]
        for i, c in enumerate(r["calls"]):
            lines.append(f"| {i + 1} | {c['chunk']} | {c['rss_before'] / MIB:.0f} | "
                         f"{c['rss_after'] / MIB:.0f} | {c['live_before'] / MIB:.1f} | "
                         f"{c['live_after'] / MIB:.1f} | {c['peak'] / MIB:.0f} | "
                         f"{c['peak'] / r['budget']:.2f} |")
        lines += ["", f"After the calls: RSS {r['calls'][-1]['rss_after'] / MIB:.0f}, after "
                  f"`gc.collect()` {r['rss_after_gc'] / MIB:.0f}, after `jax.clear_caches()` "
                  f"{r['rss_after_clear_caches'] / MIB:.0f}.", ""]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--rows", type=int, default=80)
    p.add_argument("--n-prompts", type=int, default=8)
    p.add_argument("--n-samples", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=24)
    p.add_argument("--response-len", type=int, default=32)
    p.add_argument("--rule", choices=("live", "rss"))
    p.add_argument("--ckpt")
    p.add_argument("--out", default=str(ROOT / "results" / "memory_repeat"))
    args = p.parse_args(argv)
    if args.rule:  # one rule, this process
        print(json.dumps(run_rule(args.ckpt, args.rule, args.calls, args.rows, args.n_prompts,
                                  args.n_samples, args.prompt_len, args.response_len)))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_checkpoint(Path(tmp) / "small")
        for rule in ("live", "rss"):
            cmd = [sys.executable, __file__, "--rule", rule, "--ckpt", ckpt] + [
                f"--{k}={getattr(args, k.replace('-', '_'))}" for k in
                ("calls", "rows", "n-prompts", "n-samples", "prompt-len", "response-len")]
            res = subprocess.run(cmd, check=True, capture_output=True, text=True)
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1))
    Path(args.out + ".md").write_text(table(rows, args))
    print(table(rows, args))


if __name__ == "__main__":
    main()
