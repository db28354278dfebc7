"""Figure 5 / Table 2 analogue: the best group size under a fixed budget N = B G in GRPO training.

From the instruct policy (answer-only format, :mod:`grpo_theory.lm.grpo`), Algorithm 1 with Adam
at budgets N and group sizes G, several seeds; held-out accuracy (exact expected reward on the
evaluation questions) at several checkpoints; the best G per checkpoint and N with a bootstrap
CI over seeds; next to it G* = 1 + sqrt(c3/c1) predicted from c1, c3 measured at the starting
policy (Theorem 7). The report states where the prediction holds (G* inside the bootstrap CI of
the best G) and where it does not; PASS means every cell ran and the constants are valid
(c1 > 0), never that the curve has a particular shape.

Difficulty spread knob: ``TaskConfig.hard_fraction`` (share of two-digit questions; see
:mod:`grpo_theory.lm.task`). The main sweep uses the task's default; a smaller sweep (one budget,
fewer seeds) repeats the study with the *same* starting policy on training and evaluation
questions drawn at other hard fractions, and reports how the pass-rate spread, the predicted G*
and the empirical best G move with it. A third sweep runs the practical variant (``PRACTICAL``:
std-normalised advantages, clipped multi-epoch updates) at one budget next to Algorithm 1.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pandas as pd

from grpo_theory.core.stats import z_value
from grpo_theory.lm.grpo import predicted_group_size, train_grpo
from grpo_theory.lm.task import eval_set, train_pool
from grpo_theory.lm.warmup import WarmupConfig, three_policies
from grpo_theory.experiments.plotting import plt, save_figure
from grpo_theory.experiments.results import CellStore, Progress

from .lm_mse import SETTINGS as MSE_SETTINGS
from .lm_mse import cache_dir

NAME = "lm-groupsize"
CLAIM = ("GRPO training of the small transformer at fixed budget N = BG: best G per checkpoint "
         "with bootstrap CIs vs G* = 1 + sqrt(c3/c1) (Figure 5 / Table 2 analogue)")
ORDER = 61
N_BOOT = 2000

#: the practical variant: std-normalised advantages, two clipped epochs per batch
PRACTICAL = dict(estimator="grpo_std", epochs=2, clip_eps=0.2)

SETTINGS = {
    "quick": dict(warmup=MSE_SETTINGS["quick"]["warmup"], budgets=(128,), group_sizes=(4, 16, 64),
                  seeds=2, steps=10, checkpoints=(5, 10), lr=1e-3, n_eval=100, n_pool=2000,
                  gstar_samples=16,
                  knob=dict(hard_fractions=(0.5,), budgets=(128,), group_sizes=(4, 64), seeds=1),
                  practical=dict(budgets=(128,), group_sizes=(4, 64), seeds=1, **PRACTICAL)),
    "full": dict(warmup=MSE_SETTINGS["full"]["warmup"], budgets=(256, 512, 1024),
                 group_sizes=(2, 4, 8, 16, 32, 64, 128), seeds=5, steps=100,
                 checkpoints=(25, 50, 75, 100), lr=1e-3, n_eval=500, n_pool=20000,
                 gstar_samples=64,
                 knob=dict(hard_fractions=(0.0, 0.75), budgets=(512,),
                           group_sizes=(2, 4, 8, 16, 32, 64, 128), seeds=3),
                 practical=dict(budgets=(512,), group_sizes=(2, 4, 8, 16, 32, 64, 128), seeds=3,
                                **PRACTICAL)),
}


def _cells(cfg):
    """(sweep, kind, hard_fraction or None for the task default, N, G, seed), in this order:
    the main sweep seed-major (an interrupted run holds complete G sweeps for the first seeds),
    the difficulty-knob sweep, the practical-variant sweep."""
    cells = [("main", "pred", None, None, None, None)] + [
        ("main", "train", None, n, g, s) for s in range(cfg["seeds"]) for n in cfg["budgets"]
        for g in cfg["group_sizes"] if g <= n]
    k = cfg["knob"]
    for h in k["hard_fractions"]:
        cells += [("knob", "pred", h, None, None, None)] + [
            ("knob", "train", h, n, g, s) for s in range(k["seeds"]) for n in k["budgets"]
            for g in k["group_sizes"] if g <= n]
    k = cfg["practical"]
    cells += [("practical", "train", None, n, g, s) for s in range(k["seeds"])
              for n in k["budgets"] for g in k["group_sizes"] if g <= n]
    return cells


def _cell_id(sweep, kind, h, n, g, s):
    pre = f"hard{h:g}_" if sweep == "knob" else ("practical_" if sweep == "practical" else "")
    return pre + ("predicted_gstar" if kind == "pred" else f"N{n}_G{g}_seed{s}")


def run(out_dir: Path, quick: bool = True, seed: int = 0) -> None:
    setting = "quick" if quick else "full"
    cfg = SETTINGS[setting]
    store = CellStore(out_dir, NAME, seed=seed, setting=setting)
    pols, _ = three_policies(cache_dir(out_dir), cfg["warmup"])
    start = pols["instruct"][0]
    config = {k: (v.tag() if k == "warmup" else v) for k, v in cfg.items()}
    cells = _cells(cfg)
    prog = Progress(NAME, len(cells))
    data = {}
    for sweep, kind, h, n, g, s in cells:
        cid = _cell_id(sweep, kind, h, n, g, s)
        if store.done(cid):
            prog.step(cid, skipped=True)
            continue
        task_cfg = cfg["warmup"].task
        hard = task_cfg.hard_fraction if h is None else h
        if hard not in data:
            tc = dataclasses.replace(task_cfg, hard_fraction=hard)
            data[hard] = (eval_set(tc).subset(np.arange(cfg["n_eval"])),
                          train_pool(tc, n=cfg["n_pool"]))
        questions, pool = data[hard]
        tag = dict(hard_fraction=hard, sweep=sweep)
        variant = ({k: cfg["practical"][k] for k in PRACTICAL} if sweep == "practical"
                   else dict(estimator="grpo", epochs=1, clip_eps=None))
        t0 = time.time()
        if kind == "pred":
            p = predicted_group_size(start, questions, cfg["gstar_samples"], seed=seed + 7)
            store.write(cid, dict(p, kind="prediction", seconds=time.time() - t0, **tag),
                        config=config)
            prog.step(f"{cid} G*={p['G_continuous']:.1f}")
            continue
        rows = train_grpo(start, pool, questions, n, g, cfg["steps"], cfg["checkpoints"],
                          cfg["lr"], seed=seed + 1000 * s + g, **variant,
                          log=lambda m: print(f"[{NAME}] {m}", flush=True))
        dt = time.time() - t0
        rows = [dict(r, kind="train", N=n, G=g, B=n // g, run_seed=s, seconds=dt,
                     steps_per_s=cfg["steps"] / dt, **tag, **variant) for r in rows]
        store.write(cid, rows, config=config)
        store.save_table("table.csv")  # after every cell: an interrupted run still has a table
        prog.step(f"{cid} acc={rows[-1]['accuracy']:.3f}")
    store.save_table("table.csv")


def bootstrap_best_g(acc: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """``acc``: rows G, columns seeds. Resample seeds within each G; the best G's distribution."""
    rng = np.random.default_rng(seed)
    a = acc.to_numpy()
    gs = np.asarray(acc.index)
    k = a.shape[1]
    idx = rng.integers(0, k, size=(n_boot, a.shape[0], k))
    means = np.take_along_axis(np.broadcast_to(a, (n_boot,) + a.shape), idx, axis=2).mean(2)
    best = gs[np.argmax(means, axis=1)]
    vals, counts = np.unique(best, return_counts=True)
    return dict(best=int(gs[np.argmax(a.mean(1))]), lo=int(np.quantile(best, 0.025,
                method="lower")), hi=int(np.quantile(best, 0.975, method="higher")),
                p_best=float(counts.max() / n_boot),
                support={int(v): float(c / n_boot) for v, c in zip(vals, counts)})


