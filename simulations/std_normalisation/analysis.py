"""The PASS rule, report section and figure of ``std-normalisation`` (its :mod:`.study`).

:func:`summary` puts the measured and predicted fixed points side by side; :func:`checks` evaluates
the criteria of the study's docstring; :func:`report` and :func:`plot` write the section and the
figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpo_theory.core import z_value
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import Check, Section, check, markdown_table

__all__ = ["summary", "checks", "report", "plot"]

Z_TOL = 4.0


def _point(exact, point, est="", G=None):
    d = exact[exact.point == point]
    if est:
        d = d[d.estimator == est]
    if G is not None:
        d = d[d.G == G]
    r = d.iloc[0]
    return np.array([r.theta1, r.theta2]), r


def summary(tables) -> pd.DataFrame:
    """One row per trained (estimator, G): mean theta, CI, distances and z to theta_G / theta_V.

    Args:
        tables: ``{"exact", "train"}`` DataFrames (the experiment's tables).
    Returns:
        A DataFrame with one row per (estimator, G).
    """
    exact, tr = tables["exact"], tables["train"]
    tv, rv = _point(exact, "max_J")
    ta, ra = _point(exact, "max_arcsin")
    rows = []
    for (est, G), d in tr.groupby(["estimator", "G"]):
        th = d[["theta1", "theta2"]].values
        m = th.mean(axis=0)
        se = th.std(axis=0, ddof=1) / np.sqrt(len(th))
        tg, _ = _point(exact, "fixed_point", est, G)
        rows.append(dict(
            estimator=est, G=int(G), n_seeds=len(th), theta1=m[0], theta2=m[1],
            ci1=z_value() * se[0], ci2=z_value() * se[1], theta_G1=tg[0], theta_G2=tg[1],
            z_to_fixed_point=float(np.max(np.abs(m - tg) / se)),
            z_to_theta_V=float(np.max(np.abs(m - tv) / se)),
            z_to_theta_arcsin=float(np.max(np.abs(m - ta) / se)),
            dist_V=float(np.linalg.norm(m - tv)), dist_arcsin=float(np.linalg.norm(m - ta)),
            J=float(d.J.mean()), arcsin_obj=float(d.arcsin_obj.mean()),
            J_at_theta_V=float(rv.J), arcsin_at_theta_V=float(rv.arcsin_obj),
            J_at_theta_arcsin=float(ra.J), arcsin_at_theta_arcsin=float(ra.arcsin_obj)))
    return pd.DataFrame(rows)


def checks(tables) -> list[Check]:
    """The PASS rule of the module docstring as checks.

    Args:
        tables: ``{"exact", "train"}`` DataFrames.
    Returns:
        A list of :class:`~grpo_theory.experiments.checks.Check`.
    """
    exact = tables["exact"]
    s = summary(tables)
    tv, _ = _point(exact, "max_J")
    ta, _ = _point(exact, "max_arcsin")
    fp = exact[(exact.point == "fixed_point") & (exact.estimator == "grpo_std")].sort_values("G")
    dist = np.linalg.norm(fp[["theta1", "theta2"]].values - ta, axis=1)
    tail = dist[fp.G.values >= 3]
    std, ctl = s[s.estimator == "grpo_std"], s[s.estimator == "grpo"]
    top = std[std.G == std.G.max()].iloc[0]
    span = np.linalg.norm(ta - tv)
    big = std[std.G >= 16]
    # the rivals' distances, the smallest over the rows each check covers: theta_arcsin for
    # grpo, theta_V for grpo_std (a point's z is its largest coordinate's, as in the test)
    rz_ctl = float(ctl.z_to_theta_arcsin.min()) if len(ctl) else float("nan")
    rz_std = float(std.z_to_theta_V.min()) if len(std) else float("nan")
    rz_big = float(big.z_to_theta_V.min()) if len(big) else float("nan")
    return [
        check(f"grpo reaches θ_V (within {Z_TOL:g} se) at every G",
              len(ctl) > 0 and (ctl.z_to_theta_V <= Z_TOL).all(), ctl.z_to_theta_V, rz_ctl,
              kind="statistical",
              excludes="grpo converging to theta_arcsin (the argmax of E[2 arcsin sqrt V])",
              rival_se=rz_ctl, z_tol=Z_TOL,
              detail=", ".join(f"G={r.G}: {r.z_to_theta_V:.2f}" for r in ctl.itertuples())
              + f"; theta_arcsin lies {rz_ctl:.1f} se away or more"),
        check(f"grpo_std reaches θ_G (within {Z_TOL:g} se) at every G",
              len(std) > 0 and (std.z_to_fixed_point <= Z_TOL).all(), std.z_to_fixed_point,
              rz_std, kind="statistical",
              excludes="grpo_std converging to theta_V (plain grpo's limit, the argmax of E[V])",
              rival_se=rz_std, z_tol=Z_TOL,
              detail=", ".join(f"G={r.G}: {r.z_to_fixed_point:.2f}" for r in std.itertuples())
              + f"; theta_V lies {rz_std:.1f} se away or more"),
        check(f"grpo_std away from θ_V (more than {Z_TOL:g} se) for G >= 16",
              len(big) > 0 and (big.z_to_theta_V > Z_TOL).all(), big.z_to_theta_V,
              kind="statistical", excludes="grpo_std converging to theta_V",
              rival_se=rz_big, z_tol=Z_TOL,
              detail=", ".join(f"G={r.G}: {r.z_to_theta_V:.1f}" for r in big.itertuples())),
        check("exact θ_G moves monotonically to θ_arcsin (last within 5% of ‖θ_V − θ_arcsin‖)",
              len(tail) > 1 and np.all(np.diff(tail) < 0) and dist[-1] < 0.05 * span, dist,
              span, kind="sanity", detail=f"last distance / span {dist[-1] / span:.3g}"),
        check("largest G: grpo_std closer to θ_arcsin, higher E[2 arcsin √V], lower E[V] than θ_V",
              top.dist_arcsin < top.dist_V and top.arcsin_obj > top.arcsin_at_theta_V
              and top.J < top.J_at_theta_V, top.dist_arcsin, top.dist_V, top.arcsin_obj,
              top.J,
              kind="sanity",
              detail=f"G={top.G}: distance {top.dist_arcsin:.3f} vs {top.dist_V:.3f}"),
    ]


def report(tables, s) -> Section:
    exact = tables["exact"]
    sm = summary(tables)
    tv, rv = _point(exact, "max_J")
    ta, ra = _point(exact, "max_arcsin")
    fp = exact[(exact.point == "fixed_point") & (exact.estimator == "grpo_std")].set_index("G")
    tr0 = tables["train"].iloc[0]  # B and the step size are one per sweep
    lines = ["`scaling_bandit(delta=0.5)`: 4 prompts x 2 responses, shared θ ∈ R², deterministic "
             f"binary rewards; B = {int(tr0.B)} prompts x G responses per step, η_t = "
             f"{float(tr0.eta):g}/(t + {float(tr0.offset):g}), {int(sm.n_seeds.iloc[0])} seeds x "
             f"{int(tables['train'].n_steps.iloc[0])} steps; each seed's θ is the Polyak average "
             "of the second half.", "",
             f"- argmax E[V]: θ_V = ({tv[0]:.4f}, {tv[1]:.4f}), E[V] = {rv.J:.4f}, "
             f"E[2 arcsin √V] = {rv.arcsin_obj:.4f}",
             f"- argmax E[2 arcsin √V]: θ_arcsin = ({ta[0]:.4f}, {ta[1]:.4f}), E[V] = {ra.J:.4f}, "
             f"E[2 arcsin √V] = {ra.arcsin_obj:.4f}",
             "- exact grpo_std limit θ_G: " + ", ".join(
                 f"G={G}: ({fp.loc[G, 'theta1']:.3f}, {fp.loc[G, 'theta2']:.3f})"
                 for G in (4, 16, 64, 1024) if G in fp.index), "",
             markdown_table(pd.DataFrame({
                 "estimator": sm.estimator, "G": sm.G,
                 "trained θ ± 95% CI": [f"({r.theta1:.4f} ± {r.ci1:.4f}, {r.theta2:.4f} ± "
                                        f"{r.ci2:.4f})" for r in sm.itertuples()],
                 "exact limit θ_G": [f"({r.theta_G1:.4f}, {r.theta_G2:.4f})"
                                     for r in sm.itertuples()],
                 "max z to θ_G": sm.z_to_fixed_point, "max z to θ_V": sm.z_to_theta_V,
                 "E[V]": sm.J, "E[2 arcsin √V]": sm.arcsin_obj}),
                 {"max z to θ_G": ".2f", "max z to θ_V": ".1f", "E[V]": ".4f",
                  "E[2 arcsin √V]": ".4f"})]
    lines += ["", "Std-normalised GRPO does not maximise E[V]: it settles at θ_G, the zero of its "
              "exact mean update, which tends to the maximiser of E[2 arcsin √V] as G grows "
              "(Proposition 13 is the large-G statement; at small G all-equal groups, which get "
              "advantage 0, pull θ_G back toward θ_V, and for G = 2, 3 the std-normalised mean "
              "update is exactly proportional to ∇J, so θ_2 = θ_3 = θ_V). Plain GRPO converges "
              "to θ_V.", "",
              "![](std_normalisation.png)"]
    return Section("Claim 6: std normalisation ascends E[2 arcsin √V] (Proposition 13)",
                   "\n".join(lines), checks(tables))


def plot(tables, s, out_dir) -> None:
    exact = tables["exact"]
    tv, _ = _point(exact, "max_J")
    ta, _ = _point(exact, "max_arcsin")
    fp = exact[(exact.point == "fixed_point") & (exact.estimator == "grpo_std")].sort_values("G")
    sm = summary(tables)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(fp.theta1, fp.theta2, "-", color="grey", lw=1,
             label=f"θ_G of grpo_std (exact, G={int(fp.G.min())}…{int(fp.G.max())})")
    for G in (4, 16, 64):
        r = fp[fp.G == G]
        if len(r):
            ax1.annotate(f"G={G}", (r.theta1.iloc[0], r.theta2.iloc[0]), fontsize=7,
                         textcoords="offset points", xytext=(4, -8))
    ax1.plot(*tv, "k*", ms=12, label="argmax E[V]")
    ax1.plot(*ta, "r*", ms=12, label="argmax E[2 arcsin √V]")
    for est, mk in (("grpo_std", "o"), ("grpo", "s")):
        d = sm[sm.estimator == est]
        ax1.errorbar(d.theta1, d.theta2, xerr=d.ci1, yerr=d.ci2, fmt=mk, ms=4, capsize=2,
                     label=f"{est} trained (mean ± 95% CI)")
    ax1.set(xlabel="θ₁", ylabel="θ₂", title="Where training converges")
    ax1.legend(fontsize=7)
    d = np.linalg.norm(fp[["theta1", "theta2"]].values - ta, axis=1) / np.linalg.norm(ta - tv)
    ax2.plot(fp.G, d, "o-", ms=3, label="exact θ_G of grpo_std")
    st = sm[sm.estimator == "grpo_std"]
    ax2.plot(st.G, st.dist_arcsin / np.linalg.norm(ta - tv), "s", label="trained grpo_std")
    ax2.axhline(1.0, color="k", lw=0.8, ls="--", label="argmax E[V]")
    ax2.set(xscale="log", xlabel="group size G",
            ylabel="‖θ − θ_arcsin‖ / ‖θ_V − θ_arcsin‖", title="Finite-G limit → arcsin maximiser")
    ax2.legend(fontsize=7)
    save_figure(fig, out_dir / "std_normalisation")
