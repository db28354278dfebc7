"""The report section and figure of ``lm-rank`` (its :mod:`.study`).

:func:`report` writes the section (the rank and zero-share tables, with the checks of the study's
docstring) and :func:`plot` the figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from grpo_theory.core import z_value
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import Section, check
from grpo_theory.lm.warmup import POLICIES

__all__ = ["FORMATS", "Z_TOL", "IDENTITY_TOL", "RANK2", "zero_rival_z", "report", "plot"]

FORMATS = ("answer", "trace")
Z_TOL = 4.0
IDENTITY_TOL = 1e-8
#: "rank about 2": mean entropy effective rank at most this
RANK2 = 2.5


def _ci(m, se):
    h = z_value() * se
    return f"{m:.2f} [{m - h:.2f}, {m + h:.2f}]"


def _rank_row(r) -> str:
    """Markdown cells: entropy rank and n90 with CIs, distinct responses, zero share, verdict."""
    ok = r.n_mixed > 0 and r.erank <= RANK2
    return ((f"{_ci(r.erank, r.erank_se)} | {_ci(r.n90, r.n90_se)} | {r.distinct:.1f} | "
             if r.n_mixed > 0 else "no mixed group | - | - | ")
            + f"{r.zero_obs:.3f} / {r.zero_pred:.3f} ({r.zero_z:+.1f}) | "
            f"{'yes' if ok else 'no'} |")


def _where(d) -> str:
    """The G values (of rows with mixed groups) where the mean entropy rank is <= RANK2."""
    m = d[d.n_mixed > 0]
    ok = [int(g) for g in m.G[m.erank <= RANK2]]
    if not ok:
        return "none"
    return "all" if len(ok) == len(m) else ", ".join(str(g) for g in ok)


def _summary_lines(df, key: str) -> list[str]:
    """One line per ``key`` group (a (policy, format) or a training step): entropy, J, the G
    where rank about 2 holds, the rank at the largest G with mixed groups, the zero share."""
    out = []
    for k, d in df.groupby(key, sort=False):
        d = d.sort_values("G")
        m = d[d.n_mixed > 0]
        top = m.iloc[-1] if len(m) else None
        out.append(f"| {k} | {d.entropy.iloc[0]:.2f} | {d.J.iloc[0]:.3f} | {_where(d)} | "
                   + (f"{top.erank:.2f} / {top.n90:.2f} (G = {int(top.G)}) | "
                      if top is not None else "- | ")
                   + f"{d.zero_obs.iloc[0]:.2f} -> {d.zero_obs.iloc[-1]:.2f} |")
    return out


def zero_rival_z(rows: pd.DataFrame) -> float:
    """The zero-share check's rival in standard errors: the share at the mean pass rate,
    ``J^G + (1-J)^G`` (below ``mean V^G + (1-V)^G`` by Jensen), the smallest
    ``abs(zero_obs - rival) / zero_se`` over the rows.

    Args:
        rows: rows with ``J``, ``G``, ``zero_obs`` and ``zero_se``.
    Returns:
        The distance (NaN when there are no rows).
    """
    if not len(rows):
        return float("nan")
    J, G = rows.J.to_numpy(dtype=float), rows.G.to_numpy(dtype=float)
    rival = J**G + (1 - J) ** G
    return float(np.min(np.abs(rows.zero_obs.to_numpy(dtype=float) - rival)
                        / rows.zero_se.to_numpy(dtype=float)))


def report(tables, s, estimator: str) -> Section:
    """The section; ``estimator``: the advantages of the GRPO run (named in the text)."""
    df = tables["table"]
    run = tables["run"]
    lines = [] if s.model is None else [
        f"Model `{s.model}` (a Hugging Face checkpoint), policy `model`, answer-only format: "
        "prompts and canonical exact-token answers from its tokenizer (`task_tokens`), exact "
        "V = pi(y*|x) by teacher forcing. The trace format is not run for a model (it needs "
        "the package's character tokenizer).", ""]
    lines += [f"{s.n_questions} evaluation questions x {s.n_reps} groups of "
              f"G_max = {max(s.group_sizes)} responses per (policy, format); G-groups are nested "
              f"prefixes; advantages `{estimator}` (std-normalised); model of "
              f"{int(df.dim.iloc[0])} parameters (all enter the scores). Entropy: "
              "-E log pi(y|x) in nats. Rank measures: mean [95% CI] over groups with mixed "
              "rewards. Zero share: observed vs mean_x[V^G + (1-V)^G] (answer: exact V; "
              "trace: unbiased from independent reference responses).", "",
              "| policy | format | entropy | J | G | entropy rank | n90 | distinct | zero share "
              "obs / pred (z) | rank ~2 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        lines.append(f"| {r.policy} | {r.fmt} | {r.entropy:.2f} | {r.J:.3f} | {r.G} | "
                     + _rank_row(r))
    holds = df[(df.n_mixed > 0) & (df.erank <= RANK2)]
    fails = df[(df.n_mixed > 0) & (df.erank > RANK2)]
    m_ = df[df.n_mixed > 0]
    where = ", ".join(sorted({f"{p}/{f}" for p, f in zip(fails.policy, fails.fmt)}))
    gs = sorted(int(g) for g in df.G.unique())
    pair = df.assign(pair=df.policy + "/" + df.fmt)
    lines += ["", f"'Rank about 2' (mean entropy rank <= {RANK2}) holds in {len(holds)} of "
              f"{int((df.n_mixed > 0).sum())} (policy, format, G) rows with mixed groups"
              + (f"; it fails for {where}"
                 f" (largest entropy rank {fails.erank.max():.2f} at G = "
                 f"{int(fails.G[fails.erank.idxmax()])})" if len(fails) else "") + ". This "
              "is a description, not a check: no law predicts the entropy rank of real scores "
              "(the exact statements are (i) and (ii)), so the threshold cannot fail against a "
              "rival and the row counts are not a PASS.",
              "", f"Components for 90% of the energy: {m_.n90.min():.2f} to {m_.n90.max():.2f} "
              f"(row means), <= {RANK2} in {int((m_.n90 <= RANK2).sum())} of {len(m_)} rows.",
              "", "Where it holds, with the sparsity (zero-advantage share at G = "
              f"{gs[0]} -> {gs[-1]}):", "",
              "| policy/format | entropy | J | rank about 2 at G | entropy rank / n90 at the "
              "largest G | zero share |", "|---|---|---|---|---|---|"]
    lines += _summary_lines(pair, "pair")
    if len(run):
        r0 = run.iloc[0]
        first, last = run[run.step == run.step.min()], run[run.step == run.step.max()]
        gtop = int(run.G.max())
        f_, l_ = first[first.G == gtop].iloc[0], last[last.G == gtop].iloc[0]
        lines += ["", f"**Along a GRPO run** from the {r0.policy} policy (answer-only format; "
                  f"Algorithm 1 with `{estimator}` advantages, Adam, G = {int(r0.train_G)}, "
                  f"N = {int(r0.train_N)} responses per step; train reward: mean since the "
                  "previous checkpoint), the same measurements at every checkpoint; V(1-V): "
                  "mean_x V(x)(1 - V(x)), which falls as the pass rates move to 0 or 1.", "",
                  "| step | entropy | J | V(1-V) | train reward | G | entropy rank | n90 | "
                  "distinct | zero share obs / pred (z) | rank ~2 |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in run.itertuples():
            tr = f"{r.train_reward:.3f}" if np.isfinite(r.train_reward) else "-"
            lines.append(f"| {r.step} | {r.entropy:.2f} | {r.J:.3f} | {r.V_var:.3f} | {tr} | "
                         f"{r.G} | " + _rank_row(r))
        lines += ["", "| step | entropy | J | rank about 2 at G | entropy rank / n90 at the "
                  "largest G | zero share |", "|---|---|---|---|---|---|"]
        lines += _summary_lines(run, "step")
        lines += ["", f"From step {int(f_.step)} to step {int(l_.step)}: entropy "
                  f"{f_.entropy:.2f} -> {l_.entropy:.2f} nats, J {f_.J:.3f} -> {l_.J:.3f}, "
                  f"mean V(1-V) {f_.V_var:.3f} -> {l_.V_var:.3f}, zero-advantage share at "
                  f"G = {gtop} {f_.zero_obs:.2f} -> {l_.zero_obs:.2f} (predicted "
                  f"{f_.zero_pred:.2f} -> {l_.zero_pred:.2f}), entropy rank at G = {gtop} "
                  f"{f_.erank:.2f} -> {l_.erank:.2f}, n90 {f_.n90:.2f} -> {l_.n90:.2f}."]
    lines += ["", "![](lm_rank.png)"]
    both = df if run.empty else pd.concat([df, run[list(df.columns)]], ignore_index=True)
    m = both[both.n_mixed > 0]
    zr = zero_rival_z(both)
    checks = [
        check(f"(i) binary identity ghat = c(k,G)(s+ - s-) on real scores (relative squared "
              f"residual <= {IDENTITY_TOL:g})", bool((m.identity <= IDENTITY_TOL).all()),
              m.identity.to_numpy(), kind="exact", detail=f"largest {m.identity.max():.1e}"),
        check("(ii) class aggregates of rank <= 2; rank diag(A)S <= #distinct responses",
              bool((m.class_n <= 2).all() and (m.excess <= 0).all()),
              m[["class_n", "excess"]].to_numpy(),
              kind="sanity",
              detail=f"max class rank {m.class_n.max()}, max rank - distinct {m.excess.max()}"),
        check(f"(iii) zero-advantage share within {Z_TOL:g} se of mean V^G + (1-V)^G",
              bool((both.zero_z.abs() <= Z_TOL).all()),
              both[["zero_obs", "zero_pred"]].to_numpy(), zr,
              kind="statistical",
              excludes="the share at the mean pass rate, J^G + (1-J)^G (the spread of V(x) "
                       "left out)", rival_se=zr, z_tol=Z_TOL,
              detail=f"largest |z| {both.zero_z.abs().max():.2f}; the rival lies {zr:.1f} se "
                     "away or more"),
    ]
    title = ("the small transformer's" if s.model is None else f"{Path(s.model).name}'s")
    return Section(f"Rank of {title} group gradients", "\n".join(lines), checks)


def plot(tables, s, out_dir) -> None:
    """Entropy rank and n90 vs G per (policy, format); along the GRPO run, entropy rank vs
    step per G, and entropy and zero-advantage share vs step."""
    df, run = tables["table"], tables["run"]
    fmts = [f for f in FORMATS if f in set(df.fmt)]
    n = len(fmts) + (2 if len(run) else 0)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    gs = sorted(int(g) for g in df.G.unique())
    for ax, fmt in zip(axes[0], fmts):
        for i, p in enumerate([*POLICIES, *sorted(set(df.policy) - set(POLICIES))]):
            d = df[(df.fmt == fmt) & (df.policy == p) & (df.n_mixed > 0)].sort_values("G")
            if d.empty:
                continue
            h = z_value() * d.erank_se
            ax.errorbar(d.G, d.erank, yerr=h, fmt="o-", ms=3, capsize=2, color=f"C{i}",
                        label=f"{p} (H={d.entropy.iloc[0]:.2f})")
            ax.plot(d.G, d.n90, "s:", ms=3, color=f"C{i}", alpha=0.6)
        ax.axhline(2, color="k", lw=0.8, ls="--")
        ax.set(xscale="log", xlabel="G", ylabel="effective rank", title=f"{fmt} format")
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xticks(gs, [str(g) for g in gs])
        ax.legend(fontsize=7)
    if len(run):
        ax, ax2 = axes[0][len(fmts)], axes[0][len(fmts) + 1]
        for i, g in enumerate(sorted(int(g) for g in run.G.unique())):
            d = run[(run.G == g) & (run.n_mixed > 0)].sort_values("step")
            ax.errorbar(d.step, d.erank, yerr=z_value() * d.erank_se, fmt="o-", ms=3,
                        capsize=2, color=f"C{i}", label=f"G={g}")
            ax.plot(d.step, d.n90, "s:", ms=3, color=f"C{i}", alpha=0.6)
            d = run[run.G == g].sort_values("step")
            ax2.plot(d.step, d.zero_obs, "o-", ms=3, color=f"C{i}", label=f"zero share G={g}")
            ax2.plot(d.step, d.zero_pred, "x:", ms=4, color=f"C{i}", alpha=0.6)
        ax.axhline(2, color="k", lw=0.8, ls="--")
        ax.set(xlabel="GRPO step", ylabel="effective rank",
               title=f"along GRPO ({run.policy.iloc[0]}, answer)")
        ax.legend(fontsize=7)
        h = run[run.G == run.G.min()].sort_values("step")
        tw = ax2.twinx()
        tw.plot(h.step, h.entropy, "k^--", ms=4, label="entropy (nats)")
        tw.set(ylabel="entropy -E log pi (nats)", ylim=(0, 1.05 * h.entropy.max()))
        ax2.set(xlabel="GRPO step", ylabel="zero-advantage share (x: predicted)",
                ylim=(0, 1.02), title="sparsity and entropy along GRPO")
        hs, ls = ax2.get_legend_handles_labels()
        ht, lt = tw.get_legend_handles_labels()
        tw.legend(hs + ht, ls + lt, fontsize=6, ncol=2, loc="lower right")
    fig.suptitle("Entropy rank (solid, 95% CI) and components for 90% (dotted) of diag(A) S",
                 fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_dir / "lm_rank")
