"""``grpo-theory rewards FILE``: what a reward log alone tells a trainer.

Reads per-response rewards with prompt ids (JSONL or CSV, as verl and TRL log them), prints the
informative-group fraction at every G from per-prompt pass rates next to the mean-pass-rate
prediction, dynamic sampling's cost, and the Knapsack / VIP allocations
(:mod:`grpo_theory.advisor.rewards`); with ``--out DIR`` writes the tables and a figure drawn
from them.
"""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    """The ``rewards`` subcommand's options."""
    p = sub.add_parser("rewards", help="what per-response rewards alone determine: informative "
                                       "groups at every G, dynamic sampling's cost, pass-rate "
                                       "allocations")
    p.add_argument("log", type=Path, help="the reward log (.jsonl or .csv), one response a record")
    p.add_argument("--prompt-field", default="prompt",
                   help="the field holding the prompt id (verl: uid)")
    p.add_argument("--reward-field", default="reward",
                   help="the field holding the reward (verl: score)")
    p.add_argument("--format", choices=("jsonl", "csv"), default=None,
                   help="the file format (default: from the suffix)")
    p.add_argument("--threshold", type=float, default=None,
                   help="count rewards >= T as successes (default: rewards must be 0 or 1)")
    p.add_argument("--group-sizes", default="2,4,8,16,32",
                   help="the group sizes G to tabulate, comma separated")
    p.add_argument("--batch-size", type=int, default=32,
                   help="kept groups a batch under dynamic sampling")
    p.add_argument("--budget-per-prompt", type=int, default=8,
                   help="mean group size of the Knapsack and VIP allocations")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    p.add_argument("--out", type=Path, default=None,
                   help="write by_G.csv, prompts.csv and informative.png here")


def _sizes(text: str) -> tuple:
    try:
        return tuple(int(v) for v in str(text).split(",") if v.strip())
    except ValueError:
        raise ValueError(f"--group-sizes must be integers separated by commas, got {text!r}") \
            from None


def run(args) -> int:
    """Run the command; returns the exit code."""
    from ..advisor import read_reward_log, summarize_rewards

    log = read_reward_log(args.log, args.prompt_field, args.reward_field, args.format,
                          args.threshold)
    s = summarize_rewards(log, _sizes(args.group_sizes), args.batch_size, args.budget_per_prompt,
                          seed=args.seed)
    print(s.text())
    if args.out is not None:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        s.by_G.to_csv(out / "by_G.csv", index=False)
        s.prompts.to_csv(out / "prompts.csv", index=False)
        plot(out / "by_G.csv", out / "informative")
        print(f"tables and figure written to {out}")
    return 0


def plot(table, stem) -> None:
    """The informative-group fraction against G, drawn from the saved ``by_G.csv``."""
    import pandas as pd

    from ..plotting import plt, save_figure

    d = pd.read_csv(table)
    d = d[d.prompts_used > 0]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.errorbar(d.G, d.informative, yerr=[d.informative - d.ci_low, d.ci_high - d.informative],
                fmt="o-", capsize=3, label="per-prompt pass rates (95% CI over prompts)")
    ax.plot(d.G, d.mean_p_prediction, "s--", label="from the mean pass rate")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(d.G), [str(int(g)) for g in d.G])
    ax.minorticks_off()
    ax.set(xlabel="group size G", ylabel="informative groups", ylim=(0, 1.02),
           title="Groups whose rewards are not all equal")
    ax.legend(fontsize=7)
    save_figure(fig, Path(stem))
