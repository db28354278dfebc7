"""Time and peak memory of the advisor's per-sample statistics against one plain forward+backward
pass, on random-weight models of real shapes.

Two shapes, each written as a Hugging Face checkpoint folder of random weights in a temporary
directory and loaded by :func:`grpo_theory.lm.from_pretrained` (the advisor's route):

* ``smollm2``: SmolLM2-135M's shape (Llama: 30 blocks, d_model 576, SwiGLU 1536, 9 query / 3 KV
  heads, vocab 49152, tied embeddings);
* ``qwen05``: Qwen2.5-0.5B's shape (Qwen2: 24 blocks, d_model 896, SwiGLU 4864, 14 query / 2 KV
  heads, vocab 151936, tied, q/k/v biases).

For each shape, n responses (n_prompts x n_samples, random prompt ids, sampled from the model)
and two cases, each in its own process (so compilation is included and the peak is the
case's): ``plain``, the gradient of the summed log-probability of the n responses (one
forward+backward pass, what a training step costs), and ``stats``, the advisor's statistics
over the same n responses (:func:`grpo_theory.lm.budget.statistics.lm_rollout_statistics`: the
squared norm of every per-sample score and of every prompt's weighted sum by ghost norms in
blocks of ``chunk`` responses (one backward pass per block), then the dot products with the
total weighted sum in one forward-mode pass, or in the same backward pass when one block holds
all n) at the chunk the memory budget picks (rounded down to whole prompts)
(:func:`grpo_theory.lm.budget.memory.chunk_for_budget` with the activations per sequence,
:func:`grpo_theory.lm.budget.memory.ghost_row_bytes`). Each timed call runs twice; the first
includes compilation. Peak memory: ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` of a
wrapper process whose only child is the case.

    python benchmarks/bench_lm_statistics.py                      # both shapes, n = 16
    python benchmarks/bench_lm_statistics.py --n-prompts 16 --n-samples 8 \
        --memory-budget smollm2=4GB qwen05=12GB                   # the committed run
    python benchmarks/bench_lm_statistics.py --models smollm2 --n-prompts 16 --n-samples 8 \
        --memory-budget 16GB --out benchmarks/results/lm_statistics_one_block.md  # one block

Writes ``benchmarks/results/lm_statistics.md`` (the table, the machine and its load) and the
raw rows as ``lm_statistics.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from grpo_theory.lm.budget.memory import chunk_bytes
from grpo_theory.lm import parse_memory

ROOT = Path(__file__).resolve().parent
SHAPES = {
    "smollm2": dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=576,
                    intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True,
                    rope_theta=100000.0, rms_norm_eps=1e-5, attention_bias=False,
                    mlp_bias=False),
    "qwen05": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=896,
                   intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                   num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                   rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False),
}
TITLES = {"smollm2": "SmolLM2-135M shape", "qwen05": "Qwen2.5-0.5B shape"}


def write_checkpoint(path: Path, shape: str, seed: int = 0) -> Path:
    """A Hugging Face checkpoint folder of random float32 weights of ``shape`` (scale 0.02, norm
    weights 1) with a two-token word-level tokenizer."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models

    c = dict(SHAPES[shape], hidden_act="silu", eos_token_id=2, pad_token_id=1,
             max_position_embeddings=2048, rope_scaling=None)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(c))
    Tokenizer(models.WordLevel({"<unk>": 0, "<pad>": 1, "</s>": 2}, unk_token="<unk>")).save(
        str(path / "tokenizer.json"))
    rng = np.random.default_rng(seed)
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    h, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // h

    def r(*s):
        return (0.02 * rng.standard_normal(s, dtype=np.float32)).astype(np.float32)

    w = {"model.embed_tokens.weight": r(v, d), "model.norm.weight": np.ones(d, np.float32)}
    for i in range(c["num_hidden_layers"]):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        w[a + "q_proj.weight"], w[a + "k_proj.weight"] = r(h * hd, d), r(kv * hd, d)
        w[a + "v_proj.weight"], w[a + "o_proj.weight"] = r(kv * hd, d), r(d, h * hd)
        if c["model_type"] == "qwen2":
            w[a + "q_proj.bias"], w[a + "k_proj.bias"] = r(h * hd), r(kv * hd)
            w[a + "v_proj.bias"] = r(kv * hd)
        w[m + "gate_proj.weight"], w[m + "up_proj.weight"] = r(f, d), r(f, d)
        w[m + "down_proj.weight"] = r(d, f)
        w[f"model.layers.{i}.input_layernorm.weight"] = np.ones(d, np.float32)
        w[f"model.layers.{i}.post_attention_layernorm.weight"] = np.ones(d, np.float32)
    save_file(w, str(path / "model.safetensors"))
    return path


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_case(ckpt: str, case: str, n_prompts: int, n_samples: int, prompt_len: int,
             response_len: int, memory_budget: int | None, repeat: int = 1) -> dict:
    """One case in this process; returns its times (first call with compilation, then the
    fastest of ``repeat`` more calls, with that call's phases)."""
    import jax
    import jax.numpy as jnp

    from grpo_theory.lm import default_memory_budget, from_pretrained, lm_rollout_statistics
    from grpo_theory.lm.budget import resolve_chunk, score_memory
    from grpo_theory.lm.budget.memory import process_rss
    from grpo_theory.lm.policy import weighted_grad

    pol, t_load = _timed(lambda: from_pretrained(ckpt))
    d, b = score_memory(pol)
    n = n_prompts * n_samples
    rng = np.random.default_rng(0)
    x = rng.integers(3, pol.vocab_size, size=(n_prompts, prompt_len)).astype(np.int32)
    z = rng.integers(0, 2, size=n).astype(np.float64)  # fixed 0/1 rewards
    out = dict(case=case, D=d, n=n, load_s=t_load)
    if case == "plain":
        xs = np.repeat(x, n_samples, axis=0)
        y, t_sample = _timed(lambda: np.asarray(pol.sample_blocked(0, xs, response_len)))

        def step():
            g = weighted_grad(pol.apply_fn, pol.params, jnp.asarray(xs), jnp.asarray(y),
                              jnp.ones(n), pol.temperature, tuple(pol.eos_ids))
            return jax.block_until_ready(g)

        _, t1 = _timed(step)
        t2 = min(_timed(step)[1] for _ in range(repeat))
        out.update(sample_s=t_sample, first_s=t1, second_s=t2, chunk=None)
        return out
    budget = default_memory_budget() if memory_budget is None else memory_budget
    base = max(0, process_rss() - d * b)  # what resolve_chunk counts first
    chunk = resolve_chunk(pol, None, n, budget, seq_len=prompt_len + response_len,
                          response_len=response_len, group_size=n_samples)
    row_bytes = pol.row_bytes(prompt_len + response_len, response_len)
    marks = {}

    def stage(phase, done, total):
        marks.setdefault(phase, [time.perf_counter(), None])
        if done == total:
            marks[phase][1] = time.perf_counter()

    def stats():
        marks.clear()
        return lm_rollout_statistics(pol, x, lambda rows, y: z, n_samples, 0, response_len,
                                     chunk=chunk, stage=stage)

    st, t1 = _timed(stats)
    first = {k: v[1] - v[0] for k, v in marks.items()}
    t2, second = np.inf, {}
    for _ in range(repeat):
        _, t = _timed(stats)
        if t < t2:
            t2, second = t, {k: v[1] - v[0] for k, v in marks.items()}
    out.update(chunk=st.chunk, budget_chunk=chunk, budget=budget, base_bytes=base, row_bytes=row_bytes, first_s=t1, second_s=t2,
               first_phases=first, second_phases=second)
    return out


