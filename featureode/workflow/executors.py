"""Executors of sweep tasks: inline, local processes (forkserver) and Dask, behind :func:`make_executor`.

An executor is anything with the :class:`Executor` interface; :data:`EXECUTORS` maps a name (``--executor NAME``) to
a factory ``(jobs, scheduler) → Executor``. Workers import the sweep's plugins themselves: each task's config lists
them (``[plugins]``) and is checked in the worker before anything runs.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
from typing import Any, Callable, Protocol, runtime_checkable

from featureode.core.registry import Registry
from featureode.workflow.tasks import SweepError, _one_line

#: Seconds to wait for a Dask scheduler given by address.
SCHEDULER_TIMEOUT_S = 10


# ----------------------------------------------------------------------------------------------------------------
# executors
# ----------------------------------------------------------------------------------------------------------------
@runtime_checkable
class Executor(Protocol):
    """What :func:`featureode.workflow.sweeps.run_sweep` needs of an executor.

    ``capacity``: the most tasks in flight at once; ``workers``: how many run in parallel (sizes the ODE-only groups);
    ``submit(fn, arg)`` returns a future (``concurrent.futures.Future`` or alike: ``result()``, ``exception()``);
    ``wait(futures)`` blocks until at least one is done and returns ``(done, pending)``; ``close()`` frees the
    workers. ``fn`` and ``arg`` pickle (a module-level function and :class:`~featureode.workflow.tasks.RunTask` s)."""

    capacity: int
    workers: int

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """Start ``fn(arg)``; a future of its result."""
        ...

    def wait(self, futures: set[Any]) -> tuple[set[Any], set[Any]]:
        """``(done, pending)`` once at least one of ``futures`` is done."""
        ...

    def close(self) -> None:
        """Stop the workers."""
        ...


class _Inline:
    """Runs each task in this process when it is submitted (``jobs = 1``)."""

    capacity = workers = 1
    retryable: tuple[type[BaseException], ...] = ()

    def submit(self, fn: Callable, arg: Any) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(arg))
        except Exception as exc:  # noqa: BLE001 — handed back through the future, like a pool's
            fut.set_exception(exc)
        return fut

    def wait(self, futures: set) -> tuple[set, set]:
        return set(futures), set()

    def close(self) -> None:
        pass


class _LocalPool:
    """``jobs`` local worker processes (``forkserver``: no threads or torch state inherited); a pool broken by a
    dying worker is replaced for the next submission."""

    def __init__(self, jobs: int) -> None:
        self.jobs = self.workers = jobs
        self.capacity = 2 * jobs
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["featureode.workflow.sweeps"])
        self._ctx, self._pool = ctx, None

    def submit(self, fn: Callable, arg: Any) -> cf.Future:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=self._ctx)
        try:
            return self._pool.submit(fn, arg)
        except cf.process.BrokenProcessPool:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=self._ctx)
            return self._pool.submit(fn, arg)

    def wait(self, futures: set) -> tuple[set, set]:
        done, pending = cf.wait(futures, return_when=cf.FIRST_COMPLETED)
        return set(done), set(pending)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class _Dask:
    """A Dask client: on a :class:`distributed.LocalCluster` of ``jobs`` single-threaded worker processes, or
    attached to the scheduler at ``address``. A killed worker surfaces as ``KilledWorker`` and is retried once."""

    def __init__(self, jobs: int, address: str | None) -> None:
        import logging

        import dask
        from distributed import Client, LocalCluster

        self._cluster = None
        if address:
            try:
                self.client = Client(address, timeout=f"{SCHEDULER_TIMEOUT_S}s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise SweepError(f"the Dask scheduler at {address!r} did not answer within {SCHEDULER_TIMEOUT_S} s "
                                 f"({_one_line(exc)}); start it (`dask scheduler`) or check --scheduler") from None
        else:
            # a worker that dies fails its task at once (KilledWorker): the sweep's own single retry handles it.
            # The workers' statistical profiler (a thread sampling every stack each 10 ms) and GIL monitor compete
            # with the training for the GIL and a core; a sweep's tasks are whole runs and need neither.
            with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                                  "distributed.worker.profile.enabled": False,
                                  "distributed.admin.system-monitor.gil.enabled": False}):
                self._cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                                             dashboard_address=None, silence_logs=logging.ERROR)
                self.client = Client(self._cluster)
        self.capacity = 1 << 30
        self.workers = jobs if self._cluster is not None else max(1, len(self.client.scheduler_info()["workers"]))

    def submit(self, fn: Callable, arg: Any) -> Any:
        return self.client.submit(fn, arg, pure=False)

    def wait(self, futures: set) -> tuple[set, set]:
        from distributed import wait

        done, pending = wait(list(futures), return_when="FIRST_COMPLETED")
        return set(done), set(pending)

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def _local(jobs: int, scheduler: str | None) -> Executor:
    return _Inline() if jobs == 1 else _LocalPool(jobs)


#: A factory of executors: ``(jobs, scheduler address or None) → Executor``.
ExecutorFactory = Callable[[int, "str | None"], Executor]
#: The executors by name (a :class:`~featureode.core.registry.Registry`): ``--executor NAME`` picks one.
EXECUTORS: Registry[ExecutorFactory] = Registry("executor", SweepError)
EXECUTORS.register("local", _local)
EXECUTORS.register("dask", _Dask)


def register_executor(name: str, factory: ExecutorFactory, replace: bool = False) -> ExecutorFactory:
    """Add an executor factory ``(jobs, scheduler) → Executor`` to :data:`EXECUTORS` as ``name``."""
    return EXECUTORS.register(name, factory, replace=replace)


def make_executor(kind: str = "local", jobs: int = 1, scheduler: str | None = None) -> Executor:
    """An executor for :func:`run_sweep`: ``"local"`` (this process for ``jobs = 1``, else ``jobs`` worker processes)
    or ``"dask"`` (a LocalCluster of ``jobs`` workers, or the cluster whose scheduler is at ``scheduler``; a
    scheduler address implies ``"dask"`` when ``kind`` is ``"local"``), or a registered one."""
    if jobs < 1:
        raise SweepError(f"--jobs must be ≥ 1, got {jobs}")
    if scheduler and kind == "local":
        kind = "dask"
    if kind not in EXECUTORS:  # an installed package may register it
        from featureode.core.plugins import load_entry_points

        load_entry_points()
    return EXECUTORS.get(kind)(jobs, scheduler)




