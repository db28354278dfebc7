"""The report section and figure of ``lm-dppo`` (its :mod:`.study`).

:func:`run_summary` and :func:`rate_summary` reduce the training runs and the gradient-rate cells;
:func:`report` and :func:`plot` write the section (with its checks) and the figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import Section, bootstrap_ci, bootstrap_ratio_ci, check

__all__ = ["Z_TOL", "N_BOOT", "CLOCKS", "run_summary", "rate_summary", "rival_z", "report",
           "plot"]

Z_TOL = 4.0
N_BOOT = 2000
#: the clocks of the equal-time comparison: (sampling column, update column)
CLOCKS = {"cpu": ("sample_cpu_seconds", "update_cpu_seconds"),
          "wall": ("sample_seconds", "update_seconds")}


def _acc_at_time(d: pd.DataFrame, t_ref: float, clock: str) -> float:
    """Accuracy at cumulative (sampling + update) time ``t_ref`` on ``clock``, linear between
    checkpoints; NaN when the run stopped before ``t_ref``."""
    cs, cu = CLOCKS[clock]
    t = (d[cs] + d[cu]).to_numpy()
    a = d.accuracy.to_numpy()
    if t_ref > t[-1] + 1e-12:
        return float("nan")
    return float(np.interp(t_ref, t, a))


def run_summary(train: pd.DataFrame, steps: int) -> pd.DataFrame:
    """One row per run: wall and CPU seconds per step (sampling, update, total) over the first
    ``steps``, accuracy at ``steps`` and, per clock, at the full run's mean time (same
    variant) of ``steps`` steps (``acc_time_cpu``, ``acc_time_wall``)."""
    out = []
    for (variant, rq, ro, seed), d in train.groupby(["variant", "r_q", "r_o", "run_seed"],
                                                     sort=False):
        d = d.sort_values("step")
        at = d[d.step == steps].iloc[0]
        out.append(dict(variant=variant, r_q=rq, r_o=ro, run_seed=seed,
                        sample_per_step=at.sample_seconds / steps,
                        update_per_step=at.update_seconds / steps,
                        wall_per_step=(at.sample_seconds + at.update_seconds) / steps,
                        sample_cpu_per_step=at.sample_cpu_seconds / steps,
                        update_cpu_per_step=at.update_cpu_seconds / steps,
                        cpu_per_step=(at.sample_cpu_seconds + at.update_cpu_seconds) / steps,
                        acc_steps=at.accuracy, acc0=d.accuracy.iloc[0],
                        kept_share=d.kept_share[d.step > 0].mean(),
                        token_share=d.token_share[d.step > 0].mean(),
                        row_share=d.row_share[d.step > 0].mean(), load1=d.load1.iloc[0]))
    runs = pd.DataFrame(out)
    for clock in CLOCKS:
        accs = []
        for r in runs.itertuples():
            full = runs[(runs.variant == r.variant) & (runs.r_q == 0) & (runs.r_o == 0)]
            t_ref = float(full[f"{clock}_per_step"].mean() * steps)
            d = train[(train.variant == r.variant) & (train.r_q == r.r_q)
                      & (train.r_o == r.r_o) & (train.run_seed == r.run_seed)]
            if r.r_q == 0 and r.r_o == 0:  # full GRPO: its own time of `steps` steps
                accs.append(r.acc_steps)
            else:
                accs.append(_acc_at_time(d.sort_values("step"), t_ref, clock) if len(full)
                            else float("nan"))
        runs[f"acc_time_{clock}"] = accs
    return runs



def rate_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, r_q, r_o): means over seeds; speed-ups over full GRPO (ratio of mean
    seconds per step, CPU and wall, with bootstrap CIs resampling the seeds of both; update
    only); accuracy at the fixed step count and at equal CPU / wall time with bootstrap CIs;
    full GRPO's accuracy CI (``full_lo``, ``full_hi``)."""
    out = []
    for (variant, rq, ro), d in runs.groupby(["variant", "r_q", "r_o"], sort=False):
        full = runs[(runs.variant == variant) & (runs.r_q == 0) & (runs.r_o == 0)]
        row = dict(variant=variant, r_q=rq, r_o=ro, q=(1 - rq) * (1 - ro), n=len(d),
                   kept_share=d.kept_share.mean(), token_share=d.token_share.mean(),
                   row_share=d.row_share.mean(), load1=d.load1.mean())
        for c in ("sample_per_step", "update_per_step", "wall_per_step", "sample_cpu_per_step",
                  "update_cpu_per_step", "cpu_per_step"):
            row[c] = d[c].mean()
        for clock in CLOCKS:
            col = f"{clock}_per_step"
            row[f"speedup_{clock}"] = full[col].mean() / d[col].mean()
            row[f"speedup_{clock}_lo"], row[f"speedup_{clock}_hi"] = bootstrap_ratio_ci(
                full[col], d[col], n_boot=N_BOOT)
            at = d[f"acc_time_{clock}"].dropna()
            row[f"acc_time_{clock}"] = at.mean() if len(at) else float("nan")
            row[f"acc_time_{clock}_lo"], row[f"acc_time_{clock}_hi"] = bootstrap_ci(at)
            row[f"n_time_{clock}"] = len(at)
        row["update_speedup_cpu"] = (full.update_cpu_per_step.mean()
                                     / d.update_cpu_per_step.mean())
        row["acc_steps"] = d.acc_steps.mean()
        row["acc_steps_lo"], row["acc_steps_hi"] = bootstrap_ci(d.acc_steps)
        row["full_lo"], row["full_hi"] = bootstrap_ci(full.acc_steps)
        out.append(row)
    return pd.DataFrame(out)


