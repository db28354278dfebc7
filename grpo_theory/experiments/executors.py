"""Where cells run: in this process, or on a Dask cluster (local processes or a remote scheduler).

Both executors yield ``(cell, rows, seconds)`` as cells finish; the runner writes each one
atomically on the client as it arrives, so workers need no shared filesystem. A Dask worker
that dies during a cell is replaced and the cell is rerun by Dask's scheduler (each cell is a pure
function of its configuration and key, so the rerun gives the same rows).

    with open_executor(workers=2) as ex:          # local cluster: 2 processes, 1 thread each
        run_experiment(exp, "results", executor=ex)
    with open_executor(scheduler="tcp://host:8786") as ex:   # an existing cluster
        ...

The scheduler address may also come from ``$GRPO_THEORY_SCHEDULER``.
"""

from __future__ import annotations

import contextlib
import os
import uuid

from .._validation import integer
from .runner import InProcessExecutor, compute_cell


SCHEDULER_ENV = "GRPO_THEORY_SCHEDULER"
#: seconds to wait for a scheduler before giving up with a clear error
CONNECT_TIMEOUT = 10


class DaskExecutor:
    """Runs cells as Dask tasks on ``client``'s cluster; yields them as they complete."""

    def __init__(self, client, label: str = "dask"):
        self.client = client
        self.label = label

    @property
    def n_workers(self) -> int:
        return len(self.client.scheduler_info().get("workers", {}))

    def describe(self) -> str:
        return f"{self.label} ({self.n_workers} workers)"

    def map_many(self, work, seed: int, cache=None):
        """Submit ``[(experiment, cell), ...]`` as tasks; yield ``(experiment, cell, rows, s)``
        in completion order."""
        from distributed import as_completed

        by_key = {}
        futures = []
        run = uuid.uuid4().hex[:8]  # unique task keys: two runs never share a task
        for exp, c in work:
            f = self.client.submit(compute_cell, exp.module, exp.name, c, seed,
                                   str(cache) if cache is not None else None,
                                   key=f"{exp.name}/{c.id}/{run}", pure=False)
            by_key[f.key] = (exp, c)
            futures.append(f)
        try:
            for fut in as_completed(futures, loop=self.client.loop):
                rows, dt = fut.result()
                exp, c = by_key[fut.key]
                yield exp, c, rows, dt
                fut.release()
        finally:
            for f in futures:  # interrupted: do not leave work queued on a shared cluster
                if not f.done():
                    f.cancel()


def _positive_workers(workers) -> int:
    if isinstance(workers, str) and workers.strip().isdigit():  # `--workers 2` on the CLI
        workers = int(workers)
    try:
        n = integer("workers", workers)
    except ValueError:
        n = None
    if n is None or n < 1:
        raise ValueError(f"--workers must be a positive integer (number of worker processes), "
                         f"got {workers!r}")
    return n


@contextlib.contextmanager
def open_executor(workers=None, scheduler: str | None = None, connect_timeout: float = None):
    """An executor for the runner, closed on exit.

    Args:
        workers: start a local Dask cluster with this many worker processes (one thread each).
        scheduler: address of an existing Dask scheduler (``tcp://host:port``); default
            ``$GRPO_THEORY_SCHEDULER``. Mutually exclusive with ``workers``.
        connect_timeout: seconds to wait for the scheduler (default 10).

    Yields:
        :class:`InProcessExecutor` when neither is given, else a :class:`DaskExecutor`.

    Raises:
        ValueError: ``workers`` not a positive integer, both options given, or a scheduler that
            does not answer within ``connect_timeout`` seconds.
    """
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if workers is not None:
        workers = _positive_workers(workers)
    if workers is not None and scheduler:
        raise ValueError("give either --workers (a local cluster) or --scheduler (an existing "
                         "cluster), not both")
    if workers is None and not scheduler:
        yield InProcessExecutor()
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - the dask extra is installed by `make test`
        raise ValueError("--workers/--scheduler need Dask: pip install 'grpo-theory[dask]'") \
            from None
    timeout = CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
    if scheduler:
        try:
            client = Client(scheduler, timeout=f"{timeout}s", set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ValueError(f"could not reach a Dask scheduler at {scheduler!r} within "
                             f"{timeout:g} s ({type(e).__name__}); check the address (--scheduler "
                             f"or ${SCHEDULER_ENV})") from None
        try:
            yield DaskExecutor(client, label=f"dask scheduler {scheduler}")
        finally:
            client.close()
        return
    # one thread per worker process: N workers use N cores (XLA's CPU backend would otherwise
    # start a thread pool the size of the machine in every worker)
    env = {"OMP_NUM_THREADS": "1",
           "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") +
                         " --xla_cpu_multi_thread_eigen=false").strip()}
    if "JAX_PLATFORMS" in os.environ:  # the workers use the client's platform choice
        env["JAX_PLATFORMS"] = os.environ["JAX_PLATFORMS"]
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=":0", env=env)
    client = Client(cluster, set_as_default=False)
    try:
        yield DaskExecutor(client, label="local dask cluster")
    finally:
        client.close()
        cluster.close()
