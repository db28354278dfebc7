r"""What rewards alone tell a trainer: pass rates per prompt, and what they determine exactly.

A reward log (per-response rewards with prompt ids, as verl and TRL write them) fixes each
prompt's pass rate ``p_x`` up to sampling error, and with it everything that depends only on the
reward law:

* **Informative groups.** A group of G responses carries a GRPO gradient iff its rewards are not
  all equal: ``a_x(G) = 1 - p_x^G - (1 - p_x)^G``. From ``k`` successes in ``n >= G`` logged
  responses, ``C(k, G) / C(n, G)`` is the unbiased estimate of ``p^G`` (a U-statistic), so
  ``1 - [C(k, G) + C(n - k, G)] / C(n, G)`` is unbiased for ``a_x(G)``. Plugging the *mean* pass
  rate into ``a(G)`` instead over-predicts whenever pass rates spread across prompts
  (``a`` is concave near the middle and flat at the ends: Jensen).
* **Dynamic sampling** (DAPO: drop uninformative groups, draw again until B are kept): a random
  prompt's group is kept with probability ``abar(G)``, so a kept group costs ``G / abar``
  rollouts and filling a batch of B takes ``E[rounds]`` rounds of B prompts (exact, by a
  recursion over the number kept).
* **Pass-rate allocations** (Knapsack, VIP): the per-prompt group sizes those rules would choose
  (:func:`grpo_theory.allocation.pass_rate_allocation`).

What rewards cannot give: the gradient-noise constants c1, c2, c3 and G* need per-response
gradients (``grpo-theory advise``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import gammaln
from scipy.stats import binom

from .._records import jsonl_records
from ..allocation import pass_rate_allocation

#: the file formats :func:`read_reward_log` reads
FORMATS = ("jsonl", "csv")


@dataclass(frozen=True)
class RewardLog:
    """Per-response binary outcomes grouped by prompt.

    Attributes:
        prompts: (P,) prompt ids (strings, in order of first appearance).
        n: (P,) responses per prompt. k: (P,) successes per prompt.
        source: the file read.
    """

    prompts: tuple
    n: np.ndarray
    k: np.ndarray
    source: str = ""

    @property
    def pass_rates(self) -> np.ndarray:
        return self.k / self.n


def _outcome(value, threshold, where):
    if isinstance(value, bool):
        value = float(value)
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: the reward must be a number, got {value!r}") from None
    if not np.isfinite(r):
        raise ValueError(f"{where}: the reward must be finite, got {value!r}")
    if threshold is None:
        if r not in (0.0, 1.0):
            raise ValueError(f"{where}: the reward {r!r} is not 0 or 1; pass --threshold T "
                             "(threshold=T) to count rewards >= T as successes")
        return int(r)
    return int(r >= threshold)


def _rows(path: Path, fmt: str):
    """``(line number, dict)`` per record, streamed (nothing beyond one line is held)."""
    if fmt == "jsonl":
        for i, rec in jsonl_records(path):
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{i}: each line must be a JSON object, got "
                                 f"{type(rec).__name__}")
            yield i, rec
    else:
        with open(path, encoding="utf-8", newline="") as fh:
            for i, rec in enumerate(csv.DictReader(fh), 2):
                yield i, rec


def read_reward_log(path, prompt_field: str = "prompt", reward_field: str = "reward",
                    fmt: str | None = None, threshold: float | None = None) -> RewardLog:
    """Read per-response rewards with prompt ids from a JSONL or CSV file.

    Args:
        path: the file (``.jsonl``/``.json`` or ``.csv``; ``fmt`` overrides the suffix).
        prompt_field: the field (column) holding the prompt id (verl: ``uid``).
        reward_field: the field holding the reward (verl: ``score``, TRL: ``reward``).
        fmt: ``"jsonl"`` or ``"csv"`` (default: from the suffix).
        threshold: count rewards ``>= threshold`` as successes (default: rewards must be 0 or 1).

    Returns:
        A :class:`RewardLog`. Every input error is a one-line ``ValueError`` naming the file,
        the line and the field.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"reward log {path}: no such file")
    if fmt is None:
        suffix = path.suffix.lower()
        fmt = "csv" if suffix == ".csv" else "jsonl" if suffix in (".jsonl", ".json") else None
        if fmt is None:
            raise ValueError(f"reward log {path}: cannot tell the format from the suffix "
                             f"{suffix!r}; pass fmt (--format) as one of {list(FORMATS)}")
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {list(FORMATS)}, got {fmt!r}")
    if threshold is not None and not np.isfinite(float(threshold)):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    index: dict[str, int] = {}
    n: list[int] = []
    k: list[int] = []
    for line, rec in _rows(path, fmt):
        for fld in (prompt_field, reward_field):
            if rec.get(fld) in (None, ""):
                raise ValueError(f"{path}:{line}: field {fld!r} is missing (fields: "
                                 f"{sorted(rec)[:8]}); name the right one with "
                                 f"--{'prompt' if fld == prompt_field else 'reward'}-field")
        pid = str(rec[prompt_field])
        z = _outcome(rec[reward_field], threshold, f"{path}:{line}: field {reward_field!r}")
        j = index.setdefault(pid, len(n))
        if j == len(n):
            n.append(0)
            k.append(0)
        n[j] += 1
        k[j] += z
    if not n:
        raise ValueError(f"reward log {path}: no records")
    return RewardLog(tuple(index), np.asarray(n, np.int64), np.asarray(k, np.int64), str(path))