def _where(v, lo, hi) -> str:
    if not np.isfinite(v):
        return "n/a"
    return "inside" if lo - 1e-12 <= v <= hi + 1e-12 else ("above" if v > hi else "below")


def _span(v) -> str:
    """``"12%"`` or ``"12% to 30%"``: the range of the shares ``v``."""
    lo, hi = f"{v.min():.0%}", f"{v.max():.0%}"
    return lo if lo == hi else f"{lo} to {hi}"


def rival_z(grad: pd.DataFrame) -> dict:
    """How far each gradient check's rival lies, in standard errors, the smallest over rates.

    * ``dppo_vs_no_rescale``: DPPO's expectation ``q g_full`` (the 1/q left out) along
      ``g_full``. The no-1/q estimate is ``q`` times DPPO's on the same masks, so with
      ``z_d = (m - |g|) / se`` and ``z_nr = (m - |g| / q) / se`` (``m``, ``se``: DPPO's mean
      projection and its se) the rival lies ``(m - q |g|) / se = (1 + q) z_d - q z_nr`` away.
    * ``no_rescale_unbiased``: the no-1/q control unbiased along ``g_full``: ``abs(z_nr)``.
    * ``kept_share_one``: masks that keep everything: ``(1 - kept share) / se``.

    Args:
        grad: the ``grad`` table (``method``, ``q``, ``r_q``, ``r_o``, ``z_full``,
            ``kept_share``, ``kept_share_se``).
    Returns:
        ``{name: distance}`` (NaN when a rate lacks a row).
    """
    d = grad[grad.method == "dppo"].set_index(["r_q", "r_o"])
    nr = grad[grad.method == "no_rescale"].set_index(["r_q", "r_o"]).reindex(d.index)
    vs = ((1 + d.q) * d.z_full - d.q * nr.z_full).abs()
    one = (1 - d.kept_share) / d.kept_share_se

    def low(v):
        v = v.to_numpy(dtype=float)
        return float(v.min()) if v.size and np.isfinite(v).all() else float("nan")

    return {"dppo_vs_no_rescale": low(vs), "no_rescale_unbiased": low(nr.z_full.abs()),
            "kept_share_one": low(one)}


