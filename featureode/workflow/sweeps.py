"""Sweeps (DESIGN §7): run every point of a grid file, collect a results table, summarise; validation suites.

A sweep is a :class:`~featureode.workflow.grid.Grid` × its seeds. Each run (point, seed) lives in ``DIR/runs/RUN/``:
``config.json`` (the resolved config, its digest and the digest of the unresolved point), then ``report.json``
(ODE + MLP, :func:`featureode.workflow.compare.compare_config`) or ``ode.json`` alone (``ode_only``,
:func:`featureode.ode.solve.solve_config`). Finished runs are reused, so an interrupted or extended sweep computes only
what is missing. ``DIR/results.csv`` (and ``results.parquet`` when pyarrow is importable) has one row per
(point, seed, variant), rewritten as runs complete; ``DIR/summary.md``/``summary.json`` hold the seed means and the
acceptance verdicts of DESIGN §5.

``training.t_max = "auto"`` is resolved per run by :func:`auto_t_max`. Runs are executed in this process
(``jobs = 1``), by local worker processes, or by a Dask cluster (:func:`make_executor`); a run that fails, or whose
worker dies, is retried once and then recorded with its error while the sweep goes on. On CUDA, runs whose networks
have the same shapes train together (:func:`batch_groups`).
"""
from __future__ import annotations

import concurrent.futures as cf
import csv
import dataclasses
import hashlib
import io
import json
import math
import multiprocessing
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from featureode.config import MLP_SECTIONS, Config, resolved_device, suggest
from featureode.workflow.grid import AUTO, Grid, GridError, Point, check_points, load_grid, probe_config, suite_path
from featureode.results.metrics import Ratio
from featureode.workflow.runs import read_stamp
from featureode.results.trajectory import TrajectoryFileError, read_json, write_json, write_text

#: Above this many runs a sweep asks for ``yes=True`` (``--yes``).
MAX_RUNS_WITHOUT_YES = 10_000
#: Seconds to wait for a Dask scheduler given by address.
SCHEDULER_TIMEOUT_S = 10
#: The most networks trained together in one batch on a GPU.
MAX_BATCH = 64
#: The most ODE-only runs solved together in one task.
ODE_GROUP = 32
#: Columns of ``results.csv`` after the varied keys (DESIGN §7; ``t_max`` is the resolved horizon).
RESULT_COLUMNS = ("seed", "variant", "t50", "t10", "t50_ratio", "t10_ratio", "log_rms", "mlp_t50", "mlp_t10",
                  "t_max", "status", "run")
#: Cases with γ at or below this are "lazy" for the acceptance rule of DESIGN §5.
LAZY_RICHNESS = 0.01
#: Acceptance bands (ODE/MLP ratios of t50 and t10) of the ``displacement`` closure: issue 6's, and the tighter ones a
#: first prototype reached (DESIGN §5), reported side by side.
BANDS = {"displacement": ((0.85, 1.25), (0.75, 1.30)), "displacement_prototype": ((0.93, 1.20), (0.75, 1.25))}


class SweepError(RuntimeError):
    """A sweep that cannot run (output folder, scheduler, size); the message names the fix."""


# ----------------------------------------------------------------------------------------------------------------
# the horizon t_max = "auto"
# ----------------------------------------------------------------------------------------------------------------
def lazy_t10(theory: Any) -> float:
    """``t10`` of the lazy kernel flow with exact ``λ(0)`` of a :class:`~featureode.kernel.theory.KernelTheory`: the root of
    ``Σ v_β² e^{−2λ_β t} = 0.1 Σ v_β²``, by bisection."""
    v2, lam = np.asarray(theory.target, float) ** 2, np.asarray(theory.lambda_exact, float)
    ratio = lambda t: float(np.sum(v2 * np.exp(-2 * lam * t)) / np.sum(v2))  # noqa: E731
    lo, hi = 0.0, 1.0
    while not ratio(hi) <= 0.1:
        if hi > 1e30:
            raise ValueError(f"the lazy kernel flow never reaches L/L(0) = 0.1 (λ_β(0) = {lam.tolist()}); a target "
                             "mode with zero or non-finite initial eigenvalue cannot be learnt by the kernel flow")
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ratio(mid) > 0.1 else (lo, mid)
    return hi


