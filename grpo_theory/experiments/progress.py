"""Progress of a sweep: a tqdm bar on a terminal, plain lines in logs (CI, files, pipes).

Shows cells done / total, the cells reused from disk, the number of workers, the last cell and
its time, and the ETA, on the experiment's own clock: one bar at a time. :func:`phase_lines` is the progress inside one long cell (the phases of
an LM study's model cell), as plain lines.
"""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm


class CellProgress:
    """Progress over the cells of one experiment run, on its own clock.

    Nothing is shown until the experiment's first cell finishes (or :meth:`close`): with
    several experiments queued, only the one computing has a bar, and each experiment's
    elapsed time and ETA start with its own first cell, not with the whole run. The bar closes
    itself when the last cell is in. :attr:`elapsed` is the experiment's own wall time: from
    the start of its first computed cell (its end minus its seconds) to the end of its last.

    Args:
        name: the experiment.
        total: number of cells in the sweep.
        skipped: cells already on disk (counted as done from the start).
        workers: number of workers computing cells.
        enabled: False silences the bar and the lines (the clock still runs).
        stream: where to write (default ``sys.stderr``); a bar only if it is a terminal.
        header: a line printed when the experiment starts (shown even when not ``enabled``).
        clock: the time source, seconds (default ``time.time``).
    """

    def __init__(self, name: str, total: int, skipped: int = 0, workers: int = 1,
                 enabled: bool = True, stream=None, header: str | None = None, clock=None):
        self.name, self.total, self.skipped, self.workers = name, total, skipped, workers
        self.stream = stream if stream is not None else sys.stderr
        self.enabled, self.header = enabled, header
        self.clock = clock if clock is not None else time.time
        self.done = skipped
        self.started = self.last = None  # start of the first computed cell, end of the last
        self.bar = None
        self.opened = self.closed = False

    @property
    def elapsed(self) -> float:
        """Seconds from the start of the first computed cell to the end of the last (0.0
        when none was computed)."""
        return 0.0 if self.started is None else self.last - self.started

    def _open(self) -> None:
        if self.opened:
            return
        self.opened = True
        if self.header:
            print(self.header, file=self.stream, flush=True)
        if not self.enabled:
            return
        if hasattr(self.stream, "isatty") and self.stream.isatty():
            self.bar = tqdm(total=self.total, initial=self.skipped, desc=self.name,
                            file=self.stream, unit="cell", dynamic_ncols=True)
            if self.started is not None:  # tqdm's clock from the first cell's start
                self.bar.start_t = self.bar.last_print_t = self.started
            self.bar.set_postfix(reused=self.skipped, workers=self.workers)
        else:
            left = self.total - self.skipped
            self._line(f"{self.total} cells, {self.skipped} reused from disk, {left} to "
                       f"compute on {self.workers} worker{'s' if self.workers != 1 else ''}")

    def _line(self, text: str) -> None:
        print(f"[{self.name}] {text}", file=self.stream, flush=True)

    def update(self, label: str, seconds: float) -> None:
        """One more cell done: ``label`` finished after ``seconds`` of its own."""
        now = self.clock()
        if self.started is None:
            self.started = now - seconds
        self.last = now
        self.done += 1
        self._open()
        if self.enabled and self.bar is not None:
            self.bar.set_postfix(reused=self.skipped, workers=self.workers, last=label)
            self.bar.update(1)
        elif self.enabled:
            computed = self.done - self.skipped
            elapsed, left = now - self.started, self.total - self.done
            eta = elapsed / computed * left if computed else float("nan")
            self._line(f"{self.done}/{self.total} {label} ({seconds:.1f}s) elapsed "
                       f"{elapsed:.0f}s eta {eta:.0f}s")
        if self.done >= self.total:
            self.close()

    def close(self) -> None:
        """Finish the display (opened first if no cell was computed); a second call is a
        no-op."""
        if self.closed:
            return
        self._open()
        self.closed = True
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            self._line(f"{self.done}/{self.total} cells on disk after {self.elapsed:.1f}s")


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