def _log_comb(n, k):
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def informative_estimates(n, k, group_size: int) -> np.ndarray:
    """Unbiased ``1 - p^G - (1 - p)^G`` per prompt from k of n (NaN where n < G = group_size)."""
    G = int(group_size)
    n, k = np.asarray(n, np.float64), np.asarray(k, np.float64)
    ok = n >= G
    with np.errstate(invalid="ignore"):
        def frac(m):
            return np.where(m >= G, np.exp(_log_comb(m, np.minimum(G, m)) - _log_comb(n, G)), 0.0)
        est = 1.0 - frac(k) - frac(n - k)
    return np.where(ok, est, np.nan)


def expected_rounds(accept: float, batch_size: int) -> float:
    """``E[rounds]`` of B prompts each, kept independently with probability ``accept``, until
    at least B groups are kept (exact: a recursion over the number kept so far)."""
    if not accept > 0:
        return float("inf")
    B = int(batch_size)
    pmf = binom.pmf(np.arange(B + 1), B, accept)
    e = np.zeros(B + 1)  # e[j]: expected further rounds with j kept (e[B] = 0)
    for j in range(B - 1, -1, -1):
        # e[j] = 1 + sum_m pmf[m] e[min(j + m, B)], with the m = 0 term on both sides
        rest = sum(pmf[m] * e[min(j + m, B)] for m in range(1, B + 1))
        e[j] = (1.0 + rest) / (1.0 - pmf[0])
    return float(e[0])


@dataclass(frozen=True)
class RewardSummary:
    """What the rewards determine (:func:`summarize_rewards`).

    Attributes:
        by_G: one row per G: prompts with ``n >= G`` (used), the informative-group fraction
            from per-prompt pass rates with its bootstrap interval over prompts, the prediction
            from the mean pass rate, dynamic sampling's rollouts per kept group and rounds.
        prompts: one row per prompt: id, n, k, pass rate, the Knapsack and VIP sizes.
        mean_pass_rate, logged_zero_variance: the mean pass rate over prompts and the share of
            prompts whose logged responses all got the same reward.
        batch_size, budget_per_prompt: the dynamic-sampling B and the allocations' mean size.
    """

    by_G: pd.DataFrame
    prompts: pd.DataFrame
    mean_pass_rate: float
    logged_zero_variance: float
    batch_size: int
    budget_per_prompt: int
    source: str = ""
    notes: tuple = field(default=())

    def text(self) -> str:
        """A plain-text report."""
        b = self.by_G.copy()
        lines = [f"reward log {self.source}: {len(self.prompts)} prompts, "
                 f"{int(self.prompts.n.sum())} responses, mean pass rate "
                 f"{self.mean_pass_rate:.3f}; logged groups with one reward only: "
                 f"{self.logged_zero_variance:.1%}", "",
                 "informative groups (rewards not all equal), per-prompt estimate [95% CI over "
                 "prompts] vs the mean-pass-rate prediction; DAPO dynamic sampling at "
                 f"B = {self.batch_size}:",
                 b.to_string(index=False, float_format=lambda v: f"{v:.3f}"), ""]
        p = self.prompts
        for m in ("knapsack", "vip"):
            g = p[f"{m}_G"]
            lines.append(f"{m} allocation at {self.budget_per_prompt} rollouts per prompt: G from "
                         f"{int(g.min())} to {int(g.max())}, {int((g == g.min()).sum())} prompts "
                         "at the smallest size")
        lines += list(self.notes)
        return "\n".join(lines)


