"""Credit assignment and the rank-2 structure of GRPO gradients (issue 4.1, arXiv 2606.29238).

Tables under ``results/credit-assignment/``:

* ``identities.csv``: token-level gradient = sequence-level gradient (every token gets the
  response's advantage); binary rewards: group gradient = c(k, G) (mean score of correct - mean
  score of incorrect) with c in closed form, for mean-centred, leave-one-out and std-normalised
  advantages (max errors over many sampled groups).
* ``rank.csv``: effective rank (entropy erank, participation ratio, #components for 90%) of the
  per-response matrix diag(A) S, of the class aggregates, and of the MLP's W1 weight-gradient
  matrix, vs G and vs policy entropy (inverse temperature beta), tabular and MLP policies.
* ``training.csv``: along GRPO training of the MLP policy: J, entropy, zero-advantage group
  fraction observed vs exact ``V^G + (1-V)^G``, effective ranks.
* ``sparsity.csv``: Monte Carlo zero-advantage fraction vs ``p^G + (1-p)^G``.
* ``baseline.csv``: exact MSE of oracle V(x), optimal b*(x), GRPO and the group mean when the
  reward correlates with length (so with ||s||^2) and in a control where it does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory import problems
from grpo_theory.companions import credit as C
from grpo_theory.experiments.plotting import plt, save_figure
from grpo_theory.experiments.results import CellStore, Progress
from grpo_theory.problems import sequence_policy

NAME = "credit-assignment"
CLAIM = ("outcome reward: tokens share the response's advantage; binary group gradient = "
         "c(k,G)(s+ - s-); effective rank ~2 for peaked policies, not for near-uniform ones")
ORDER = 40
IDENTITY_TOL = 1e-12
Z_TOL = 4.0
BINARY_ESTIMATORS = {"grpo_mean": ("mean", 1, 0.0), "grpo": ("loo", 1, 0.0),
                     "grpo_std_trl": ("std", 1, 1e-4), "grpo_std_easydel": ("std", 0, 1e-4),
                     "grpo_std_paper": (None, 1, 0.0)}


def _settings(quick: bool) -> dict:
    if quick:
        return dict(n_groups=1000, G=(2, 4, 8, 16), betas_tab=(0.0, 10.0),
                    betas_mlp=(0.1, 10.0), seeds=4, steps=150, sparsity_reps=20_000,
                    id_groups=200, baseline_G=(2, 64))
    return dict(n_groups=10_000, G=(2, 4, 8, 16, 32),
                betas_tab=(0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0),
                betas_mlp=(0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0), seeds=16, steps=300,
                sparsity_reps=400_000, id_groups=2000, baseline_G=(2, 4, 8, 16, 32, 64, 128))


def mlp_policy() -> C.MLPSequencePolicy:
    """3 prompts, vocab 2 + EOS, horizon 4, 16 tanh units; correct iff first token = prompt % 2."""
    return C.MLPSequencePolicy(lambda p, t, L: float(t[0] == (p % 2)), 3, 2, 4, hidden=16, seed=0)


def control_policy() -> gt.SequencePolicy:
    """Uniform fixed-length policy: ||s||^2 is the same for every response (Assumption 2)."""
    return gt.SequencePolicy(np.zeros((2, 3, 3, 2)),
                             lambda p, t, L: float(0.2 + 0.3 * (t[0] == 1) + 0.2 * p), 2, 3,
                             eos=False)


# --- cells ------------------------------------------------------------------------------------


def _identity_rows(n_groups, seed):
    rows = []
    key = jax.random.PRNGKey(seed)
    for pname, pol in (("tabular", sequence_policy()), ("mlp", mlp_policy())):
        prob = pol.problem()
        for G in (2, 4, 8):
            key, k1 = jax.random.split(key)
            x, y, z = gt.sample_groups(k1, prob, n_groups, G)
            sc = prob.scores[x[:, None], y]
            # token-level (reverse-mode through per-token log-probs) vs sequence-level: a
            # handful of groups (each is one autodiff call)
            adv = gt.compute_advantages("grpo_std", z)
            n_tok = 2 if n_groups <= 200 else 8
            tok_err = max(float(jnp.max(jnp.abs(
                C.token_level_gradient(pol, int(x[i]), y[i], adv[i]) - adv[i] @ sc[i])))
                for i in range(n_tok))
            rows.append(dict(check="token_vs_sequence", policy=pname, G=G, estimator="grpo_std",
                             max_err=tok_err, n=n_tok))
            m1, m0 = C.class_mean_scores(sc, z)
            k = jnp.sum(z, axis=1)
            for est, (kind, ddof, eps) in BINARY_ESTIMATORS.items():
                a = gt.compute_advantages(est, z)
                lhs = C.group_gradient(sc, a)
                c_est = jnp.asarray([C.binary_scalar_from_estimator(est, G, j)
                                     for j in range(G + 1)])[k.astype(int)]
                err = float(jnp.max(jnp.abs(lhs - c_est[:, None] * (m1 - m0))))
                r = dict(check="binary_identity", policy=pname, G=G, estimator=est, max_err=err,
                         n=n_groups)
                if kind is not None:
                    cf = C.binary_scalar(k, G, kind, ddof, eps)
                    r["max_err_closed_form"] = float(jnp.max(jnp.abs(cf - c_est)))
                    r["max_err"] = max(err, float(jnp.max(jnp.abs(
                        lhs - cf[:, None] * (m1 - m0)))))
                rows.append(r)
    return rows


def _rank_rows(pname, beta, G_list, n_groups, seed):
    base = sequence_policy() if pname == "tabular" else mlp_policy()
    pol = C.scaled_policy(base, beta)
    rows = []
    for G in G_list:
        r = C.rank_study(pol, G, n_groups, seed=seed + G, estimator="grpo_std",
                         weight="W1" if pname == "mlp" else None)
        r.update(policy=pname, beta=beta)
        rows.append(r)
    return rows


def _training_rows(st, seed):
    pol = mlp_policy()
    G, B, lr = 8, 8, 0.1
    rec = C.train_grpo_records(pol, st["steps"], B, G, lr, range(seed, seed + st["seeds"]),
                               weight="W1")
    S = rec["J"].shape[0]
    rows = []
    for t in range(st["steps"]):
        r = dict(step=t, G=G, B=B, lr=lr, n_seeds=S)
        for k in ("J", "entropy", "zero_obs", "zero_exact", "resp_erank", "resp_n90",
                  "plane_energy", "weight_erank"):
            v = rec[k][:, t]
            r[k] = float(np.nanmean(v)) if np.isfinite(v).any() else np.nan
        rows.append(r)
    resid = (rec["zero_obs"] - rec["zero_exact"]).ravel()
    # per-step residual: mean of B indicators minus their exact probabilities; steps and seeds
    # are independent draws given the parameters, so the residuals are mean-zero
    rows[-1]["zero_resid_mean"] = float(resid.mean())
    rows[-1]["zero_resid_se"] = float(resid.std(ddof=1) / np.sqrt(resid.size))
    return rows


def _sparsity_rows(n_reps, seed):
    ps = np.array([0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98])
    Gs = (2, 4, 8, 16, 32)
    rows = []
    key = jax.random.PRNGKey(seed)
    for G in Gs:
        key, k = jax.random.split(key)
        z = jax.random.bernoulli(k, jnp.asarray(ps)[:, None, None], (len(ps), n_reps, G))
        allsame = np.asarray(jnp.all(z == z[..., :1], axis=-1), dtype=float)  # (n_p, R)
        frac = allsame.mean(1)
        exact = np.asarray(C.zero_advantage_probability(ps, G))
        se = np.sqrt(exact * (1 - exact) / n_reps)
        for p, f, e, s in zip(ps, frac, exact, se):
            rows.append(dict(p=float(p), G=G, n_reps=n_reps, mc=float(f), exact=float(e),
                             se=float(s), z=float((f - e) / s) if s > 0 else 0.0))
    return rows


def _baseline_rows(group_sizes):
    rows = []
    for pname, pol in (("length_correlated", problems.length_reward_policy()),
                       ("control", control_policy())):
        corr = C.score_reward_correlation(pol)
        for r in C.baseline_comparison(pol, group_sizes):
            r.update(policy=pname, corr_s2_reward=float(np.nanmax(np.abs(corr))))
            rows.append(r)
    return rows


def run(out_dir: Path, quick: bool = True, seed: int = 0) -> None:
    st = _settings(quick)
    setting = "quick" if quick else "full"
    out_dir = Path(out_dir)
    kinds = ("identities", "rank", "training", "sparsity", "baseline")
    stores = {k: CellStore(out_dir / k, NAME, seed=seed, setting=setting) for k in kinds}
    cells = [("identities", "all")]
    cells += [("rank", f"tabular_b{b:g}") for b in st["betas_tab"]]
    cells += [("rank", f"mlp_b{b:g}") for b in st["betas_mlp"]]
    cells += [("training", "mlp"), ("sparsity", "all"), ("baseline", "all")]
    prog = Progress(NAME, len(cells))
    for kind, cid in cells:
        store = stores[kind]
        if store.done(cid):
            prog.step(f"{kind}/{cid}", skipped=True)
            continue
        cfg = dict(setting=setting)
        if kind == "identities":
            rows = _identity_rows(st["id_groups"], seed)
        elif kind == "rank":
            pname, b = cid.split("_b")
            rows = _rank_rows(pname, float(b), st["G"], st["n_groups"], seed)
            cfg.update(n_groups=st["n_groups"], estimator="grpo_std")
        elif kind == "training":
            rows = _training_rows(st, seed)
        elif kind == "sparsity":
            rows = _sparsity_rows(st["sparsity_reps"], seed)
        else:
            rows = _baseline_rows(st["baseline_G"])
        store.write(cid, rows, config=cfg)
        prog.step(f"{kind}/{cid}")
    for k, s in stores.items():
        s.table().to_csv(out_dir / f"{k}.csv", index=False)
    rk = pd.read_csv(out_dir / "rank.csv")
    print(rk[["policy", "beta", "G", "entropy", "mixed_frac", "distinct", "resp_erank",
              "resp_participation", "resp_n90", "plane_energy", "weight_erank"]].to_string(
        index=False, float_format=lambda v: f"{v:.3f}"))


def plot(out_dir: Path) -> None:
    out_dir = Path(out_dir)
    rk = pd.read_csv(out_dir / "rank.csv")
    tr = pd.read_csv(out_dir / "training.csv")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, pname in zip(axes[:2], ("tabular", "mlp")):
        d = rk[rk.policy == pname]
        for beta, dd in d.groupby("beta"):
            dd = dd.sort_values("G")
            line, = ax.plot(dd.G, dd.resp_erank, "o-",
                            label=f"β={beta:g} (H={dd.entropy.iloc[0]:.2f} nats)")
            ax.fill_between(dd.G, dd.resp_erank - 2 * dd.resp_erank_se,
                            dd.resp_erank + 2 * dd.resp_erank_se, color=line.get_color(),
                            alpha=0.2)
        ax.axhline(2, color="k", lw=0.8, ls=":")
        ax.set(xscale="log", xlabel="group size G", ylabel="entropy effective rank of diag(A)S",
               title=f"{pname} policy")
        ax.set_xticks(sorted(set(d.G)), [str(g) for g in sorted(set(d.G))])
        ax.minorticks_off()
        ax.legend(fontsize=7)
    ax = axes[2]
    ax.plot(tr.step, tr.resp_erank, label="erank diag(A)S (mixed groups)")
    ax.plot(tr.step, tr.entropy, label="policy entropy (nats)")
    ax.plot(tr.step, tr.zero_obs, label="zero-advantage fraction (observed)")
    ax.plot(tr.step, tr.zero_exact, "--", label="exact mean V^G+(1-V)^G")
    ax.plot(tr.step, tr.J, label="J")
    ax.set(xlabel="GRPO step (MLP policy)", title="sparsity and rank along training")
    ax.legend(fontsize=7)
    save_figure(fig, out_dir / "credit_rank")


def _checks(out_dir: Path) -> dict:
    out_dir = Path(out_dir)
    idt = pd.read_csv(out_dir / "identities.csv")
    rk = pd.read_csv(out_dir / "rank.csv")
    tr = pd.read_csv(out_dir / "training.csv")
    sp = pd.read_csv(out_dir / "sparsity.csv")
    bl = pd.read_csv(out_dir / "baseline.csv")
    c = {}
    c["token_equals_sequence"] = float(idt[idt.check == "token_vs_sequence"].max_err.max()) \
        <= IDENTITY_TOL
    b = idt[idt.check == "binary_identity"]
    c["binary_identity"] = float(b.max_err.max()) <= IDENTITY_TOL
    c["binary_closed_form"] = float(b.max_err_closed_form.max()) <= IDENTITY_TOL
    for pname in ("tabular", "mlp"):
        d = rk[rk.policy == pname]
        peaked = d[d.beta == d.beta.max()].sort_values("G")
        flat = d[d.beta == d.beta.min()].sort_values("G")
        c[f"{pname}_peaked_rank_le2"] = bool((peaked.resp_erank <= 2.5).all() and (
            peaked.resp_erank.max() - peaked.resp_erank.min() < 1.0))
        c[f"{pname}_uniform_rank_grows"] = bool(
            flat.resp_erank.iloc[-1] > 1.5 * flat[flat.G == 4].resp_erank.iloc[0]
            and flat.resp_erank.iloc[-1] > 4.0)
    last = tr.dropna(subset=["zero_resid_mean"]).iloc[-1]
    c["training_zero_fraction_exact"] = abs(last.zero_resid_mean) <= Z_TOL * last.zero_resid_se
    c["sparsity_mc_exact"] = bool((sp.z.abs() <= Z_TOL).all())
    c["baseline_gap_identity"] = bool(((bl.gap_measured - bl.gap_predicted).abs()
                                       <= 1e-12 * bl.mse_oracle).all())
    lc = bl[bl.policy == "length_correlated"].sort_values("G")
    ct = bl[bl.policy == "control"].sort_values("G")
    c["correlated_groupmean_not_optimal"] = bool(
        lc.within_ratio_grpo_optimal.iloc[-1] > 1.05 and lc.max_abs_V_minus_bstar.iloc[0] > 0.05)
    c["control_groupmean_asymptotically_optimal"] = bool(
        ct.max_abs_V_minus_bstar.max() < 1e-12 and ct.within_ratio_grpo_optimal.iloc[-1] < 1.05)
    return c


def report(out_dir: Path) -> dict:
    out_dir = Path(out_dir)
    c = _checks(out_dir)
    idt = pd.read_csv(out_dir / "identities.csv")
    rk = pd.read_csv(out_dir / "rank.csv")
    tr = pd.read_csv(out_dir / "training.csv")
    sp = pd.read_csv(out_dir / "sparsity.csv")
    bl = pd.read_csv(out_dir / "baseline.csv")
    b = idt[idt.check == "binary_identity"]
    L = ["Tabular sequence policy (`problems.sequence_policy`, 3 prompts, vocab 2 + EOS, horizon 4, "
         "Bernoulli rewards) and a tiny MLP softmax sequence policy (16 tanh units, binary "
         "rewards). Advantages std-normalised (ddof 1, eps 1e-6) unless stated.", "",
         f"* Token-level gradient (autodiff of sum_t A_i log pi(y_t|.)) = A_i s(y_i): max error "
         f"{idt[idt.check == 'token_vs_sequence'].max_err.max():.1e}.",
         f"* Binary rewards, {int(b.n.max())} groups per G: (1/G) sum_i A_i s_i = c(k,G) "
         f"(s̄+ − s̄−) for {', '.join(sorted(set(b.estimator)))}: max error {b.max_err.max():.1e};"
         " closed forms c = k(G−k)/G² (mean), k(G−k)/(G(G−1)) (leave-one-out), "
         "k(G−k)/G²/(sd+eps) with sd = sqrt(k(G−k)/(G(G−ddof))) (std) agree to "
         f"{b.max_err_closed_form.max():.1e}.", "",
         "Effective rank of the per-response matrix diag(A)S over groups with mixed rewards "
         "(mean; G rows):", "",
         "| policy | β | entropy (nats) | " + " | ".join(f"G={g}" for g in sorted(set(rk.G)))
         + " | plane energy at max G |", "|---|---|---|" + "---|" * len(set(rk.G)) + "---|"]
    for (pname, beta), d in rk.groupby(["policy", "beta"]):
        d = d.sort_values("G")
        L.append(f"| {pname} | {beta:g} | {d.entropy.iloc[0]:.2f} | " + " | ".join(
            f"{v:.2f}±{s:.2f}" for v, s in zip(d.resp_erank, d.resp_erank_se))
            + f" | {d.plane_energy.iloc[-1]:.3f} |")
    mlp = rk[rk.policy == "mlp"].sort_values(["beta", "G"])
    L += ["", "MLP W1 weight-gradient matrix (10 x 16) of the group gradient, entropy erank: "
          + "; ".join(f"β={bb:g}: " + ", ".join(f"{v:.2f}" for v in d.weight_erank)
                      for bb, d in mlp.groupby("beta")) + " (G ascending).", "",
          "Where 'rank ~2 whatever G' holds: for peaked (low-entropy) policies a group holds few "
          "distinct responses, so the rows of diag(A)S collapse onto the class directions "
          "(plane energy near 1, erank <= 2). For near-uniform policies the rows are distinct "
          "scores and the effective rank grows with G; only the group *sum* stays in the "
          "2-plane of class means (the binary identity).", ""]
    last = tr.dropna(subset=["zero_resid_mean"]).iloc[-1]
    first = tr.iloc[0]
    L += [f"Training the MLP with GRPO (lr {first.lr}, B = G = 8, {int(first.n_seeds)} seeds, "
          f"{len(tr)} steps): J {first.J:.3f} → {tr.J.iloc[-1]:.3f}, entropy "
          f"{first.entropy:.2f} → {tr.entropy.iloc[-1]:.2f}, erank of diag(A)S "
          f"{first.resp_erank:.2f} → {tr.resp_erank.dropna().iloc[-10:].mean():.2f} (last 10 "
          f"steps), zero-advantage fraction {first.zero_obs:.2f} → "
          f"{tr.zero_obs.iloc[-10:].mean():.2f}. Observed − exact zero fraction over all steps: "
          f"{last.zero_resid_mean:+.4f} ± {last.zero_resid_se:.4f}.",
          f"Sparsity: Monte Carlo fraction of all-equal groups vs p^G + (1−p)^G over "
          f"{len(sp)} (p, G) cells: largest |z| = {sp.z.abs().max():.2f}.", "",
          "Optimal baseline b* = E[r||s||²]/E[||s||²] vs the group mean (exact MSE, B = 1):", "",
          "| policy | corr(||s||², r) | max |V − b*| | G | MSE oracle | MSE b* | MSE GRPO | "
          "GRPO / b* | within-prompt GRPO / b* | gap oracle − b* (pred.) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in bl[bl.G.isin([2, 8, 64, 128])].iterrows():
        L.append(f"| {r.policy} | {r.corr_s2_reward:.3f} | {r.max_abs_V_minus_bstar:.3f} | {r.G} "
                 f"| {r.mse_oracle:.5f} | {r.mse_optimal:.5f} | {r.mse_grpo:.5f} | "
                 f"{r.ratio_grpo_optimal:.3f} | {r.within_ratio_grpo_optimal:.3f} | "
                 f"{r.gap_measured:.2e} ({r.gap_predicted:.2e}) |")
    L += ["", "When the reward correlates with ||s||² (here through length), b* ≠ V and the "
          "within-prompt MSE of GRPO's group mean stays a fixed factor above b*'s as G grows "
          "(the gap E||s||²(V−b*)²/G is of the order of the MSE itself); in the control "
          "(||s||² constant) b* = V and the factor → 1 (GRPO's O(1/G²) excess). The total "
          "ratio tends to 1 in both because the between-prompt term E||g(X) − g||² (B = 1) "
          "does not shrink with G.", "",
          "Checks: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in c.items()), "",
          "![](credit_rank.png)"]
    return dict(title="Credit assignment and rank-2 structure", markdown="\n".join(L),
                passed=all(c.values()))


if __name__ == "__main__":  # pragma: no cover
    run(Path("results") / NAME)
    print(json.dumps(_checks(Path("results") / NAME), indent=1))