def auto_t_max(cfg: Config, factor: float = 2.0, cap: float = math.inf) -> float:
    """The horizon ``min(cap, factor × t10_lazy, 4 × t10_displacement)`` of ``cfg``, to 4 significant digits.

    The lazy kernel flow with exact ``λ(0)`` bounds the learning time from above in the rich regime; the second
    bound keeps rich runs, whose kernel (and so the number of SGD steps per unit time) grows by 10–100×, from
    spending most of their steps after the target is learnt. It is a choice of horizon only: no constant of the ODE depends on
    it, and an MLP slower than 4× the prediction shows up as a missing ``t10``, not as a shorter curve. Both bounds
    use the target basis, so the MLP runs are the same whatever ODE basis is compared."""
    from featureode.kernel.theory import kernel_theory
    from featureode.ode.solve import solve_variant

    theory = kernel_theory(cfg, basis="target")
    t_max = min(cap, factor * lazy_t10(theory))
    t10 = solve_variant(theory, "displacement", t_max).t10
    if t10 is not None:
        t_max = min(t_max, 4 * t10)
    return float(f"{t_max:.4g}")


# ----------------------------------------------------------------------------------------------------------------
# runs
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunTask:
    """One (point, seed) to run: what a worker needs, and nothing that does not pickle."""

    name: str
    raw: dict[str, dict[str, Any]]   # the config; training.t_max may be "auto"
    run_dir: str
    ode_only: bool
    t_max_factor: float
    t_max_cap: float

    @property
    def point_digest(self) -> str:
        """Digest of the unresolved config and the horizon rule: equal digests give equal resolved configs."""
        blob = json.dumps([self.raw, self.t_max_factor, None if math.isinf(self.t_max_cap) else self.t_max_cap],
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def config(self) -> Config:
        """The resolved config (``t_max = "auto"`` replaced by :func:`auto_t_max`)."""
        cfg = probe_config(self.raw, f"sweep:{self.name}")
        if self.raw.get("training", {}).get("t_max") == AUTO:
            cfg = cfg.replace(training={"t_max": auto_t_max(cfg, self.t_max_factor, self.t_max_cap)})
        return cfg


@dataclass
class RunOutcome:
    """What one run produced: ``status`` ``"ok"`` or the error; per variant its metrics (report.json keys)."""

    name: str
    seed: int
    status: str = "ok"
    t_max: float | None = None
    mlp: dict[str, float | None] | None = None
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    reused: bool = False

    @property
    def ok(self) -> bool:
        """Did the run finish?"""
        return self.status == "ok"


_VARIANT_KEYS = ("t50", "t10", "t50_ratio", "t10_ratio", "log_rms", "t50_ratio_range", "t10_ratio_range", "error")


def _outcome_from_files(task: RunTask, stamp: dict[str, Any]) -> RunOutcome | None:
    """The outcome stored in a run folder stamped ``stamp``, or ``None`` when its result file is missing or damaged
    (a full result also serves an ODE-only sweep)."""
    folder, seed = Path(task.run_dir), int(stamp["config"]["training"]["seed"])
    t_max = float(stamp["config"]["training"]["t_max"])
    try:
        rep = read_json(folder / "report.json")
        if rep.get("digest", stamp["digest"]) == stamp["digest"]:
            return RunOutcome(task.name, seed, "ok", t_max, {k: rep["mlp"].get(k) for k in ("t50", "t10")},
                              {n: {k: v[k] for k in _VARIANT_KEYS if k in v} for n, v in rep["variants"].items()},
                              reused=True)
    except (TrajectoryFileError, KeyError, TypeError, AttributeError):
        pass
    if not task.ode_only:
        return None
    try:
        ode = read_json(folder / "ode.json")
        return RunOutcome(task.name, seed, "ok", t_max, None,
                          {n: {k: v[k] for k in ("t50", "t10", "error") if k in v} for n, v in ode["variants"].items()},
                          reused=True)
    except (TrajectoryFileError, KeyError, TypeError, AttributeError):
        return None


def _read_stamp(folder: Path) -> dict[str, Any] | None:
    """The run folder's stamp (:func:`featureode.workflow.runs.read_stamp`) when it is a sweep's: with digest and config."""
    stamp = read_stamp(folder)
    return stamp if stamp is not None and "digest" in stamp and "config" in stamp else None


def stored_outcome(task: RunTask) -> RunOutcome | None:
    """A finished run of ``task`` found without computing anything (its folder is stamped with the same unresolved
    point), else ``None``."""
    stamp = _read_stamp(Path(task.run_dir))
    if stamp is None or stamp.get("point") != task.point_digest:
        return None
    return _outcome_from_files(task, stamp)


def _stamp(task: RunTask, cfg: Config) -> RunOutcome | None:
    """Reuse a finished run of ``cfg`` in ``task.run_dir``, or stamp the folder for ``cfg`` (a folder stamped for
    another config loses its stale ``report.json``/``ode.json``; ``compare`` reuses its MLP run if it matches)."""
    folder = Path(task.run_dir)
    old = _read_stamp(folder)
    if old is not None and old["digest"] == cfg.digest():
        found = _outcome_from_files(task, old)
        if found is not None:
            if old.get("point") != task.point_digest:
                write_json(folder / "config.json", {**old, "point": task.point_digest})
            return found
    elif old is not None:
        for stale in ("report.json", "ode.json"):
            (folder / stale).unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", {"digest": cfg.digest(), "config": cfg.to_dict(), "source": cfg.source,
                                        "point": task.point_digest})
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def execute(group: Sequence[RunTask]) -> list[RunOutcome]:
    """Run a group of runs in this process (a worker's task); one outcome each, failures caught and recorded.

    A group of several runs has networks of the same shapes (:func:`batch_groups`): they are trained together by
    :func:`featureode.sim.mlp.simulate_batch` first, then each is compared (reusing its ``mlp.json``)."""
    outcomes: dict[int, RunOutcome] = {}
    todo: list[tuple[int, RunTask, Config]] = []
    for i, task in enumerate(group):
        seed = int(task.raw["training"]["seed"])
        try:
            cfg = task.config()
            found = _stamp(task, cfg)
        except Exception as exc:  # noqa: BLE001 — recorded as the run's status
            outcomes[i] = RunOutcome(task.name, seed, _one_line(exc))
            continue
        if found is not None:
            outcomes[i] = found
        else:
            todo.append((i, task, cfg))
    if len(todo) > 1 and all(t.ode_only for _, t, _ in todo):
        outcomes.update(_solve_many(todo))
        todo = []
    train = [(t, c) for _, t, c in todo if not t.ode_only and not _trained(Path(t.run_dir), c)]
    if len(train) > 1:
        from featureode.sim.mlp import simulate_batch

        try:
            simulate_batch([c for _, c in train], run_dirs=[t.run_dir for t, _ in train], progress=False)
        except Exception:  # noqa: BLE001 — each run then trains alone in compare_config and reports its own error
            pass
    for i, task, cfg in todo:
        outcomes[i] = _run_one(task, cfg)
    return [outcomes[i] for i in range(len(group))]


