r"""The group-size schedule's rule, without torch: which G a scheduler moves to after an estimate.

:func:`propose_group_size` is the rule of :class:`grpo_theory.torch.GroupSizeScheduler` (in TRL)
and of the package's own scheduled training loop: no change while the current G lies inside the
estimate's G* interval (the data do not exclude it); otherwise the allowed G nearest the
recommended one in log scale or, with no recommendation (c1 not resolved above 0, so the
interval is [low, inf)), the smallest allowed G >= low; taken if it differs from the current G
by at least the factor ``min_change`` (hysteresis). :func:`allowed_group_sizes`: the divisors G
of a batch of N rows with at least 3 completions per prompt and at least 3 prompts.
"""

from __future__ import annotations

import math

from .. import _validation as V
from .pieces import MIN_PROMPTS, MIN_SAMPLES


def allowed_group_sizes(rows: int, min_group_size: int = MIN_SAMPLES,
                        max_group_size: int | None = None,
                        min_prompts: int = MIN_PROMPTS) -> list[int]:
    """The group sizes G that divide a generation batch of ``rows`` completions into
    B = rows / G >= ``min_prompts`` groups, with ``min_group_size <= G <= max_group_size``.

    >>> allowed_group_sizes(24)
    [3, 4, 6, 8]
    """
    rows = V.positive_int("rows", rows)
    lo = V.integer("min_group_size", min_group_size, 2)
    top = rows if max_group_size is None else V.integer("max_group_size", max_group_size, lo)
    min_prompts = V.integer("min_prompts", min_prompts, 1)
    out = [g for g in _divisors(rows) if lo <= g <= top and rows // g >= min_prompts]
    if not out:
        raise ValueError(f"no group size fits a generation batch of {rows} rows with "
                         f"min_group_size {min_group_size}, max_group_size {max_group_size} and "
                         f">= {min_prompts} prompts; raise per_device_train_batch_size")
    return out


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (``O(sqrt n)`` steps, not ``n``)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def propose_group_size(current: int, record: dict, allowed, min_change: float = 1.25) -> int:
    """The group size to use next, from one estimate (module docstring).

    Args:
        current: the G in use.
        record: an estimate's logged values (``GroupSizeAdvisor.history`` entry): its
            ``recommended_G``, ``g_star_low``, ``g_star_high``.
        allowed: the sizes to choose from (:func:`allowed_group_sizes`).
        min_change: the least factor between the new and the current G (>= 1).

    Returns:
        The current G, or the allowed G nearest the recommendation (without one: the allowed G
        nearest the interval's end the current G lies beyond).

    >>> rec = dict(recommended_G=16.0, g_star_low=9.0, g_star_high=30.0)
    >>> propose_group_size(4, rec, [3, 4, 6, 8, 12, 16, 24])
    16
    >>> propose_group_size(12, rec, [3, 4, 6, 8, 12, 16, 24])   # inside the interval
    12
    >>> unresolved = dict(recommended_G=float("nan"), g_star_low=5.2, g_star_high=float("inf"))
    >>> propose_group_size(3, unresolved, [3, 4, 6, 8, 12, 16, 24])   # G < 5.2 is excluded
    6
    """
    current = V.integer("current", current, 1)
    min_change = V.real_scalar("min_change", min_change, minimum=1.0)
    try:
        allowed = sorted(V.integer("allowed", g, 1) for g in allowed)
    except TypeError:
        raise ValueError(f"allowed must be a list of group sizes, got {allowed!r}") from None
    if not allowed:
        raise ValueError("allowed must hold at least one group size, got none")
    vals = {}
    for k in ("recommended_G", "g_star_low", "g_star_high"):
        if k not in record:
            raise ValueError(f"record lacks {k!r} (a GroupSizeAdvisor.history entry)")
        try:
            vals[k] = float(record[k])
        except (TypeError, ValueError):
            raise ValueError(f"record[{k!r}] must be a number, got {record[k]!r}") from None
    rec, lo, hi = vals["recommended_G"], vals["g_star_low"], vals["g_star_high"]
    if lo <= current <= hi or math.isnan(lo) or math.isnan(hi):
        return int(current)
    if math.isfinite(rec) and rec >= 1:
        target = min(allowed, key=lambda g: (abs(math.log(g / rec)), g))
    elif current < lo:  # no point estimate (c1 not resolved above 0): the end nearest
        target = next((g for g in allowed if g >= lo), allowed[-1])
    else:
        target = next((g for g in reversed(allowed) if g <= hi), allowed[0])
    if max(target / current, current / target) < min_change:
        return int(current)
    return int(target)