def report(tables, s) -> Section:
    train, grad = tables["train"], tables["grad"]
    runs = run_summary(train, s.steps)
    rs = rate_summary(runs)
    lines = [f"B = {s.batch} prompts x G = {s.group} responses per step, Adam lr {s.lr:g}, "
             f"{s.steps} steps (pruned runs up to {s.max_factor:g}x longer for the equal-time "
             f"comparison), accuracy = exact mean pi(y*|x) on {s.n_eval} held-out questions "
             f"(starting policy: {runs.acc0.mean():.3f}); kept sequences packed into rows of "
             f"{s.capacity} tokens, row counts in {s.n_buckets} buckets; compilation excluded. "
             "Clocks: CPU = the process's CPU seconds (all threads), the main clock, because "
             "the machine is shared and wall-clock seconds of one configuration vary up to 3x "
             "with the other processes' load (load1 = 1-minute load average during the run); "
             "wall = elapsed seconds. Speed-up = full GRPO's seconds per step / the pruned "
             "run's (95% bootstrap CI over seeds). Equal time = the accuracy when the pruned "
             f"run has used full GRPO's mean time of {s.steps} steps (linear between "
             "checkpoints; n/a when the run stopped earlier). 'vs full' = where the mean lies "
             f"relative to full GRPO's 95% CI at {s.steps} steps.", "",
             "| variant | r_q | r_o | q = qp qc | kept share | slot share | CPU ms/step "
             "(sample + update) | speed-up CPU [CI] | update speed-up CPU | speed-up wall [CI] "
             f"| acc @{s.steps} steps [CI] | vs full | acc @ equal CPU time [CI] | vs full | "
             "acc @ equal wall time | seeds | load1 |", "|" + "---|" * 17]
    for r in rs.itertuples():
        lines.append(
            f"| {r.variant} | {r.r_q:g} | {r.r_o:g} | {r.q:.2f} | {r.kept_share:.3f} | "
            f"{r.row_share:.3f} | {r.sample_cpu_per_step * 1e3:.0f} + "
            f"{r.update_cpu_per_step * 1e3:.0f} | {r.speedup_cpu:.2f} [{r.speedup_cpu_lo:.2f}, "
            f"{r.speedup_cpu_hi:.2f}] | {r.update_speedup_cpu:.2f} | {r.speedup_wall:.2f} "
            f"[{r.speedup_wall_lo:.2f}, {r.speedup_wall_hi:.2f}] | {r.acc_steps:.3f} "
            f"[{r.acc_steps_lo:.3f}, {r.acc_steps_hi:.3f}] | "
            f"{_where(r.acc_steps, r.full_lo, r.full_hi)} | {r.acc_time_cpu:.3f} "
            f"[{r.acc_time_cpu_lo:.3f}, {r.acc_time_cpu_hi:.3f}] (n={r.n_time_cpu}) | "
            f"{_where(r.acc_time_cpu, r.full_lo, r.full_hi)} | {r.acc_time_wall:.3f} "
            f"(n={r.n_time_wall}) | {r.n} | {r.load1:.1f} |")
    pr = rs[((rs.r_q != 0) | (rs.r_o != 0)) & rs.speedup_cpu_lo.notna()]
    if len(pr):
        up = int((pr.speedup_cpu_lo > 1).sum())
        lines += ["", f"Speed-ups and accuracies are measurements, not checks: the CPU speed-up's "
                  f"CI lies above 1 in {up} of {len(pr)} pruned configurations"
                  + ("" if up == len(pr) else "; in the others this setting cannot decide "
                     "whether pruning is faster") + ", and with "
                  f"{int(pr.n.min())} seeds per configuration "
                  "an accuracy inside full GRPO's CI does not show the two equal."]
    lines += ["", "Kept share = kept responses / BG (expected q); token share = kept real "
              "tokens / all real tokens (what the backward pass must process); slot share = "
              "token slots of the packed, bucketed array / the unpacked full batch's (what it "
              "does process: packing strips PADs, buckets round up)."]
    g0 = grad.iloc[0]
    cpu = "grad_cpu_seconds" in grad and grad.grad_cpu_seconds.notna().all()
    pack_cpu = (f"; CPU {g0.full_rows_cpu_seconds * 1e3:.1f} ms vs "
                f"{g0.full_packed_cpu_seconds * 1e3:.1f} ms, "
                f"{g0.full_rows_cpu_seconds / g0.full_packed_cpu_seconds:.2f}x" if cpu else "")
    lines += ["", f"Gradient at the starting policy: one batch, {int(g0.n_masks)} keep masks "
              f"per rate. Full-batch gradient (median wall time) {g0.full_rows_seconds * 1e3:.1f}"
              f" ms one sequence per row, {g0.full_packed_seconds * 1e3:.1f} ms packed (packing "
              f"gain {g0.full_rows_seconds / g0.full_packed_seconds:.2f}x{pack_cpu}). MSE = mean "
              "||g_pruned - g_full||^2 relative to ||g_full||^2 (for DPPO: its added variance); "
              "z = standardised bias on the direction of g_full and on random directions. "
              "Time ratio = median seconds of one pruned, packed gradient / the full packed "
              "one (wall; CPU in brackets), next to the kept-token proxy q.", "",
              "| r_q | r_o | q (proxy) | kept share (se) | method | rel. MSE vs full batch | "
              "z along g_full | max abs z | pruned gradient ms | time ratio | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in grad.itertuples():
        if r.method == "dppo":
            v = "PASS" if r.z_max <= Z_TOL else "FAIL"
        elif r.method == "no_rescale":
            v = "PASS (biased)" if abs(r.z_full) > Z_TOL else "FAIL (not detected)"
        else:
            v = "biased" if r.z_max > Z_TOL else "bias not detected"
        ratio = f"{r.grad_seconds / r.full_packed_seconds:.2f}"
        if cpu:
            ratio += f" ({r.grad_cpu_seconds / r.full_packed_cpu_seconds:.2f})"
        lines.append(f"| {r.r_q:g} | {r.r_o:g} | {r.q:.2f} | {r.kept_share:.3f} "
                     f"({r.kept_share_se:.3f}) | {r.method} | {r.rel_mse:.3g} | {r.z_full:.1f} "
                     f"| {r.z_max:.1f} | {r.grad_seconds * 1e3:.1f} | {ratio} | {v} |")
    lines += ["", "The kept-token proxy of the exact module predicts update time proportional "
              "to q. The `no_rescale` estimate is q times the DPPO one for the same mask "
              "(uniform q), computed that way. The `recompute` control is biased only through "
              "groups left with fewer than two kept completions (leave-one-out advantages of a "
              "random subset are otherwise unbiased for the full group's): its expectation is "
              "(1 - (1 - qc)^(G-1)) times the full estimate (exact, tested by enumeration in "
              "tests/lm/test_lm_dppo.py), a shrinkage of at most "
              f"{(1 - min(1 - r for _, r in s.rates)) ** (s.group - 1):.1%} here, too small "
              f"to detect with {int(g0.n_masks)} masks; it is reported, not gated.", "",
              "![](lm_dppo.png)"]
    d = grad[grad.method == "dppo"]
    if "detectable_bias" in d and d.detectable_bias.notna().any():  # (absent in older cells)
        lines[-1:-1] = [
            f"Power of (i): with {int(g0.n_masks)} masks the test along g_full flags a DPPO "
            f"bias only above {_span(d.detectable_bias)} of ||g_full|| (4 se, by rate); a "
            "smaller bias this setting cannot decide. The "
            "no-1/q control of (ii) is q times the DPPO estimate on the same masks, so it "
            "shows the test sees a bias of (1 - q) ||g_full|| and no more.", ""]
    nr = grad[grad.method == "no_rescale"]
    rz = rival_z(grad)
    checks = [
        check(f"(i) DPPO unbiased: |z| <= {Z_TOL:g} on every direction at every rate",
              (d.z_max <= Z_TOL).all(), d.z_max.to_numpy(), rz["dppo_vs_no_rescale"],
              kind="statistical",
              excludes="DPPO's expectation q g_full along g_full (the 1/q left out)",
              rival_se=rz["dppo_vs_no_rescale"], z_tol=Z_TOL,
              detail=f"largest |z| {d.z_max.max():.2f} over {len(d)} rates x {s.n_dirs} "
              f"directions; the rival lies {rz['dppo_vs_no_rescale']:.1f} se away or more"),
        check(f"(ii) no-1/q control biased: |z| > {Z_TOL:g} along g_full at every rate",
              (nr.z_full.abs() > Z_TOL).all(), nr.z_full.to_numpy(),
              kind="statistical", excludes="a no-1/q control that is unbiased along g_full",
              rival_se=rz["no_rescale_unbiased"], z_tol=Z_TOL,
              detail=f"smallest |z| {nr.z_full.abs().min():.1f}"),
        check(f"(iii) kept share = qp qc within {Z_TOL:g} se at every rate",
              ((d.kept_share - d.q).abs() <= Z_TOL * d.kept_share_se).all(),
              d[["kept_share", "kept_share_se", "q"]].to_numpy(), rz["kept_share_one"],
              kind="statistical", excludes="masks that keep every response (a kept share of 1)",
              rival_se=rz["kept_share_one"], z_tol=Z_TOL,
              detail=f"a share of 1 lies {rz['kept_share_one']:.0f} se away or more; "
                     + ", ".join(f"{r.q:.2f}: {r.kept_share:.3f}" for r in d.itertuples())),
    ]
    return Section("DPPO in the small transformer's GRPO loop", "\n".join(lines), checks)


def plot(tables, s, out_dir) -> None:
    train = tables["train"]
    rs = rate_summary(run_summary(train, s.steps))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    a = rs[rs.variant == "alg1"]
    axes[0].errorbar(a.q, a.speedup_cpu, yerr=[a.speedup_cpu - a.speedup_cpu_lo,
                                               a.speedup_cpu_hi - a.speedup_cpu],
                     fmt="o", label="total step (CPU time)", capsize=2)
    axes[0].plot(a.q, a.update_speedup_cpu, "s", label="update only (CPU time)")
    qq = np.linspace(max(0.05, a.q.min()), 1, 50)
    axes[0].plot(qq, 1 / qq, "k:", lw=1, label="1/q (kept-token proxy)")
    axes[0].set(xlabel="q = qp qc", ylabel="speed-up over full GRPO", yscale="log")
    axes[0].legend(fontsize=7)
    for ax, col, title in ((axes[1], "acc_steps", f"accuracy at {s.steps} steps"),
                           (axes[2], "acc_time_cpu", "accuracy at equal CPU time")):
        ax.errorbar(a.q, a[col], yerr=[a[col] - a[f"{col}_lo"], a[f"{col}_hi"] - a[col]],
                    fmt="o", capsize=2)
        f = a[(a.r_q == 0) & (a.r_o == 0)]
        if len(f):
            ax.axhspan(f.full_lo.iloc[0], f.full_hi.iloc[0], color="C2", alpha=0.2,
                       label="full GRPO 95% CI")
            ax.legend(fontsize=7)
        ax.set(xlabel="q = qp qc", ylabel="held-out accuracy", title=title)
    fig.suptitle("DPPO in the small transformer's GRPO loop (Algorithm 1)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_dir / "lm_dppo")