def _solve_many(todo: Sequence[tuple[int, RunTask, Config]]) -> dict[int, RunOutcome]:
    """ODE-only runs solved together: :func:`featureode.kernel.theory.kernel_theory_batch` (each spectrum, target and
    network built once) and :func:`featureode.ode.solve.solve_batch` (each variant's system compiled once, every solve in
    machine code). If the batch cannot be built (e.g. one config's kernel fails), each run is computed on its own so
    that its error stays its own."""
    from featureode.kernel.theory import kernel_theory_batch
    from featureode.ode.solve import solve_batch

    try:
        theories: dict[int, Any] = {}
        for basis in ("target", "extended"):
            part = [(i, c) for i, _, c in todo if c.ode.basis == basis]
            if part:
                built = kernel_theory_batch([c for _, c in part], with_gram=basis == "extended")
                theories.update({i: th for (i, _), th in zip(part, built)})
        solve_batch([c for _, _, c in todo], [theories[i] for i, _, _ in todo], [t.run_dir for _, t, _ in todo])
    except Exception:  # noqa: BLE001 — each run then reports its own error
        return {i: _run_one(task, cfg) for i, task, cfg in todo}
    out = {}
    for i, task, cfg in todo:
        found = _outcome_from_files(task, read_json(Path(task.run_dir) / "config.json"))
        out[i] = found if found is not None else RunOutcome(task.name, cfg.training.seed,
                                                            "TrajectoryFileError: no readable result after the run",
                                                            cfg.training.t_max)
        out[i].reused = False
    return out


def _trained(folder: Path, cfg: Config) -> bool:
    """Does ``folder`` hold a finished simulation of ``cfg``'s network (``mlp.json`` with its digest)?"""
    try:
        mlp = read_json(folder / "mlp.json")
    except TrajectoryFileError:
        return False
    return isinstance(mlp, dict) and mlp.get("digest") == cfg.digest(MLP_SECTIONS) and mlp.get("complete", True)


def _run_one(task: RunTask, cfg: Config) -> RunOutcome:
    """Compute one run (ODE + MLP, or the ODE alone) into its stamped folder."""
    seed, folder = cfg.training.seed, Path(task.run_dir)
    try:
        if task.ode_only:
            from featureode.ode.solve import solve_config

            solve_config(cfg, folder)  # a failed variant keeps its "error" in ode.json
        else:
            from featureode.workflow.compare import compare_config

            compare_config(cfg, folder, progress=False)
        stamp = read_json(folder / "config.json")
        found = _outcome_from_files(task, stamp)
        if found is None:
            raise TrajectoryFileError(f"{folder}: no readable result after the run")
        found.reused = False
        return found
    except Exception as exc:  # noqa: BLE001 — recorded as the run's status
        return RunOutcome(task.name, seed, _one_line(exc), cfg.training.t_max)


