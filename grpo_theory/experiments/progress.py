"""Progress of a sweep: a tqdm bar on a terminal, plain lines in logs (CI, files, pipes).

Shows cells done / total, the cells reused from disk, the number of workers, the last cell and
its time, and tqdm's ETA. :func:`phase_lines` is the progress inside one long cell (the phases of
an LM study's model cell), as plain lines.
"""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm

__all__ = ["CellProgress", "phase_lines"]


class CellProgress:
    """Progress over the cells of one experiment run.

    Args:
        name: the experiment.
        total: number of cells in the sweep.
        skipped: cells already on disk (counted as done from the start).
        workers: number of workers computing cells.
        enabled: False silences it.
        stream: where to write (default ``sys.stderr``); a bar only if it is a terminal.
    """

    def __init__(self, name: str, total: int, skipped: int = 0, workers: int = 1,
                 enabled: bool = True, stream=None):
        self.name, self.total, self.skipped, self.workers = name, total, skipped, workers
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = skipped
        self.t0 = time.time()
        self.bar = None
        if not enabled:
            return
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        if tty:
            self.bar = tqdm(total=total, initial=skipped, desc=name, file=self.stream,
                            unit="cell", dynamic_ncols=True)
            self.bar.set_postfix(reused=skipped, workers=workers)
        else:
            self._line(f"{total} cells, {skipped} reused from disk, {total - skipped} to "
                       f"compute on {workers} worker{'s' if workers != 1 else ''}")

    def _line(self, text: str) -> None:
        print(f"[{self.name}] {text}", file=self.stream, flush=True)

    def update(self, label: str, seconds: float) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix(reused=self.skipped, workers=self.workers, last=label)
            self.bar.update(1)
            return
        computed = self.done - self.skipped
        elapsed = time.time() - self.t0
        left = self.total - self.done
        eta = elapsed / computed * left if computed else float("nan")
        self._line(f"{self.done}/{self.total} {label} ({seconds:.1f}s) elapsed {elapsed:.0f}s "
                   f"eta {eta:.0f}s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            self._line(f"{self.done}/{self.total} cells on disk after {time.time() - self.t0:.1f}s")


def phase_lines(name: str, stream=None):
    """A ``stage(phase, done, total)`` callback (:func:`grpo_theory.advisor.estimate.
    lm_rollout_statistics`) printing ``[name] phase done/total (seconds)`` lines to stderr:
    the progress inside a long model cell."""
    t0 = {}

    def stage(phase, done, total):
        t0.setdefault(phase, time.time())
        if done == 0:
            return
        step = max(1, total // 10)
        if done == total or done % step == 0:
            print(f"[{name}] {phase} {done}/{total} ({time.time() - t0[phase]:.1f}s)",
                  file=stream if stream is not None else sys.stderr, flush=True)

    return stage
