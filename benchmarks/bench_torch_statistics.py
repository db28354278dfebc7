"""The torch route's statistics against one plain forward+backward pass of the same rows.

``grpo_theory.torch.score_statistics`` (every per-sample squared norm, every prompt's
``||ghat_a||^2`` and ``<ghat_a, S>``) is one forward pass and one backward pass to the module
outputs, plus per-layer products (:mod:`grpo_theory.torch.ghost`). A training step on the same
rows is one forward and one backward pass to the parameters: the ``plain`` case,
``sequence_log_probs(...)`` summed with advantage weights and ``.backward()``, which is what a
GRPO step costs on these rows in torch. Cases, each in its own process (peak RSS is the
case's: ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of a wrapper whose only child it is):

* ``plain``: the training step's forward+backward;
* ``stats``: the statistics in one pass (the default ``chunk``: all prompts);
* ``stats-chunk1``: one prompt per pass (bounded activations; the per-prompt means kept when
  they fit in ``STORE_MEANS_BYTES``, else the dots in a second pass);
* ``paired``: ``plain`` and ``stats`` called alternately in one process, ``--repeats`` pairs
  after one warm-up pair: the time ratio of each pair (both under the same load of the
  machine), and its median;
* ``naive``: per-sample autograd (one backward pass per response, each prompt's mean gradient
  kept, m x D floats): the alternative a user would write (SmolLM2 only by default).

Models: ``smollm2``, SmolLM2-135M-Instruct itself from its GGUF file (``--gguf``, loaded by
transformers' GGUF support and dequantized to float32), with 6 chat prompts rendered by its
own chat template and responses sampled from the policy (:func:`sample_from_policy`); without
``--gguf``, random weights of its shape. ``qwen05``: random weights of Qwen2.5-0.5B's shape
(q/k/v biases, tied 151936-token vocabulary), random prompts of the same lengths.

    python benchmarks/bench_torch_statistics.py --gguf ~/.cache/grpo-theory/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Writes ``benchmarks/results/torch_statistics.md`` and the raw rows as ``.json``.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent
QUESTIONS = ["What is 1 + 2?", "What is 7 - 3?", "What is 4 + 4?", "What is 9 - 5?",
             "What is 2 + 6?", "What is 8 - 1?"]
CASES = ("plain", "stats", "stats-chunk1", "naive", "paired")
SHAPES = {
    "smollm2": dict(kind="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                    tie_word_embeddings=True, rope_theta=100000.0, rms_norm_eps=1e-5),
    "qwen05": dict(kind="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                   num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                   tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6),
}
TITLES = {"smollm2": "SmolLM2-135M-Instruct", "qwen05": "Qwen2.5-0.5B shape (random)"}


def _model(shape, gguf):
    import torch
    from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig,
                              LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM)

    if shape == "smollm2" and gguf:
        p = Path(gguf).expanduser()
        tok = AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name)
        return AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name).float(), tok
    c = dict(SHAPES[shape])
    kind = c.pop("kind")
    torch.manual_seed(0)
    cfg = dict(c, max_position_embeddings=2048, pad_token_id=1, eos_token_id=2,
               initializer_range=0.02)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**cfg)).float(), None
    return Qwen2ForCausalLM(Qwen2Config(use_sliding_window=False, **cfg)).float(), None


def _rollouts(model, tok, n_samples, response_len, seed=0):
    """(x, xm, y, ym, z): left-padded prompts, sampled responses, 0/1 rewards."""
    import torch

    from grpo_theory.torch import response_mask_from_eos
    from grpo_theory.torch.sampling import sample_from_policy

    g = torch.Generator().manual_seed(seed)
    m = len(QUESTIONS)
    if tok is not None:
        texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                         add_generation_prompt=True) for q in QUESTIONS]
        tok.padding_side = "left"
        if tok.pad_token is None:  # SmolLM2's config pads with its eos <|im_end|> (id 2)
            tok.pad_token_id = model.config.pad_token_id
        pad = tok.pad_token_id
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        x, xm = enc["input_ids"], enc["attention_mask"]
        eos = [tok.eos_token_id]
        torch.manual_seed(seed)
        y = sample_from_policy(model, x, xm, n_samples, 1.0, response_len, pad, eos)
    else:
        P = 40  # the chat prompts' length
        x = torch.randint(3, model.config.vocab_size, (m, P), generator=g)
        xm = torch.ones_like(x)
        eos = [model.config.eos_token_id]
        y = torch.randint(3, model.config.vocab_size, (m * n_samples, response_len), generator=g)
    T = y.shape[1]
    y = y.reshape(m, n_samples, T)
    ym = response_mask_from_eos(y, eos)
    z = torch.randint(0, 2, (m, n_samples), generator=g).double().numpy()
    return x, xm, y, ym, z


def run_case(shape, case, gguf, n_samples, response_len, repeats):
    import numpy as np
    import torch

    from grpo_theory.torch import score_statistics, sequence_log_probs

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    model, tok = _model(shape, gguf)
    x, xm, y, ym, z = _rollouts(model, tok, n_samples, response_len)
    m, n, T = y.shape
    params = [p for p in model.parameters() if p.requires_grad]
    D = sum(p.numel() for p in params)
    xs, xms = x.repeat_interleave(n, 0), xm.repeat_interleave(n, 0)
    ys, yms = y.reshape(-1, T), ym.reshape(-1, T)
    adv = torch.as_tensor((z - z.mean(1, keepdims=True)).reshape(-1))

    def plain():
        model.zero_grad(set_to_none=True)
        logp = sequence_log_probs(model, xs, xms, ys, yms)
        (logp * adv.to(logp.dtype)).sum().backward()

    def stats(chunk=None):
        return score_statistics(model, x, y, z, prompt_mask=xm, response_mask=ym, chunk=chunk)

    def naive():
        # per-sample autograd: the squared norms, each prompt's mean kept (m x D float32), S
        ghat, q = [], []
        for a in range(m):
            acc = [torch.zeros_like(p) for p in params]
            for i in range(n):
                r = a * n + i
                lp = sequence_log_probs(model, xs[r:r + 1], xms[r:r + 1], ys[r:r + 1],
                                        yms[r:r + 1])
                gs = torch.autograd.grad(lp.sum(), params)
                q.append(sum(float(torch.sum(g.double() ** 2)) for g in gs))
                for t, g in zip(acc, gs):
                    t.add_(g, alpha=float(z[a, i]) / n)
            ghat.append(acc)
        S = [sum(g[k] for g in ghat) for k in range(len(params))]
        return q, [sum(float(torch.sum(u.double() * v.double())) for u, v in zip(g, S))
                   for g in ghat]

    info = dict(case=case, D=D, rows=m * n, prompt_len=int(x.shape[1]), response_len=T,
                response_tokens=int(ym.sum()))
    if case == "paired":  # plain and stats alternately in one process: the same load on both
        plain(), stats()
        tp, ts = [], []
        for _ in range(repeats):
            for f, out in ((plain, tp), (stats, ts)):
                t0 = time.perf_counter()
                f()
                out.append(time.perf_counter() - t0)
        ratios = [b / a for a, b in zip(tp, ts)]
        return dict(info, plain_s=tp, stats_s=ts, ratios=ratios,
                    median_ratio=float(np.median(ratios)), median_s=float(np.median(ts)),
                    plain_median_s=float(np.median(tp)))
    fn = {"plain": plain, "stats": stats, "stats-chunk1": lambda: stats(1), "naive": naive}[case]
    times = []
    for _ in range(1 if case == "naive" else repeats + 1):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    kept = times if case == "naive" else times[1:]
    return dict(info, first_s=times[0], median_s=float(np.median(kept)), times=kept)


def _measure(argv):
    p = subprocess.run([sys.executable, __file__, "--run", *argv], capture_output=True, text=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(json.dumps(dict(error=last, peak_rss_bytes=peak)))
        return
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["peak_rss_bytes"] = peak
    print(json.dumps(res))


def _machine():
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    import torch
    import transformers

    return (f"{cpu}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}, transformers {transformers.__version__}, CPU, float32")


def _report(rows, args, machine, load):
    gib = 2 ** 30
    lines = ["# The torch route's statistics vs one plain forward+backward pass", "",
             f"`python benchmarks/bench_torch_statistics.py{' --gguf ' + args.gguf if args.gguf else ''}"
             f" --models {' '.join(args.models)} --n-samples {args.n_samples} --response-len "
             f"{args.response_len} --repeats {args.repeats}"
             f"{'' if list(args.cases) == list(CASES) else ' --cases ' + ' '.join(args.cases)}`: "
             f"6 prompts x {args.n_samples} "
             f"responses; median of {args.repeats} calls after one warm-up call (naive: one "
             f"call).", "", f"Machine: {machine}. Load average at start {load[0]:.2f} / "
             f"{load[1]:.2f} / {load[2]:.2f}.", "",
             "`paired` rows: the median over pairs of (stats time / plain time), each pair run "
             "back to back in one process (robust to the machine's load, which changes the "
             "separate cases' times).", "",
             "| model | D | rows | prompt / response tokens | case | median s | x plain | "
             "peak RSS GiB | x plain |", "|---|---|---|---|---|---|---|---|---|"]
    by = {(r["shape"], r["case"]): r for r in rows if "error" not in r}
    for r in rows:
        if "error" in r:
            lines.append(f"| {TITLES[r['shape']]} | | | | {r['case']} | failed: {r['error']} "
                         f"| | | |")
            continue
        if r["case"] == "paired":
            continue
        p = by.get((r["shape"], "plain"))
        lines.append(f"| {TITLES[r['shape']]} | {r['D']:,} | {r['rows']} | {r['prompt_len']} / "
                     f"{r['response_len']} | {r['case']} | {r['median_s']:.2f} | "
                     f"{r['median_s'] / p['median_s']:.2f} | {r['peak_rss_bytes'] / gib:.2f} | "
                     f"{r['peak_rss_bytes'] / p['peak_rss_bytes']:.2f} |")
    for r in rows:
        if r.get("case") == "paired" and "error" not in r:
            lines.append(f"| {TITLES[r['shape']]} | {r['D']:,} | {r['rows']} | {r['prompt_len']} "
                         f"/ {r['response_len']} | paired: plain {r['plain_median_s']:.2f} s, "
                         f"stats {r['median_s']:.2f} s | **{r['median_ratio']:.2f}** (pairs: "
                         f"{', '.join(f'{v:.2f}' for v in r['ratios'])}) | | |")
    lines += ["", "`x plain`: time and peak memory over the `plain` case of the same model "
              "(the whole process's peak RSS, the model's parameters and Python included).", ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    ap.add_argument("--gguf", default=None, help="SmolLM2-135M-Instruct's GGUF file")
    ap.add_argument("--n-samples", type=int, default=4)
    ap.add_argument("--response-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--naive-everywhere", action="store_true",
                    help="run the naive case on every model (m x D floats held)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "torch_statistics.md")
    ap.add_argument("--run", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    flags = ["--n-samples", str(args.n_samples), "--response-len", str(args.response_len),
             "--repeats", str(args.repeats)] + (["--gguf", args.gguf] if args.gguf else [])
    if args.run:
        shape, case = args.run
        print(json.dumps(run_case(shape, case, args.gguf, args.n_samples, args.response_len,
                                  args.repeats)))
        return
    if args.measure:
        _measure([*args.measure, *flags])
        return
    machine, load, rows = _machine(), os.getloadavg(), []
    for shape in args.models:
        for case in args.cases:
            if case == "naive" and shape != "smollm2" and not args.naive_everywhere:
                continue
            p = subprocess.run([sys.executable, __file__, "--measure", shape, case, *flags],
                               capture_output=True, text=True)
            res = json.loads(p.stdout.strip().splitlines()[-1])
            res.update(shape=shape, case=case, load_before=os.getloadavg()[0])
            print(json.dumps(res), file=sys.stderr, flush=True)
            rows.append(res)
    text = _report(rows, args, machine, load)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(dict(machine=machine, load=load,
                                                             rows=rows), indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main()