# ----------------------------------------------------------------------------------------------------------------
# GPU batching
# ----------------------------------------------------------------------------------------------------------------
def batch_groups(cfgs: Sequence[Config], cuda: bool, max_size: int = MAX_BATCH) -> list[list[int]]:
    """Indices of ``cfgs`` grouped for training together: on CUDA the configs whose networks have the same shapes
    (the keys a batch of :func:`featureode.sim.mlp.simulate_batch` must share: width, batch, dim, activation, dtype,
    device and the step settings), at most ``max_size`` per group, in order of first appearance; on a CPU one per
    group."""
    if not cuda:
        return [[i] for i in range(len(cfgs))]
    from featureode.sim.mlp import BATCH_KEYS

    groups: dict[tuple, list[list[int]]] = {}
    for i, c in enumerate(cfgs):
        key = tuple(getattr(getattr(c, sec), k) for sec, keys in BATCH_KEYS.items() for k in keys)
        chunks = groups.setdefault(key, [[]])
        if len(chunks[-1]) == max_size:
            chunks.append([])
        chunks[-1].append(i)
    return sorted((g for chunks in groups.values() for g in chunks), key=lambda g: g[0])


def ode_groups(tasks: Sequence[RunTask], workers: int, max_size: int | None = None) -> list[tuple[RunTask, ...]]:
    """ODE-only runs in consecutive groups solved together (:func:`_solve_many`): at least four groups per worker
    (so the workers stay busy to the end) and at most ``max_size`` (default :data:`ODE_GROUP`) runs per group
    (progress and retries stay fine-grained)."""
    cap = ODE_GROUP if max_size is None else max_size
    size = max(1, min(cap, math.ceil(len(tasks) / (4 * max(1, workers)))))
    return [tuple(tasks[k:k + size]) for k in range(0, len(tasks), size)]


def _uses_cuda(cfgs: Sequence[Config]) -> bool:
    """Does any config train on a CUDA device here (``device = "cuda…"``, or ``"auto"`` with CUDA available)?"""
    return any(c.training.device.startswith("cuda") or resolved_device(c.training.device) != "cpu" for c in cfgs)


# ----------------------------------------------------------------------------------------------------------------
# executors
# ----------------------------------------------------------------------------------------------------------------
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


def make_executor(kind: str = "local", jobs: int = 1, scheduler: str | None = None) -> Any:
    """An executor for :func:`run_sweep`: ``"local"`` (this process for ``jobs = 1``, else ``jobs`` worker processes)
    or ``"dask"`` (a LocalCluster of ``jobs`` workers, or the cluster whose scheduler is at ``scheduler``)."""
    if jobs < 1:
        raise SweepError(f"--jobs must be ≥ 1, got {jobs}")
    if kind == "dask" or scheduler:
        return _Dask(jobs, scheduler)
    if kind != "local":
        raise SweepError(f"unknown executor {kind!r}; use 'local' or 'dask'")
    return _Inline() if jobs == 1 else _LocalPool(jobs)


# ----------------------------------------------------------------------------------------------------------------
# results table
# ----------------------------------------------------------------------------------------------------------------
def _cell(value: Any) -> Any:
    """A value for the table: numbers and text as they are, lists and tables as JSON, ``None`` empty."""
    if value is None:
        return None
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return value


def result_rows(grid: Grid, runs: Sequence[tuple[Point, RunTask]], outcomes: dict[str, RunOutcome]
                ) -> list[dict[str, Any]]:
    """One row per (point, seed, variant) of the finished runs, in grid order (columns: the varied keys, then
    :data:`RESULT_COLUMNS`). A failed run gets a row per configured variant carrying its error."""
    rows = []
    for point, task in runs:
        out = outcomes.get(task.name)
        if out is None:
            continue
        keys = {k: _cell(v) for k, v in point.values.items()}
        variants = out.variants or {str(v): {} for v in task.raw.get("ode", {}).get("variants", [])}
        for name, v in variants.items():
            status = out.status if not out.ok else ("ok" if not v.get("error") else f"error: {v['error']}")
            rows.append({**keys, "seed": out.seed, "variant": name,
                         **{k: v.get(k) for k in ("t50", "t10", "t50_ratio", "t10_ratio", "log_rms")},
                         "mlp_t50": (out.mlp or {}).get("t50"), "mlp_t10": (out.mlp or {}).get("t10"),
                         "t_max": out.t_max, "status": " ".join(status.split()),
                         "run": str(Path("runs") / task.name)})
    return rows