def summary(df: pd.DataFrame, sweep: str = "main") -> pd.DataFrame:
    """Best G per (hard fraction, N, checkpoint) with a bootstrap CI over seeds."""
    tr = df[(df.kind == "train") & (df.step > 0) & (df.sweep == sweep)]  # step 0: start policy
    out = []
    for (h, n, step), d in tr.groupby(["hard_fraction", "N", "step"]):
        acc = d.pivot_table(index="G", columns="run_seed", values="accuracy")
        acc = acc.dropna(axis=1)
        if acc.shape[1] == 0:
            continue
        bs = bootstrap_best_g(acc, seed=int(n) + int(step))
        out.append(dict(hard_fraction=float(h), N=int(n), step=int(step), seeds=int(acc.shape[1]),
                        **{k: v for k, v in bs.items() if k != "support"},
                        support=bs["support"],
                        mean_by_G={int(g): float(a) for g, a in acc.mean(axis=1).round(4).items()}))
    return pd.DataFrame(out)


def _load(out_dir: Path) -> pd.DataFrame:
    """The table; rows written before the knob sweep existed belong to the main sweep at the
    task's default hard fraction (read from the warm-up tag in their config)."""
    df = pd.read_csv(Path(out_dir) / "table.csv")
    if "sweep" not in df:
        df["sweep"] = np.nan
    if "hard_fraction" not in df:
        df["hard_fraction"] = np.nan
    df["sweep"] = df["sweep"].fillna("main")
    tag_h = df.config.str.extract(r"_hard([0-9.]+)_", expand=False).astype(float)
    df["hard_fraction"] = df["hard_fraction"].fillna(tag_h)
    return df


