"""Dense prompt packing: window-greedy packing vs naive padding, and exact loss equivalence.

Two parts (``grpo_theory.companions.packing``):

1. *Density*: sequence lengths (prompt + response tokens) from three length distributions are
   packed into rows of ``capacity`` tokens by the window-greedy packer for several window sizes;
   valid-token density (real tokens / (rows x capacity)) against naive batching (one sequence per
   row), rows against the lower bound ceil(sum L / capacity), and a round-trip check that every
   token is placed exactly once and no row exceeds its capacity.
2. *Equivalence*: a one-layer causal transformer with segment-masked attention and a GRPO-style
   per-token loss ``-sum_t (A_i / L_i) log p(y_t+1 | y_<=t)`` gives the same loss and gradient on
   packed rows as on one-sequence-per-row padding (float64, compared to rounding).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from grpo_theory.companions import packing as pk
from grpo_theory.experiments.plotting import plt, save_figure
from grpo_theory.experiments.results import CellStore, Progress, atomic_write_csv

NAME = "prompt-packing"
CLAIM = ("window-greedy dense packing raises valid-token density over naive padding; packed and "
         "unpacked losses and gradients are identical")
ORDER = 55
CAPACITY = 2048
DISTRIBUTIONS = ("uniform", "lognormal", "bimodal")
EQ_TOL = 1e-12  # relative difference of loss / gradients, packed vs unpacked


def _settings(quick: bool) -> dict:
    if quick:
        return dict(n_seq=256, n_batches=3, windows=(1, 2, 4, 8, 16, 64, 256),
                    eq_configs=((0, 12, 32), (1, 12, 32)))
    return dict(n_seq=1024, n_batches=32, windows=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024),
                eq_configs=tuple((s, n, c) for s in range(8) for n, c in ((12, 32), (24, 48))))


def sample_lengths(key, dist: str, n: int, capacity: int = CAPACITY) -> np.ndarray:
    """Prompt + response lengths (tokens), all in [1, capacity]."""
    kp, kr, kb = jax.random.split(key, 3)
    prompt = jax.random.randint(kp, (n,), 32, 257)
    room = capacity - prompt
    if dist == "uniform":
        resp = jax.random.randint(kr, (n,), 1, room + 1)
    elif dist == "lognormal":  # heavy-tailed response lengths, truncated at the row
        resp = jnp.exp(5.8 + 0.9 * jax.random.normal(kr, (n,)))
    elif dist == "bimodal":  # mostly short answers, 30% run to the length limit
        short = jax.random.randint(kr, (n,), 32, 513)
        resp = jnp.where(jax.random.bernoulli(kb, 0.3, (n,)), room, short)
    else:
        raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")
    resp = jnp.clip(jnp.round(resp), 1, room)
    return np.asarray(prompt + resp, dtype=np.int64)


def run(out_dir: Path, quick: bool = True, seed: int = 0) -> None:
    cfg = _settings(quick)
    store = CellStore(out_dir, NAME, seed=seed, setting="quick" if quick else "full")
    cells = ([("density", d, b) for d in DISTRIBUTIONS for b in range(cfg["n_batches"])]
             + [("equivalence", c, None) for c in cfg["eq_configs"]])
    prog = Progress(NAME, len(cells))
    for part, a, b in cells:
        cid = f"density_{a}_b{b}" if part == "density" else "equivalence_s{}_n{}_c{}".format(*a)
        if store.done(cid):
            prog.step(cid, skipped=True)
            continue
        if part == "density":
            rows, conf = _density_cell(a, b, cfg, seed)
        else:
            rows, conf = _equivalence_cell(*a, seed=seed)
        for r in rows:
            r["part"] = part
        store.write(cid, rows, config=conf)
        prog.step(cid)
    df = store.table()
    for part in ("density", "equivalence"):
        atomic_write_csv(Path(out_dir) / f"{part}.csv",
                         df[df.part == part].dropna(axis=1, how="all"))
    _print_summary(out_dir)


def _density_cell(dist, batch, cfg, seed):
    key = jax.random.fold_in(jax.random.PRNGKey(seed), 1000 * DISTRIBUTIONS.index(dist) + batch)
    L = sample_lengths(key, dist, cfg["n_seq"])
    ids = np.arange(L.sum())  # token ids = global token index: a placement check
    seqs = np.split(ids, np.cumsum(L)[:-1])
    naive = pk.naive_density(L, CAPACITY)
    lb = pk.row_lower_bound(L, CAPACITY)
    rows = []
    for w in cfg["windows"]:
        p = pk.pack(L, CAPACITY, w)
        packed = pk.pack_tokens(seqs, p, pad_id=-1)
        real = packed[packed >= 0]
        once = bool(real.size == ids.size and np.array_equal(np.sort(real), ids))
        back = pk.unpack_tokens(packed, p)
        roundtrip = all(np.array_equal(s, t) for s, t in zip(seqs, back))
        rows.append(dict(dist=dist, batch=batch, window=w, n_seq=L.size, capacity=CAPACITY,
                         mean_len=float(L.mean()), tokens=int(L.sum()), rows=p.n_rows,
                         rows_lower_bound=lb, density=p.density, naive_density=naive,
                         row_saving=L.size / p.n_rows, max_fill=int(p.row_fill().max()),
                         each_token_once=once, roundtrip=roundtrip))
    return rows, dict(dist=dist, n_seq=int(L.size), capacity=CAPACITY)


def _equivalence_cell(s, n, capacity, seed, vocab=7):
    """Loss and gradient of the toy LM, packed (several windows) vs one sequence per row."""
    rng_key = jax.random.PRNGKey(1000 + 17 * seed + s)
    k1, k2, k3, k4 = jax.random.split(rng_key, 4)
    L = np.asarray(jax.random.randint(k1, (n,), 1, capacity + 1))
    toks = np.asarray(jax.random.randint(k2, (int(L.sum()),), 0, vocab))
    seqs = np.split(toks, np.cumsum(L)[:-1])
    adv = np.asarray(jax.random.normal(k3, (n,)))
    params = pk.init_toy_lm(k4, vocab, capacity)
    lossgrad = pk.toy_lm_value_and_grad

    def evaluate(p):
        # pad to n rows so that every layout has the same shape (one compilation)
        pad = n - p.n_rows
        t = np.pad(pk.pack_tokens(seqs, p), ((0, pad), (0, 0)))
        seg = np.pad(p.segment_ids(), ((0, pad), (0, 0)))
        pos = np.pad(p.positions(), ((0, pad), (0, 0)))
        w = np.pad(pk.per_sequence_to_tokens(adv / L, p), ((0, pad), (0, 0)))
        return lossgrad(params, jnp.asarray(t), jnp.asarray(seg), jnp.asarray(pos),
                        jnp.asarray(w))

    ref_loss, ref_grad = evaluate(pk.naive_batching(L, capacity))
    gnorm = max(float(jnp.max(jnp.abs(g))) for g in ref_grad.values())
    rows = []
    for w in (1, 4, n):
        p = pk.pack(L, capacity, w)
        loss, grad = evaluate(p)
        gdiff = max(float(jnp.max(jnp.abs(grad[k] - ref_grad[k]))) for k in grad)
        rows.append(dict(case=s, n_seq=n, capacity=capacity, window=w, rows=p.n_rows,
                         density=p.density, naive_density=pk.naive_density(L, capacity),
                         loss_unpacked=float(ref_loss), loss_packed=float(loss),
                         loss_rel_diff=abs(float(loss - ref_loss)) / abs(float(ref_loss)),
                         grad_max_abs=gnorm, grad_max_abs_diff=gdiff,
                         grad_rel_diff=gdiff / gnorm))
    return rows, dict(case=s, n_seq=n, capacity=capacity, vocab=vocab,
                      lengths=[int(v) for v in L])


def _load(out_dir):
    out_dir = Path(out_dir)
    return pd.read_csv(out_dir / "density.csv"), pd.read_csv(out_dir / "equivalence.csv")


def _checks(out_dir) -> dict:
    dens, eq = _load(out_dir)
    c = dict(
        eq_loss=float(eq.loss_rel_diff.max()), eq_grad=float(eq.grad_rel_diff.max()),
        token_once=bool(dens.each_token_once.all() and dens.roundtrip.all()),
        max_fill=int(dens.max_fill.max()), capacity=int(dens.capacity.max()),
        min_gain=float((dens.density - dens.naive_density).min()),
        rows_vs_bound=int((dens.rows - dens.rows_lower_bound).min()),
    )
    c["passed"] = bool(c["eq_loss"] <= EQ_TOL and c["eq_grad"] <= EQ_TOL and c["token_once"]
                       and c["max_fill"] <= c["capacity"] and c["min_gain"] >= 0
                       and c["rows_vs_bound"] >= 0)
    return c


def _summary_table(dens: pd.DataFrame) -> pd.DataFrame:
    return dens.groupby(["dist", "window"]).agg(
        density=("density", "mean"), naive=("naive_density", "mean"),
        rows=("rows", "mean"), lower_bound=("rows_lower_bound", "mean"),
        row_saving=("row_saving", "mean"), n=("batch", "size")).reset_index()


def _print_summary(out_dir) -> None:
    c = _checks(out_dir)
    print(json.dumps(c, indent=1))
    with pd.option_context("display.width", 160, "display.float_format", "{:.4f}".format):
        print(_summary_table(_load(out_dir)[0]).to_string(index=False))


def plot(out_dir: Path) -> None:
    dens, eq = _load(out_dir)
    t = _summary_table(dens)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for dist, d in t.groupby("dist"):
        line, = ax.plot(d.window, d.density, "o-", label=f"{dist}: packed")
        ax.axhline(d.naive.iloc[0], color=line.get_color(), ls=":", lw=1)
        dd = dens[dens.dist == dist]
        best = float((dd.tokens / (dd.rows_lower_bound * CAPACITY)).mean())
        ax.axhline(best, ls="--", lw=0.8, color=line.get_color())
    ax.set(xscale="log", xlabel="window w (sequences the packer looks ahead)",
           ylabel="valid-token density", ylim=(0, 1.02))
    ax.set_title(f"Window-greedy packing into {CAPACITY}-token rows\n(dotted: naive padding, "
                 "dashed: ceil(ΣL/C) bound)", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, Path(out_dir) / "packing_density")


def report(out_dir: Path) -> dict:
    dens, eq = _load(out_dir)
    c = _checks(out_dir)
    t = _summary_table(dens)
    lines = [
        f"Rows of {CAPACITY} tokens; {int(dens.n_seq.iloc[0])} sequences per batch, "
        f"{int(dens.batch.nunique())} batches per length distribution (prompt 32-256 tokens + a "
        "response: uniform / lognormal / bimodal with 30% at the length limit).", "",
        "| distribution | window | density (packed) | density (naive) | rows / lower bound | "
        "rows saved x |", "|---|---|---|---|---|---|"]
    for _, r in t.iterrows():
        lines.append(f"| {r.dist} | {int(r.window)} | {r.density:.3f} | {r.naive:.3f} | "
                     f"{r.rows:.1f} / {r.lower_bound:.1f} | {r.row_saving:.2f} |")
    lines += [
        "", f"Every token placed exactly once and recovered by unpacking: {c['token_once']}; "
        f"largest row fill {c['max_fill']} <= capacity {c['capacity']}; packed density - naive "
        f">= {c['min_gain']:.3f}; rows - lower bound >= {c['rows_vs_bound']}.", "",
        f"**Equivalence** ({eq.case.nunique() * eq.n_seq.nunique()} random batches x windows "
        f"{sorted(set(int(w) for w in eq.window))}, segment-masked causal attention, GRPO-style "
        "per-token loss): max relative difference packed vs unpacked "
        f"loss {c['eq_loss']:.1e}, gradient {c['eq_grad']:.1e} (PASS <= {EQ_TOL:g}).", "",
        "![](packing_density.png)"]
    return dict(title="Dense prompt packing: density and exact equivalence",
                markdown="\n".join(lines), passed=c["passed"])


if __name__ == "__main__":  # pragma: no cover
    run(Path("results") / NAME)