def write_results(out: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """``out/results.csv`` (plain csv module, empty cells for missing values) and, when pyarrow is importable,
    ``out/results.parquet``; both atomic."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    write_text(out / "results.csv", buf.getvalue())
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    table = pa.table({k: _arrow_column(pa, [r.get(k) for r in rows]) for k in columns})
    tmp = out / ".results.parquet.tmp"
    pq.write_table(table, tmp)
    tmp.replace(out / "results.parquet")


def _arrow_column(pa: Any, values: list[Any]) -> Any:
    """A typed pyarrow column: numbers (or nothing) as float64 or int64, anything else as text."""
    kinds = {type(v) for v in values if v is not None}
    if kinds == {int}:
        return pa.array(values, type=pa.int64())
    if kinds <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def read_results(path: "str | Path") -> list[dict[str, Any]]:
    """Rows of a ``results.csv`` with numbers parsed (empty cells → ``None``); the reader of ``featureode plot``."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.csv"
    if not path.exists():
        raise SweepError(f"{path} does not exist; run `featureode sweep GRID --out DIR` first")
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [{k: _parse(v) if k not in ("status", "run", "variant") else v for k, v in r.items()} for r in rows]


def _parse(text: str) -> Any:
    if text == "":
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


# ----------------------------------------------------------------------------------------------------------------
# summary and acceptance (DESIGN §5)
# ----------------------------------------------------------------------------------------------------------------
def _all(verdicts: Sequence[bool | None]) -> bool | None:
    return False if False in verdicts else True if all(v is True for v in verdicts) else None


def acceptance(richness: float, variants: dict[str, dict[str, Any]]) -> dict[str, bool | None]:
    """Acceptance verdicts of one run (or of seed means): ``displacement`` with t50 and t10 ratios in the bands of
    :data:`BANDS`; ``lazy`` within 10% on t50 when ``richness ≤ LAZY_RICHNESS``. A ratio bounded but not known still
    decides when the bound lies outside the band; ``None`` where it cannot decide."""
    out: dict[str, bool | None] = {}
    d = variants.get("displacement")
    if d is not None:
        for rule, ((lo50, hi50), (lo10, hi10)) in BANDS.items():
            out[rule] = _all([Ratio.from_entry(d, "t50_ratio").in_band(lo50, hi50),
                              Ratio.from_entry(d, "t10_ratio").in_band(lo10, hi10)])
    lz = variants.get("lazy")
    if lz is not None and richness <= LAZY_RICHNESS:
        out["lazy"] = Ratio.from_entry(lz, "t50_ratio").in_band(0.9, 1.1)
    return out


def mean_sd(xs: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """Mean, sample standard deviation (``None`` for one value) and count of the non-missing values."""
    got = [x for x in xs if x is not None]
    if not got:
        return None, None, 0
    return float(np.mean(got)), (float(np.std(got, ddof=1)) if len(got) > 1 else None), len(got)


def aggregate(richness: float, outcomes: Sequence[RunOutcome]) -> dict[str, Any]:
    """One point over its finished seeds: per variant the mean, sd and count of each metric (the t50/t10 ratios and
    log-RMS, or t50/t10 for ODE-only runs), the verdicts of each seed and of the seed means. Where some seed has only
    a bound on a ratio, the seed mean has one too (the mean of the seeds' ranges, ``range``)."""
    with_mlp = any(o.mlp is not None for o in outcomes)
    keys = ("t50_ratio", "t10_ratio", "log_rms") if with_mlp else ("t50", "t10")
    variants = sorted({v for o in outcomes for v in o.variants})
    out: dict[str, Any] = {"seeds": [o.seed for o in outcomes],
                           "mlp": {k: mean_sd([(o.mlp or {}).get(k) for o in outcomes])[0] for k in ("t50", "t10")},
                           "variants": {}, "keys": list(keys),
                           "accepted_per_seed": [acceptance(richness, o.variants) for o in outcomes] if with_mlp
                           else []}
    means: dict[str, dict[str, Any]] = {}
    for v in variants:
        stats = {}
        for key in keys:
            vals = [o.variants[v].get(key) if v in o.variants else None for o in outcomes]
            m, sd, n = mean_sd(vals)
            stats[key] = {"mean": m, "sd": sd, "n": n, "values": vals}
        means[v] = {}
        for key in keys[:2] if with_mlp else ():
            ranges = [Ratio.from_entry(o.variants[v], key) if v in o.variants else Ratio.unknown()
                      for o in outcomes]
            mean = Ratio.unknown() if any(r.is_unknown for r in ranges) else Ratio(
                float(np.mean([r.lo for r in ranges])), float(np.mean([r.hi for r in ranges])))
            stats[key]["range"] = mean.to_json()
            means[v][f"{key}_range"] = stats[key]["range"]
        out["variants"][v] = stats
    out["accepted"] = acceptance(richness, means) if with_mlp else {}
    return out


def summary_markdown(title: str, description: str, seeds: Sequence[int], rows: Sequence[tuple[str, dict]],
                     basis: str = "target") -> str:
    """The summary table: per point the seed-mean ratios (± sd over seeds) per variant and the acceptance verdicts
    (ODE-only sweeps: the ODE's t50/t10)."""
    variants = sorted({v for _, a in rows for v in a["variants"]})
    with_mlp = any(a["keys"][0] == "t50_ratio" for _, a in rows)
    f = lambda x: "—" if x is None else f"{x:.3g}"  # noqa: E731

    def cell(st: dict) -> str:
        if st["n"] == len(st["values"]):
            return f(st["mean"]) + (f" ± {st['sd']:.2g}" if st["sd"] is not None else "")
        if st.get("range") is not None:
            return Ratio.from_json(st["range"]).text()
        return "—" if st["n"] == 0 else f"{f(st['mean'])} ({st['n']}/{len(st['values'])} seeds)"

    k50, k10 = ("t50_ratio", "t10_ratio") if with_mlp else ("t50", "t10")
    what = "t50 / t10 ratio" if with_mlp else "t50 / t10"
    if with_mlp:
        head = "| case | MLP t50 | MLP t10 | " + " | ".join(f"{v} {what}" for v in variants) + " | accepted |"
        intro = (f"Ratios are ODE/MLP on the test loss, mean ± standard deviation over seeds {list(seeds)} (network "
                 "initialisation and SGD samples); no constant is fitted. `< x` / `> x`: a bound on the seed mean, "
                 "where some seed's curve (MLP or ODE) ends before it crosses. A verdict is on the seed-mean ratios; "
                 "`k/n seeds` counts the seeds whose own ratios are inside the band.")
        ncol = len(variants) + 4
    else:
        head = "| case | " + " | ".join(f"{v} {what}" for v in variants) + " |"
        intro = (f"ODE only (no network trained): crossing times of L/L(0) = 0.5 and 0.1, mean ± standard deviation "
                 f"over seeds {list(seeds)}.")
        ncol = len(variants) + 1
    lines = [f"# {title}, ODE on the {basis} basis", ""] + ([description, ""] if description else []) + [
        intro, "", head, "|" + "---|" * ncol]
    for name, a in rows:
        cells = [f"{cell(a['variants'][v][k50])} / {cell(a['variants'][v][k10])}" if v in a["variants"] else "—"
                 for v in variants]
        if not a["seeds"]:
            cells = ["failed"] * len(variants)
        if not with_mlp:
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
            continue
        verdicts = []
        for k, ok in a["accepted"].items():
            per_seed = sum(1 for acc in a["accepted_per_seed"] if acc.get(k))
            verdicts.append(f"{k}: {'yes' if ok else 'no' if ok is not None else 'n/a'} "
                            f"({per_seed}/{len(a['accepted_per_seed'])} seeds)")
        lines.append(f"| {name} | {f(a['mlp']['t50'])} | {f(a['mlp']['t10'])} | " + " | ".join(cells)
                     + f" | {', '.join(verdicts)} |")
    if with_mlp:
        bands = {rule: f"t50 ratio in [{a}, {b}] and t10 ratio in [{c}, {e}]"
                 for rule, ((a, b), (c, e)) in BANDS.items()}
        bands["lazy"] = f"t50 ratio within 10% on the lazy cases (γ ≤ {LAZY_RICHNESS})"
        for rule, text in bands.items():
            got = [a["accepted"][rule] for _, a in rows if rule in a["accepted"]]
            runs = [acc[rule] for _, a in rows for acc in a["accepted_per_seed"] if rule in acc]
            if got:
                lines.append(f"\n**{rule}** ({text}): {sum(1 for x in got if x)}/{len(got)} cases on the seed mean"
                             + (f" ({sum(1 for x in got if x is None)} undecided: a curve ends before it crosses)"
                                if None in got else "")
                             + f"; {sum(1 for x in runs if x)}/{len(runs)} single runs")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# the sweep
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    """What :func:`run_sweep` did: the outcome of every run (by run name), the rows of ``results.csv``."""

    out: Path
    outcomes: dict[str, RunOutcome]
    rows: list[dict[str, Any]]
    computed: int
    reused: int

    @property
    def failed(self) -> list[RunOutcome]:
        """Runs that failed twice."""
        return [o for o in self.outcomes.values() if not o.ok]


def apply_basis(grid: Grid, basis: str | None) -> Grid:
    """``grid`` with ``ode.basis`` set for every point (``None``: unchanged)."""
    if basis is None:
        return grid
    if basis not in ("target", "extended"):
        raise GridError(f"--basis must be 'target' or 'extended', got {basis!r}")
    if "ode.basis" in grid.keys:
        raise GridError(f"{grid.source}: ode.basis is an axis of the grid; drop --basis")
    base = {sec: dict(vals) for sec, vals in grid.base.items()}
    base["ode"]["basis"] = basis
    return dataclasses.replace(grid, base=base)


def plan(grid: Grid, out: "str | Path", ode_only: bool = False, yes: bool = False) -> list[tuple[Point, RunTask]]:
    """Every run of ``grid`` (point-major, then seeds) as a task into ``out/runs/``; refuses a grid of more than
    :data:`MAX_RUNS_WITHOUT_YES` runs unless ``yes``, and checks every point's config."""
    if grid.n_runs > MAX_RUNS_WITHOUT_YES and not yes:
        raise GridError(f"{grid.source} has {grid.n_runs} runs ({grid.size} points × {len(grid.seeds)} seeds), more "
                        f"than {MAX_RUNS_WITHOUT_YES}; pass --yes to run them all")
    points = grid.points()
    check_points(grid, points)
    runs = Path(out) / "runs"
    return [(p, RunTask(p.run_name(s), grid.raw_config(p, s), str(runs / p.run_name(s)), ode_only,
                        grid.t_max_factor, grid.t_max_cap)) for p in points for s in grid.seeds]


def guard_sweep_dir(out: Path, grid: Grid, force: bool = False) -> None:
    """Create ``out`` and stamp it with the grid (``out/grid.json``); refuse a folder holding another grid (other
    base, ``[set]``, varied keys or horizon rule) unless ``force``. New axis values or seeds extend a sweep."""
    stamp = out / "grid.json"
    fixed = json.loads(json.dumps(grid.fixed(), default=str))
    if stamp.exists() and not force:
        try:
            old = read_json(stamp).get("fixed", {})
        except (TrajectoryFileError, AttributeError):
            old = {}
        if old != fixed:
            diff = [k for k in ("keys", "t_max_factor", "t_max_cap") if old.get(k) != fixed[k]]
            diff += sorted(f"{sec}.{k}" for sec, vals in fixed["base"].items() for k, v in vals.items()
                           if old.get("base", {}).get(sec, {}).get(k) != v)
            raise SweepError(f"{out} holds another grid (differs in: {', '.join(diff) or 'its stamp'}); choose "
                             "another --out, or pass --force to recompute its runs for this grid")
    out.mkdir(parents=True, exist_ok=True)
    write_json(stamp, {"source": grid.source, "fixed": fixed, "axes": [list(ax.keys) for ax in grid.axes],
                       "seeds": list(grid.seeds)})


def estimate_seconds(tasks: Sequence[RunTask], ode_only: bool, jobs: int) -> float:
    """A rough wall time: ODE ≈ 2 s a run; an MLP ≈ 21 s per run at N·B = 2²¹ on one core (the standard suite),
    proportional to N·B; divided among ``jobs``."""
    total = 0.0
    for t in tasks:
        total += 2.0
        if not ode_only:
            n, b = t.raw["network"]["width"], t.raw["training"]["batch"]
            total += max(1.0, 21.0 * n * b / 2**21)
    return total / max(1, jobs)


def list_text(grid: Grid, runs: Sequence[tuple[Point, RunTask]], ode_only: bool, jobs: int) -> str:
    """What ``sweep --list`` prints: one line per point, the counts and the time estimate."""
    lines = [f"{p.index:>5}  {p.name:<40}  " + ", ".join(f"{k} = {v!r}" for k, v in p.values.items())
             for p, t in runs if t.raw["training"]["seed"] == grid.seeds[0]]
    pending = [t for _, t in runs if stored_outcome(t) is None]
    done = len(runs) - len(pending)
    est = estimate_seconds(pending, ode_only, jobs)
    lines.append(f"{grid.size} points × {len(grid.seeds)} seeds = {grid.n_runs} runs"
                 + (f" ({done} already finished)" if done else "")
                 + f"; rough estimate {_duration(est)} with {jobs} job{'s' if jobs > 1 else ''}"
                 + (" (ODE only)" if ode_only else ""))
    return "\n".join(lines)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def run_sweep(grid: Grid, out: "str | Path", executor: Any = None, ode_only: bool = False, force: bool = False,
              progress: bool = True, yes: bool = False, title: str | None = None) -> SweepResult:
    """Run every run of ``grid`` into ``out/runs/`` (reusing finished ones) on ``executor`` (default: this process),
    write ``results.csv`` (+ parquet) as runs complete and ``summary.md``/``summary.json`` at the end.

    A run that fails, or whose worker dies, is retried once, then recorded with its error; the sweep goes on."""
    from tqdm import tqdm

    out = Path(out)
    runs = plan(grid, out, ode_only, yes)
    guard_sweep_dir(out, grid, force)
    columns = list(grid.keys) + list(RESULT_COLUMNS)
    outcomes: dict[str, RunOutcome] = {}
    todo = []
    for _, task in runs:
        found = stored_outcome(task)
        if found is not None:
            outcomes[task.name] = found
        else:
            todo.append(task)
    reused = len(outcomes)
    own = executor is None
    executor = executor if executor is not None else _Inline()
    probes = [probe_config(t.raw, t.name) for t in todo] if not ode_only else []  # the horizon: not a shape
    groups = [tuple(todo[i] for i in g) for g in batch_groups(probes, _uses_cuda(probes))] if probes \
        else ode_groups(todo, getattr(executor, "workers", 1))
    bar = tqdm(total=len(runs), initial=reused, desc=f"sweep {grid.name}", unit="run", disable=not progress,
               dynamic_ncols=True)
    last_write = 0.0
    failed = sum(1 for x in outcomes.values() if not x.ok)

    def record(o: RunOutcome) -> None:
        nonlocal last_write, failed
        outcomes[o.name] = o
        failed += not o.ok
        bar.update()
        bar.set_postfix(failed=failed, refresh=False)
        if time.time() - last_write > 2.0:
            write_results(out, columns, result_rows(grid, runs, outcomes))
            last_write = time.time()

    try:
        queue = list(groups)
        attempts: dict[tuple[str, ...], int] = {}
        inflight: dict[Any, tuple[RunTask, ...]] = {}
        while queue or inflight:
            while queue and len(inflight) < executor.capacity:
                g = queue.pop(0)
                inflight[executor.submit(execute, g)] = g
            done, _ = executor.wait(set(inflight))
            for fut in done:
                g = inflight.pop(fut)
                key = tuple(t.name for t in g)
                attempts[key] = attempts.get(key, 0) + 1
                try:
                    results = fut.result()
                except Exception as exc:  # noqa: BLE001 — a dead worker or a task that could not run
                    if attempts[key] < 2:
                        queue.append(g)
                    else:
                        for t in g:
                            record(RunOutcome(t.name, int(t.raw["training"]["seed"]), _one_line(exc)))
                    continue
                for t, o in zip(g, results):
                    if not o.ok and attempts[key] < 2:  # a failed run is tried once more, on its own
                        attempts[(t.name,)] = attempts[key]
                        queue.append((t,))
                    else:
                        record(o)
    finally:
        bar.close()
        if own:
            executor.close()
        rows = result_rows(grid, runs, outcomes)
        write_results(out, columns, rows)
        _write_summary(out, grid, runs, outcomes, title or f"sweep `{grid.name}`")
    return SweepResult(out, outcomes, rows, len(outcomes) - reused, reused)


def _write_summary(out: Path, grid: Grid, runs: Sequence[tuple[Point, RunTask]], outcomes: dict[str, RunOutcome],
                   title: str) -> None:
    rows = []
    for k in range(0, len(runs), len(grid.seeds)):  # plan(): point-major, then seeds
        point, first = runs[k]
        got = [outcomes[t.name] for _, t in runs[k:k + len(grid.seeds)] if t.name in outcomes]
        ok = [o for o in got if o.ok]
        richness = float(first.raw["network"]["richness"])
        rows.append((point.name, aggregate(richness, ok) | {"failed": [o.name for o in got if not o.ok]}))
    if not any(a["seeds"] for _, a in rows):
        return
    basis = grid.base["ode"]["basis"]
    write_json(out / "summary.json", {name: a for name, a in rows})
    write_text(out / "summary.md", summary_markdown(title, grid.description, grid.seeds, rows, basis))


def point_config(grid: Grid, point: str, seed: int = 0) -> Config:
    """The resolved config (``t_max = "auto"`` computed) of the point of ``grid`` whose run folder is named
    ``point`` (e.g. ``"staircase_3_d16_g0.005"`` of the standard suite), with ``seed``."""
    points = grid.points()
    for p in points:
        if p.name == point:
            return RunTask(p.run_name(seed), grid.raw_config(p, seed), "", False, grid.t_max_factor,
                           grid.t_max_cap).config()
    raise GridError(f"unknown point {point!r} in {grid.source}" + suggest(point, [p.name for p in points]))


def run_suite(name: str, out: "str | Path", executor: Any = None, basis: str = "target", force: bool = False,
              progress: bool = True) -> SweepResult:
    """Run the validation suite ``name`` (a grid file in ``featureode/suites/``) through :func:`run_sweep`."""
    grid = apply_basis(load_grid(suite_path(name)), basis)
    return run_sweep(grid, out, executor, force=force, progress=progress, title=f"validation suite `{name}`")