def _measure(argv) -> None:
    """Wrapper process: run the case as its only child; print its JSON with the peak RSS."""
    p = subprocess.run([sys.executable, __file__, "--run", *argv], capture_output=True,
                       text=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB (Linux)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(json.dumps(dict(error=last, peak_rss_bytes=peak)))
        return
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["peak_rss_bytes"] = peak
    print(json.dumps(res))


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    from grpo_theory.lm.budget.memory import available_memory

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return (f"{cpu}, {os.cpu_count()} cores visible ({len(os.sched_getaffinity(0))} in this run's CPU affinity), {total / 2**30:.1f} GiB RAM "
            f"({available_memory() / 2**30:.1f} GiB available at start), Python "
            f"{platform.python_version()}, jax {__import__('jax').__version__}, CPU backend")


def _gib(n):
    return f"{n / 2**30:.2f}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    ap.add_argument("--n-prompts", type=int, default=4)
    ap.add_argument("--n-samples", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--response-len", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=1,
                    help="timed calls after the first (the fastest is reported)")
    ap.add_argument("--memory-budget", nargs="+", default=None,
                    help="budget of the stats case, for every model or per model as "
                         "MODEL=BUDGET (default: half the available memory)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "lm_statistics.md")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the markdown from the rows of the last run (the .json next "
                         "to --out); nothing is measured")
    ap.add_argument("--run", nargs=2, metavar=("CKPT", "CASE"), help=argparse.SUPPRESS)
    ap.add_argument("--measure", nargs=2, metavar=("CKPT", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.run:
        b = _budget_for(args, None)
        budget = None if b is None else parse_memory(b)
        ckpt, case = args.run
        print(json.dumps(run_case(ckpt, case, args.n_prompts, args.n_samples, args.prompt_len,
                                  args.response_len, budget, args.repeat)))
        return
    if args.measure:
        _measure([*args.measure, *_flags(args, None)])
        return
    if args.report_only:
        saved = json.loads(args.out.with_suffix(".json").read_text())
        text = _report(saved["rows"], args, saved["machine"], saved["load"])
        args.out.write_text(text)
        print(text)
        return
    machine = _machine()
    load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-lm-stats-") as tmp:
        for shape in args.models:
            ckpt, t = _timed(lambda: write_checkpoint(Path(tmp) / shape, shape))
            print(f"{shape}: random checkpoint written in {t:.1f}s", file=sys.stderr,
                  flush=True)
            for case in ("plain", "stats"):
                p = subprocess.run([sys.executable, __file__, "--measure", str(ckpt), case,
                                    *_flags(args, shape)], capture_output=True, text=True)
                res = json.loads(p.stdout.strip().splitlines()[-1])
                res.update(shape=shape, case=case, load_before=os.getloadavg()[0])
                print(json.dumps(res), file=sys.stderr, flush=True)
                rows.append(res)
            import shutil

            shutil.rmtree(ckpt)
    text = _report(rows, args, machine, load)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(dict(machine=machine, load=load,
                                                             rows=rows), indent=1) + "\n")
    print(text)


def _budget_for(args, shape):
    """The budget text for ``shape`` (None: every model's entry or the only one given)."""
    if not args.memory_budget:
        return None
    plain = [b for b in args.memory_budget if "=" not in b]
    named = dict(b.split("=", 1) for b in args.memory_budget if "=" in b)
    return named.get(shape, plain[0] if plain else None) if shape else (
        plain[0] if plain else None)


def _flags(args, shape) -> list:
    out = ["--n-prompts", str(args.n_prompts), "--n-samples", str(args.n_samples),
           "--prompt-len", str(args.prompt_len), "--response-len", str(args.response_len)]
    if args.repeat != 1:
        out += ["--repeat", str(args.repeat)]
    b = _budget_for(args, shape)
    if b is not None:
        out += ["--memory-budget", b]
    return out


def _estimate(r) -> int:
    """The memory model's bytes for a stats row (the ghost route: its activations per row)."""
    return chunk_bytes(r["D"], r["chunk"], dtype_bytes=4, row_bytes=r.get("row_bytes"),
                       base_bytes=r.get("base_bytes", 0))


def _one_pass(r) -> bool:
    """Whether a stats row ran one pass (no second-pass phase recorded)."""
    ph = r.get("second_phases", {})
    return "scores" in ph and "dots" not in ph and "gradients" not in ph


def _report(rows, args, machine, load) -> str:
    n = args.n_prompts * args.n_samples
    f = _flags(args, None)
    if "--memory-budget" in f:
        f = f[:f.index("--memory-budget")]
    flags = " ".join(f + (["--memory-budget", *args.memory_budget]
                                                if args.memory_budget else []))
    lines = ["# The advisor's statistics (ghost norms) vs one forward+backward pass", "",
             f"`python benchmarks/bench_lm_statistics.py --models {' '.join(args.models)} "
             f"{flags}`: n = {n} responses ({args.n_prompts} prompts x {args.n_samples} "
             f"samples), prompts of {args.prompt_len} random tokens, responses of "
             f"{args.response_len} sampled tokens (random weights rarely emit EOS: "
             f"{args.prompt_len + args.response_len} tokens per sequence), float32.", "",
             f"Machine: {machine}. Load average at start {load[0]:.2f} / {load[1]:.2f} / "
             f"{load[2]:.2f} (1/5/15 min; 2 cores: above 2 the cores are shared with other "
             f"jobs and times are slower and noisier than on an idle machine).", "",
             "`plain`: the gradient of the summed log-probability of the n responses (one "
             "forward+backward pass over all n at once). `stats`: the advisor's statistics "
             "over the same n (`lm_rollout_statistics`: every per-sample squared norm by "
             "ghost norms in blocks of `chunk` responses (the budget's chunk rounded down to "
             "whole prompts), with every prompt's weighted sum of scores (its ghost norm) and "
             "the total weighted sum S, one backward pass per block; then every <s_i, S> in "
             "one forward-mode pass, or, when one block holds all n, in the same backward "
             "pass as each layer's S completes), sampling included; its phases are listed "
             f"after the table. First call includes compilation; `second call s` is the fastest "
             f"of the {args.repeat} call(s) after it. Peak RSS: "
             "`getrusage(RUSAGE_CHILDREN).ru_maxrss` of a wrapper whose only child is the "
             "case.", "",
             "`estimate GiB`: the budget's memory model at that chunk "
             "(`grpo_theory.lm.budget.memory.chunk_bytes` with `row_bytes = ghost_row_bytes`, "
             "float32, and `base_bytes` the process's resident memory beyond the parameters "
             "when the chunk was chosen).", "",
             "| model | D | case | chunk | budget GiB | estimate GiB | first call s | "
             "second call s | peak RSS GiB | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {TITLES[r['shape']]} | | {r['case']} | | | | failed: "
                         f"{r['error']} | | {_gib(r['peak_rss_bytes'])} | "
                         f"{r['load_before']:.1f} |")
            continue
        lines.append(f"| {TITLES[r['shape']]} | {r['D']:,} | {r['case']} | "
                     f"{r.get('chunk') or '-'} | "
                     f"{_gib(r['budget']) if r.get('budget') else '-'} | "
                     f"{_gib(_estimate(r)) if r.get('chunk') else '-'} | "
                     f"{r['first_s']:.1f} | "
                     f"{r['second_s']:.1f} | {_gib(r['peak_rss_bytes'])} | "
                     f"{r['load_before']:.1f} |")
    lines += ["", "Phases of `stats` (that fastest call, seconds) and ratios to `plain`:", ""]
    by = {(r["shape"], r["case"]): r for r in rows if "error" not in r}
    for shape in args.models:
        p, s = by.get((shape, "plain")), by.get((shape, "stats"))
        if not (p and s):
            continue
        ph = s["second_phases"]
        score_t = ph.get("scores", float("nan"))
        grad_t = ph.get("dots", ph.get("gradients", 0.0 if _one_pass(s) else float("nan")))
        pass2 = ("forward-mode dots" if "dots" in ph else "per-prompt gradients"
                 if "gradients" in ph else "no second pass (one block: the dots in the "
                 "ghost-norm pass)")
        lines.append(f"* {TITLES[shape]}: sampling {ph.get('sampling', float('nan')):.1f}, "
                     f"ghost-norm pass {score_t:.1f}, {pass2} "
                     f"{grad_t:.1f}; without sampling, stats / plain time "
                     f"{(score_t + grad_t) / p['second_s']:.2f}x (ghost-norm pass alone "
                     f"{score_t / p['second_s']:.2f}x); with sampling "
                     f"{s['second_s'] / p['second_s']:.2f}x; peak memory "
                     f"{s['peak_rss_bytes'] / p['peak_rss_bytes']:.2f}x "
                     f"({_gib(s['peak_rss_bytes'])} vs {_gib(p['peak_rss_bytes'])} GiB).")
    for r in rows:
        if "error" not in r and r.get("chunk"):
            est = _estimate(r)
            lines.append(f"* Memory model, {TITLES[r['shape']]}: {_gib(est)} GiB estimated at "
                         f"chunk {r['chunk']}, {_gib(r['peak_rss_bytes'])} GiB measured "
                         f"(the whole process: Python, JAX, the model, sampling and "
                         f"{'the one pass' if _one_pass(r) else 'both passes'}); the "
                         f"estimate is {est / r['peak_rss_bytes']:.2f}x the peak.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
