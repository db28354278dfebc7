"""What ``advise`` shows while it works: a tqdm bar per phase on a terminal, plain lines in logs.

The phases are loading the model (and, for a package model not yet cached, training its
warm-up: base, instruct, in-context, each a phase of its own), sampling responses, the
per-sample scores and pass 2 over the prompts. :func:`training_note` is the line announcing a
warm-up before it trains (what, where, how long); :func:`warmup_log` turns the warm-up's
training lines into the phases' progress.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm


#: phase -> what the bar says
STAGES = {"loading": "loading the model", "sampling": "sampling responses",
          "scores": "per-sample scores",
          "warmup base": "training the warm-up's base model (1/3)",
          "warmup instruct": "training the warm-up's instruct model (2/3)",
          "warmup icl": "training the warm-up's in-context model (3/3)"}

#: minutes the package's warm-ups take to train, measured on 2 CPU cores
WARMUP_MINUTES = {"full": 23, "quick": 1}

#: a training line of :func:`grpo_theory.lm.warmup.train_supervised` under ``three_policies``
_TRAINING_LINE = re.compile(r"^\[warmup (\w+)\] step (\d+)/(\d+)")


class Progress:
    """tqdm bars on a terminal, plain lines otherwise (``enabled=False``: silent): one per
    phase (:meth:`stage`: a key of :data:`STAGES`) and pass 2's prompts (``__call__``:
    forward-mode dot products on a checkpoint, else per-prompt gradients).

    Args:
        enabled: False silences it.
        stream: where to write (default ``sys.stderr``); bars only if it is a terminal.
        name: the bars' and lines' prefix (``"advise: sampling responses 3/8 (1.2s)"``).
    """

    def __init__(self, enabled, stream=None, name: str = "advise"):
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        self.enabled, self.bar, self.last = enabled, None, -1
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.phase_bar, self.current, self.t0 = None, None, time.time()

    def stage(self, phase, done, total):
        """``phase`` (a key of :data:`STAGES`; others ignored) at ``done`` of ``total`` steps;
        a new phase closes the bar of the one before."""
        if not self.enabled or phase not in STAGES:
            return
        desc = f"{self.name}: {STAGES[phase]}"
        if phase != self.current:
            if self.tty and self.phase_bar is not None and self.current is not None:
                self.phase_bar.close()
            self.current, self.t0 = phase, time.time()
            if self.tty:
                self.phase_bar = tqdm(total=total, desc=desc, file=self.stream)
            else:
                print(f"{desc} ...", file=self.stream, flush=True)
        if self.tty:
            self.phase_bar.update(done - self.phase_bar.n)
        elif done:
            print(f"{desc} {done}/{total} ({time.time() - self.t0:.1f}s)", file=self.stream,
                  flush=True)
        if done == total:
            if self.tty:
                self.phase_bar.close()
            self.current = None

    def __call__(self, done, total):
        if not self.enabled:
            return
        if self.tty:
            if self.bar is None:
                self.bar = tqdm(total=total, desc=f"{self.name}: prompts", file=self.stream)
            self.bar.update(done - self.bar.n)
            if done == total:
                self.bar.close()
            return
        step = max(1, total // 10)
        if done == total or done // step != self.last:
            self.last = done // step
            print(f"{self.name}: pass 2 {done}/{total} prompts", file=self.stream, flush=True)


def warmup_log(progress: Progress):
    """A ``log(line)`` for :func:`grpo_theory.lm.checkpoints.load.load_policy`: each warm-up training
    line ``[warmup NAME] step D/N ...`` moves the phase ``warmup NAME`` of ``progress`` to D
    of N (other lines are ignored)."""

    def log(line):
        m = _TRAINING_LINE.match(str(line))
        if m is not None:
            name, done, total = m.group(1), int(m.group(2)), int(m.group(3))
            if progress.current != f"warmup {name}":
                progress.stage(f"warmup {name}", 0, total)
            progress.stage(f"warmup {name}", done, total)

    return log


def training_note(model, cache_dir=None, warmup=None) -> str | None:
    """The line announcing a warm-up that must train before ``advise`` can start: what it
    trains (the stages and their steps), where it is cached and about how long it takes;
    ``None`` when ``model`` is not a package model or its warm-up is cached.

    Args:
        model: the model spec of :func:`grpo_theory.lm.checkpoints.load.load_policy`.
        cache_dir, warmup: as for ``load_policy``.

    Returns:
        The line, or None.
    """
    from ..lm.checkpoints import PACKAGE_MODELS, warmup_files
    from ..lm import QUICK_WARMUP, WarmupConfig

    if not isinstance(model, str) or model not in PACKAGE_MODELS:
        return None
    files = warmup_files(cache_dir, warmup)  # a ValueError for a bad ``warmup``
    if all(Path(f).exists() for f in files):
        return None
    if isinstance(warmup, WarmupConfig):
        name, w = "custom", warmup
    else:
        name = warmup or "full"
        w = QUICK_WARMUP if name == "quick" else WarmupConfig()
    minutes = WARMUP_MINUTES.get(name)
    took = (f"about {minutes} min on 2 CPU cores" if minutes is not None
            else "time depends on the configuration")
    hint = "; --warmup quick trains a tiny one in about 1 min" if name == "full" else ""
    return (f"advise: model {model!r} is the package's {name} warm-up, not yet trained in "
            f"{files[0].parent}: training it now (base {w.base_steps}, instruct "
            f"{w.instruct_steps}, in-context {w.icl_steps} steps; {took}{hint}); later runs "
            "load it")
