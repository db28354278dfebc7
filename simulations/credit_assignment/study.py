"""Credit assignment and the rank-2 structure of GRPO gradients (arXiv 2606.29238).

Claim: with an outcome reward every token of a response gets the response's advantage (token-level
gradient = sequence-level gradient); with binary rewards the group gradient is
``c(k, G) (mean score of correct - mean score of incorrect)`` with ``c`` in closed form, for
mean-centred, leave-one-out and std-normalised advantages; the per-response gradient matrix
``diag(A) S`` has effective rank about 2 for peaked policies but not for near-uniform ones.

Tables (kinds) under ``<out>/credit-assignment/``, one or more cells each:

* ``identities`` (one cell): max errors of the two identities over many sampled groups.
* ``rank`` (one cell per policy and inverse temperature beta): effective rank (entropy erank,
  participation ratio, #components for 90%) of diag(A) S, of the class aggregates, and of the
  MLP's W1 weight-gradient matrix, vs G, tabular and MLP policies.
* ``training`` (one cell): along GRPO training of the MLP policy: J, entropy, zero-advantage
  group fraction observed vs exact ``V^G + (1-V)^G``, effective ranks.
* ``sparsity`` (one cell): Monte Carlo zero-advantage fraction vs ``p^G + (1-p)^G``.
* ``baseline`` (one cell): exact MSE of oracle V(x), optimal b*(x), GRPO and the group mean when
  the reward correlates with length (so with ||s||^2) and in a control where it does not.

PASS when both identities hold to 1e-12; for the most peaked policy the erank stays <= 2.5 and
varies by < 1 over G, while for the flattest it grows (last G > 1.5 x erank at G = 4, and > 4);
the observed zero-advantage fraction along training and in the sparsity sweep matches the exact
one within 4 standard errors; the baseline MSE gap matches its closed form to 1e-12 (relative);
with length-correlated rewards the group mean stays > 5% above b* (within-prompt) while
max |V - b*| > 0.05, and in the control b* = V and the ratio is < 1.05 at the largest G.

    grpo-theory credit-assignment [--full]
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import grpo_theory as gt
from grpo_theory import problems
from grpo_theory.companions import MLPSequencePolicy, credit as C
from grpo_theory.companions.mlp_policy import scaled_policy
from grpo_theory.experiments import Cell, Experiment, key_seed
from grpo_theory._precision import float64
from grpo_theory.problems import sequence_policy

from .analysis import IDENTITY_TOL, Z_TOL, checks, plot, report

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "mlp_policy",
           "control_policy", "checks", "report", "plot", "EXPERIMENT"]

NAME = "credit-assignment"
CLAIM = ("outcome reward: tokens share the response's advantage; binary group gradient = "
         "c(k,G)(s+ - s-); effective rank ~2 for peaked policies, not for near-uniform ones")
BINARY_ESTIMATORS = {"grpo_mean": ("mean", 1, 0.0), "grpo": ("loo", 1, 0.0),
                     "grpo_std_trl": ("std", 1, 1e-4), "grpo_std_easydel": ("std", 0, 1e-4),
                     "grpo_std_paper": (None, 1, 0.0)}
SPARSITY_P = (0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98)
SPARSITY_G = (2, 4, 8, 16, 32)
TRAIN_G, TRAIN_B, TRAIN_LR = 8, 8, 0.1


@dataclass(frozen=True)
class Settings:
    """The identity, rank, training, sparsity and baseline cells.

    Attributes:
        n_groups: sampled groups per rank cell.
        G: the group sizes of the rank cells.
        betas_tab: the tabular policy's inverse temperatures, one rank cell each.
        betas_mlp: the MLP policy's inverse temperatures, one rank cell each.
        seeds: runs of the training cell.
        steps: steps per training run.
        sparsity_reps: Monte Carlo replicates of the sparsity cell.
        id_groups: sampled groups per (policy, G) in the identity cell.
        baseline_G: the group sizes of the baseline cell.
        id_G: the group sizes of the identity cell.
    """

    n_groups: int
    G: tuple
    betas_tab: tuple
    betas_mlp: tuple
    seeds: int
    steps: int
    sparsity_reps: int
    id_groups: int
    baseline_G: tuple
    id_G: tuple = (2, 4, 8)


SETTINGS = {
    "quick": Settings(n_groups=1000, G=(2, 4, 8, 16), betas_tab=(0.0, 10.0),
                      betas_mlp=(0.1, 10.0), seeds=4, steps=150, sparsity_reps=20_000,
                      id_groups=200, baseline_G=(2, 64)),
    "full": Settings(n_groups=10_000, G=(2, 4, 8, 16, 32),
                     betas_tab=(0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0),
                     betas_mlp=(0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0), seeds=16, steps=300,
                     sparsity_reps=400_000, id_groups=2000,
                     baseline_G=(2, 4, 8, 16, 32, 64, 128)),
}

_RANK_COLS = {f"{p}_{f}{se}": "float?" for p in ("resp", "class", "weight")
              for f in C.RANK_FIELDS for se in ("", "_se")}
SCHEMA = {
    "identities": dict(check="str", policy="str", G="int", estimator="str", max_err="float",
                       n="int", max_err_closed_form="float?"),
    "rank": dict(policy="str", beta="float", G="int", n_groups="int", mixed_frac="float",
                 n_mixed="int", distinct="float?", entropy="float", value="float",
                 plane_energy="float?", plane_energy_se="float?", **_RANK_COLS),
    "training": dict(step="int", G="int", B="int", lr="float", n_seeds="int", J="float",
                     entropy="float", zero_obs="float", zero_exact="float", resp_erank="float?",
                     resp_n90="float?", plane_energy="float?", weight_erank="float?",
                     zero_resid_mean="float?", zero_resid_se="float?"),
    "sparsity": dict(p="float", G="int", n_reps="int", mc="float", exact="float", se="float",
                     z="float"),
    "baseline": dict(policy="str", corr_s2_reward="float", G="int", mse_oracle="float",
                     mse_optimal="float", mse_grpo="float", mse_grpo_mean="float",
                     gap_predicted="float", gap_measured="float", ratio_grpo_optimal="float",
                     ratio_grpo_oracle="float", between_prompt="float",
                     within_ratio_grpo_optimal="float", max_abs_V_minus_bstar="float"),
}


def mlp_policy() -> MLPSequencePolicy:
    """3 prompts, vocab 2 + EOS, horizon 4, 16 tanh units; correct iff first token = prompt % 2."""
    return MLPSequencePolicy(lambda p, t, L: float(t[0] == (p % 2)), 3, 2, 4, hidden=16, seed=0)


def control_policy() -> gt.SequencePolicy:
    """Uniform fixed-length policy: ||s||^2 is the same for every response (Assumption 2)."""
    return gt.SequencePolicy(np.zeros((2, 3, 3, 2)),
                             lambda p, t, L: float(0.2 + 0.3 * (t[0] == 1) + 0.2 * p), 2, 3,
                             eos=False)


def cells(s: Settings) -> list[Cell]:
    out = [Cell("identities", dict(part="identities", n_groups=s.id_groups,
                                   group_sizes=list(s.id_G)), "identities")]
    for pname, betas in (("tabular", s.betas_tab), ("mlp", s.betas_mlp)):
        out += [Cell(f"rank_{pname}_b{b:g}", dict(part="rank", policy=pname, beta=float(b),
                                                  group_sizes=list(s.G), n_groups=s.n_groups,
                                                  estimator="grpo_std"), "rank")
                for b in betas]
    out += [Cell("training", dict(part="training", steps=s.steps, seeds=s.seeds, G=TRAIN_G,
                                  B=TRAIN_B, lr=TRAIN_LR), "training"),
            Cell("sparsity", dict(part="sparsity", n_reps=s.sparsity_reps, ps=list(SPARSITY_P),
                                  group_sizes=list(SPARSITY_G)), "sparsity"),
            Cell("baseline", dict(part="baseline", group_sizes=list(s.baseline_G)), "baseline")]
    return out


# --- cells ------------------------------------------------------------------------------------


def _identity_rows(n_groups, group_sizes, key):
    rows = []
    for pname, pol in (("tabular", sequence_policy()), ("mlp", mlp_policy())):
        prob = pol.problem()
        for G in group_sizes:
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


def _rank_rows(pname, beta, group_sizes, n_groups, estimator, key):
    base = sequence_policy() if pname == "tabular" else mlp_policy()
    pol = scaled_policy(base, beta)
    rows = []
    for G in group_sizes:  # one independent key per G, derived from the cell's key
        r = C.rank_study(pol, G, n_groups, key=jax.random.fold_in(key, G),
                         estimator=estimator, weight="W1" if pname == "mlp" else None)
        r.update(policy=pname, beta=beta)
        rows.append({c: np.nan for c in _RANK_COLS} | r)  # weight_* only for the MLP
    return rows


def _training_rows(steps, n_seeds, G, B, lr, key):
    pol = mlp_policy()
    rec = C.train_grpo_records(pol, steps, B, G, lr, key_seed(key, n_seeds), weight="W1")
    S = rec["J"].shape[0]
    rows = []
    for t in range(steps):
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


def _sparsity_rows(n_reps, ps, group_sizes, key):
    ps = np.asarray(ps, dtype=float)
    rows = []
    for G in group_sizes:
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


@float64
def cell(config: dict, key) -> list[dict]:
    """The rows of one cell; ``config["part"]`` names its table (see the module docs)."""
    part = config["part"]
    if part == "identities":
        return _identity_rows(config["n_groups"], config["group_sizes"], key)
    if part == "rank":
        return _rank_rows(config["policy"], config["beta"], config["group_sizes"],
                          config["n_groups"], config["estimator"], key)
    if part == "training":
        return _training_rows(config["steps"], config["seeds"], config["G"], config["B"],
                              config["lr"], key)
    if part == "sparsity":
        return _sparsity_rows(config["n_reps"], config["ps"], config["group_sizes"], key)
    if part == "baseline":
        return _baseline_rows(config["group_sizes"])
    raise ValueError(f"config['part'] must be one of {sorted(SCHEMA)}, got {part!r}")


# --- checks, report, figure: simulations/_credit_assignment_report.py ----------------------------


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=40)
