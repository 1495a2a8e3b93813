"""Executors of sweep tasks: inline, local processes (forkserver) and Dask, behind :func:`make_executor`.

An executor is anything with the :class:`Executor` interface; :data:`EXECUTORS` maps a name (``--executor NAME``) to
a factory ``(jobs, scheduler) → Executor``. Workers import the sweep's plugins themselves: each task's config lists
them (``[plugins]``) and is checked in the worker before anything runs.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import numbers
import socket
from typing import Any, Callable, Protocol, runtime_checkable

from featureode.core.registry import Registry
from featureode.workflow.tasks import SweepError, _one_line

#: Seconds to wait for a Dask scheduler given by address (the handshake probe, then the client).
SCHEDULER_TIMEOUT_S = 10
#: Seconds of the raw handshake probe of an address (connect, then the scheduler's first message).
PROBE_TIMEOUT_S = 5.0
#: Seconds to wait for a scheduler without workers to get one.
WORKER_WAIT_S = 60.0


def probe_scheduler(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Check that a Dask scheduler answers at ``address`` before a client is attached (a client to an address
    where something else listens can wait forever): a TCP connection within ``timeout`` seconds, then the
    scheduler's handshake (a Dask scheduler speaks first). Raises :class:`SweepError` naming what answered: nothing
    (refused, unreachable), an HTTP server (the Dask dashboard's port, 8787), another protocol, or a listener that
    never replies; at most three waits of ``timeout`` (connect, handshake, an HTTP request). ``tls://`` is only
    connected to (its handshake needs the certificates)."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in ("tcp", "tls"):
        raise SweepError(f"--scheduler {address!r}: the scheme {scheme!r} is not supported; give a tcp:// (or "
                         "tls://) address of a Dask scheduler, e.g. tcp://host:8786")
    host, _, port_text = rest.rstrip("/").rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
        if not (0 < port < 65536) or not host:
            raise ValueError
    except ValueError:
        raise SweepError(f"--scheduler {address!r} is not HOST:PORT (e.g. tcp://127.0.0.1:8786)") from None
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:
        raise SweepError(f"no answer from {address} within {timeout:g} s (a firewall, or no such host); check "
                         "--scheduler") from None
    except OSError as exc:
        raise SweepError(f"nothing answers at {address} ({exc.strerror or exc}); start the scheduler "
                         "(`dask scheduler`, port 8786 by default) or check --scheduler") from None
    with conn:
        if scheme == "tls":
            return
        got = b""
        try:
            conn.settimeout(timeout)
            while len(got) < 256 and b"compression" not in got:
                chunk = conn.recv(256)
                if not chunk:
                    break
                got += chunk
        except socket.timeout:
            pass
        except OSError as exc:
            raise SweepError(f"the connection to {address} failed ({exc.strerror or exc}); check --scheduler") \
                from None
        if b"compression" in got:   # the msgpack handshake of distributed's comm: {"compression": …, …}
            return
        if got:
            what = got[:40].decode("ascii", "replace").split("\n")[0].strip()
            raise SweepError(f"something other than a Dask scheduler answered at {address} (it sent {what!r}); "
                             "check --scheduler (a Dask scheduler listens on 8786 by default)")
        try:   # silent: perhaps an HTTP server, which waits for a request
            conn.settimeout(timeout)
            conn.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            reply = conn.recv(256)
        except OSError:
            reply = b""
    if reply.startswith(b"HTTP/"):
        status = reply.split(b"\r\n")[0].decode("ascii", "replace")
        raise SweepError(f"an HTTP server answered at {address} ({status}), not a Dask scheduler; the Dask "
                         "dashboard listens on 8787, the scheduler on 8786 by default: check --scheduler")
    raise SweepError(f"the listener at {address} accepted the connection but sent no Dask handshake within "
                     f"{timeout:g} s; it is not a Dask scheduler (check --scheduler)")


# ----------------------------------------------------------------------------------------------------------------
# executors
# ----------------------------------------------------------------------------------------------------------------
@runtime_checkable
class Executor(Protocol):
    """What :func:`featureode.workflow.sweeps.run_sweep` needs of an executor.

    ``capacity``: the most tasks in flight at once; ``workers``: how many run in parallel (sizes the ODE-only groups);
    ``submit(fn, arg)`` returns a future (``concurrent.futures.Future`` or alike: ``result()``, ``exception()``);
    ``wait(futures)`` blocks until at least one is done and returns ``(done, pending)``; ``close()`` frees the
    workers. ``fn`` and ``arg`` pickle (a module-level function and :class:`~featureode.workflow.tasks.RunTask` s).
    An executor may also have ``start()``, which the sweep calls before it plans (start the workers early)."""

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


#: What the forkserver of :class:`_LocalPool` imports once, before it forks each worker (the modules every sweep
#: task needs: a worker then starts without importing them again).
PRELOAD = ["featureode.workflow.sweeps", "featureode.kernel.theory", "featureode.ode.solve"]


def _started() -> int:
    """A worker's answer to :meth:`_LocalPool.start` (its pid)."""
    import os

    return os.getpid()


class _LocalPool:
    """``jobs`` local worker processes (``forkserver``: no threads or torch state inherited); a pool broken by a
    dying worker is replaced for the next submission. :meth:`start` starts the workers ahead of the first task
    (the sweep calls it before it plans, so their start overlaps the planning)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = self.workers = jobs
        self.capacity = 2 * jobs
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        self._ctx = ctx
        self._pool: cf.ProcessPoolExecutor | None = None

    def start(self) -> None:
        """Start the worker processes now, without waiting for them."""
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=self._ctx)
            self._pool.submit(_started)   # a pool starts its processes on the first submission

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
            probe_scheduler(address)
            try:
                self.client = Client(address, timeout=f"{SCHEDULER_TIMEOUT_S}s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise SweepError(f"the Dask scheduler at {address!r} did not answer within {SCHEDULER_TIMEOUT_S} s "
                                 f"({_one_line(exc)}); start it (`dask scheduler`) or check --scheduler") from None
            try:
                self.client.wait_for_workers(1, timeout=WORKER_WAIT_S)
            except (TimeoutError, OSError) as exc:
                self.client.close()
                raise SweepError(f"the Dask scheduler at {address} has no workers after {WORKER_WAIT_S:g} s "
                                 f"({_one_line(exc)}); start some (`dask worker {address}`) and rerun") from None
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
    if not isinstance(kind, str):
        raise SweepError(f"executor kind must be a name such as 'local' or 'dask', got {kind!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, numbers.Integral):
        raise SweepError(f"jobs must be an integer ≥ 1, got {jobs!r}")
    jobs = int(jobs)
    if jobs < 1:
        raise SweepError(f"--jobs must be ≥ 1, got {jobs}")
    if scheduler is not None and not isinstance(scheduler, str):
        raise SweepError(f"scheduler must be an address such as 'tcp://host:8786', got {scheduler!r}")
    if scheduler and kind == "local":
        kind = "dask"
    if kind not in EXECUTORS:  # an installed package may register it
        from featureode.core.plugins import load_entry_points

        load_entry_points()
    return EXECUTORS.get(kind)(jobs, scheduler)