def _bootstrap(values, rng, n_boot):
    v = values[np.isfinite(values)]
    if v.size == 0:
        return np.nan, np.nan
    means = v[rng.integers(0, v.size, (n_boot, v.size))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def summarize_rewards(log: RewardLog, group_sizes=(2, 4, 8, 16, 32), batch_size: int = 32,
                      budget_per_prompt: int = 8, n_boot: int = 2000,
                      seed: int = 0) -> RewardSummary:
    """What the pass-rate distribution of a reward log determines (module docstring).

    Args:
        log: a :class:`RewardLog` (:func:`read_reward_log`).
        group_sizes: the G to tabulate (integers >= 1).
        batch_size: B of dynamic sampling (kept groups a batch).
        budget_per_prompt: the mean group size the Knapsack and VIP allocations spend.
        n_boot: bootstrap resamples over prompts. seed: their seed.

    Returns:
        A :class:`RewardSummary`.

    Examples:
        >>> import numpy as np
        >>> log = RewardLog(("a", "b"), np.array([8, 8]), np.array([0, 4]))
        >>> s = summarize_rewards(log, group_sizes=(2,), n_boot=200)
        >>> round(float(s.by_G.informative[0]), 3), round(float(s.by_G.mean_p_prediction[0]), 3)
        (0.286, 0.375)
    """
    sizes = []
    for G in group_sizes:
        if isinstance(G, bool) or not isinstance(G, (int, np.integer)) or G < 1:
            raise ValueError(f"group_sizes must be integers >= 1, got {G!r}")
        sizes.append(int(G))
    for nm, v in (("batch_size", batch_size), ("budget_per_prompt", budget_per_prompt),
                  ("n_boot", n_boot)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{nm} must be an integer >= 1, got {v!r}")
    rng = np.random.default_rng(seed)
    p = log.pass_rates
    pbar = float(p.mean())
    rows = []
    for G in sizes:
        est = informative_estimates(log.n, log.k, G)
        used = np.isfinite(est)
        a = float(est[used].mean()) if used.any() else np.nan
        lo, hi = _bootstrap(est, rng, n_boot)
        rows.append(dict(G=G, prompts_used=int(used.sum()), informative=a, ci_low=lo,
                         ci_high=hi, mean_p_prediction=1 - pbar**G - (1 - pbar) ** G,
                         rollouts_per_kept_group=G / a if a > 0 else np.inf,
                         dapo_rounds=expected_rounds(a, batch_size) if a > 0 else np.inf))
    P = len(p)
    budget = max(budget_per_prompt, 2) * P
    sizes_k = pass_rate_allocation(p, budget, "knapsack", min_size=2)
    sizes_v = pass_rate_allocation(p, budget, "vip", min_size=2)
    prompts = pd.DataFrame(dict(prompt=list(log.prompts), n=log.n, k=log.k, pass_rate=p,
                                knapsack_G=np.asarray(sizes_k.sizes), vip_G=np.asarray(sizes_v.sizes)))
    notes = ("prompts with fewer logged responses than G are left out of that G's estimate "
             "(no unbiased estimate exists for them)",
             "the gradient-noise constants c1, c2, c3 and the best G need per-response "
             "gradients: grpo-theory advise")
    return RewardSummary(pd.DataFrame(rows), prompts, pbar,
                         float(np.mean((log.k == 0) | (log.k == log.n))), int(batch_size),
                         int(max(budget_per_prompt, 2)), log.source, notes)