def _prediction(df: pd.DataFrame, sweep: str = "main", hard=None) -> pd.Series:
    p = df[(df.kind == "prediction") & (df.sweep == sweep)]
    if hard is not None:
        p = p[np.isclose(p.hard_fraction, hard)]
    return p.iloc[0]


def plot(out_dir: Path) -> None:
    df = _load(out_dir)
    tr = df[(df.kind == "train") & (df.sweep == "main")]
    budgets = sorted(tr.N.unique())
    knob = df[(df.kind == "train") & (df.sweep == "knob")]
    prac = df[(df.kind == "train") & (df.sweep == "practical")]
    extra = not (knob.empty and prac.empty)
    fig, axes = plt.subplots(1, len(budgets) + extra, figsize=(4.2 * (len(budgets) + extra), 3.6),
                             squeeze=False)
    pred = _prediction(df)
    for ax, n in zip(axes[0], budgets):
        d = tr[tr.N == n]
        for step, s in d[d.step > 0].groupby("step"):
            m = s.groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="o-", ms=3,
                        capsize=2, label=f"step {int(step)}")
        ax.axvline(pred.G_continuous, color="k", ls="--", lw=1, label="predicted G*")
        ax.set(xscale="log", xlabel="G", ylabel="held-out accuracy", title=f"N = {int(n)}")
        gs = sorted(d.G.unique())
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xticks(gs, [str(int(g)) for g in gs])
        ax.legend(fontsize=7)
    if extra:
        ax = axes[0, -1]
        last = int(df[df.kind == "train"].step.max())
        n_x = int(pd.concat([knob, prac]).N.iloc[0])
        both = pd.concat([knob, tr[tr.N == n_x]])
        for i, (h, d) in enumerate(both[both.step == last].groupby("hard_fraction")):
            m = d.groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="o-", ms=3,
                        capsize=2, color=f"C{i}", label=f"hard fraction {h:g}")
            sw = "main" if d.sweep.iloc[0] == "main" else "knob"
            ax.axvline(_prediction(df, sw, h if sw == "knob" else None).G_continuous,
                       color=f"C{i}", ls="--", lw=1)
        if not prac.empty:
            m = prac[prac.step == last].groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="s:", ms=3,
                        capsize=2, color="k", label=f"practical ({prac.estimator.iloc[0]}, "
                        f"{int(prac.epochs.iloc[0])} clipped epochs), hard "
                        f"{prac.hard_fraction.iloc[0]:g}")
        ax.set(xscale="log", xlabel="G", ylabel=f"held-out accuracy, step {last}",
               title=f"difficulty knob and practical variant, N = {n_x} (dashed: G*)")
        gs = sorted(both.G.unique())
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xticks(gs, [str(int(g)) for g in gs])
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.suptitle("Fixed-budget GRPO from the instruct policy (Figure 5 analogue)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, Path(out_dir) / "lm_groupsize")


def report(out_dir: Path) -> dict:
    df = _load(out_dir)
    pred = _prediction(df)
    sm = summary(df)
    tr = df[(df.kind == "train") & (df.sweep == "main")]
    gs = sorted(int(g) for g in tr.G.unique())
    lines = [f"Setting `{df.setting.iloc[0]}`. Start: instruct policy, exact held-out accuracy "
             f"{pred.J:.3f} (hard fraction {pred.hard_fraction:g}). Measured there: "
             f"c1 = {pred.c1:.4g}, c2 = {pred.c2:.4g}, "
             f"c3 = {pred.c3:.4g}; predicted G* = 1 + sqrt(c3/c1) = {pred.G_continuous:.1f} "
             f"(paper's form sqrt(c3/c1) = {pred.G_paper:.1f}; integer argmin {int(pred.G_exact)}).",
             "", "| N | step | seeds | mean accuracy by G (" + ", ".join(map(str, gs)) + ") | "
             "best G | 95% bootstrap CI | P(best) | G* (integer) inside CI |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sm.itertuples():
        accs = " ".join(f"{r.mean_by_G.get(g, float('nan')):.3f}" for g in gs)
        inside = r.lo <= pred.G_exact <= r.hi
        lines.append(f"| {r.N} | {r.step} | {r.seeds} | {accs} | {r.best} | [{r.lo}, {r.hi}] | "
                     f"{r.p_best:.2f} | {'yes' if inside else 'no'} |")
    held = [r.lo <= pred.G_exact <= r.hi for r in sm.itertuples()]
    lines += ["", f"The predicted integer G* = {int(pred.G_exact)} lies inside the bootstrap CI "
              f"of the best G in {sum(held)} of {len(held)} (N, checkpoint) rows."]
    sps = tr.groupby("N").steps_per_s.mean()
    lines += ["", "Training speed (steps/s, mean over runs): " +
              ", ".join(f"N={int(n)}: {v:.2f}" for n, v in sps.items()) + ".", "",
              "Paper: Figure 5 (GSM8K, N = 1024) best G* = 32 at every checkpoint but the "
              "first; Table 2 (MATH) best G = 64, 64, 128 for N = 1024, 2048, 4096." +
              (" Rows with one seed have a one-point bootstrap CI (no seed variability "
               "measured)." if (sm.seeds == 1).any() else "") +
              f" The grid starts at G = {gs[0]}: a predicted G* at or below it can only be "
              "checked from one side."]
    lines += _knob_lines(df, sm)
    lines += _practical_lines(df, sm, pred)
    lines += ["", "![](lm_groupsize.png)"]
    ok = (pred.c1 > 0 and np.isfinite(pred.G_continuous) and df[df.kind == "train"]
          .accuracy.between(0, 1).all() and len(sm) > 0)
    return dict(title="Small-LM optimal group size (Figure 5 / Table 2 analogue)",
                markdown="\n".join(lines), passed=bool(ok))


def _knob_lines(df: pd.DataFrame, main: pd.DataFrame) -> list:
    """The difficulty-knob table: pass-rate spread, predicted G* and best G per hard fraction."""
    kn = summary(df, "knob")
    if kn.empty:
        return []
    n = int(kn.N.iloc[0])
    last = int(kn.step.max())
    rows = pd.concat([main[(main.N == n) & (main.step == last)].assign(sweep="main"),
                      kn[kn.step == last].assign(sweep="knob")]).sort_values("hard_fraction")
    lines = ["", f"**Difficulty knob** (`TaskConfig.hard_fraction`, share of two-digit "
             f"questions): same starting policy, questions drawn at each hard fraction; N = {n}, "
             f"step {last}. V = per-question pass rate of the starting policy (exact).", "",
             "| hard fraction | seeds | J at start | share V < 5% | median V | predicted G* "
             "(continuous / integer) | mean accuracy by G | best G | 95% bootstrap CI | "
             "G* inside CI |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        p = _prediction(df, r.sweep, r.hard_fraction if r.sweep == "knob" else None)
        accs = ", ".join(f"{g}: {a:.3f}" for g, a in sorted(r.mean_by_G.items()))
        lines.append(f"| {r.hard_fraction:g} | {r.seeds} | {p.J:.3f} | "
                     f"{_get(p, 'frac_V_below_5pct'):.2f} | {_get(p, 'V_median'):.3f} | "
                     f"{p.G_continuous:.1f} / {int(p.G_exact)} | {accs} | {r.best} | "
                     f"[{r.lo}, {r.hi}] | {'yes' if r.lo <= p.G_exact <= r.hi else 'no'} |")
    return lines


def _practical_lines(df: pd.DataFrame, main: pd.DataFrame, pred) -> list:
    """Practical variant vs Algorithm 1 at the same budget, per checkpoint."""
    pr = summary(df, "practical")
    if pr.empty:
        return []
    r0 = df[(df.sweep == "practical") & (df.kind == "train")].iloc[0]
    n = int(pr.N.iloc[0])
    lines = ["", f"**Practical variant** ({r0.estimator} advantages, {int(r0.epochs)} clipped "
             f"epochs per batch, clip 1 +/- {r0.clip_eps:g}) against Algorithm 1 at N = {n}; "
             "G* is the Algorithm-1 prediction (Theorem 7 does not cover this variant).", "",
             "| step | variant | seeds | mean accuracy by G | best G | 95% bootstrap CI |",
             "|---|---|---|---|---|---|"]
    for step in sorted(pr.step.unique()):
        for name, t in (("Algorithm 1", main), ("practical", pr)):
            r = t[(t.N == n) & (t.step == step)]
            if r.empty:
                continue
            r = r.iloc[0]
            accs = ", ".join(f"{g}: {a:.3f}" for g, a in sorted(r.mean_by_G.items()))
            lines.append(f"| {step} | {name} | {r.seeds} | {accs} | {r.best} | "
                         f"[{r.lo}, {r.hi}] |")
    return lines


def _get(row, col):
    return float(row[col]) if col in row and pd.notna(row[col]) else float("nan")


if __name__ == "__main__":  # pragma: no cover
    run(Path("results") / NAME)
