"""Sweeps (theory §7): run every point of a grid file, collect a results table, summarise; validation suites.

A sweep is a :class:`~featureode.workflow.grid.Grid` × its seeds. Each run (point, seed) lives in ``DIR/runs/RUN/``:
``config.json`` (the resolved config, its digest and the digest of the unresolved point), then ``report.json``
(ODE + MLP, :func:`featureode.workflow.compare.compare_config`). An ODE-only run's folder holds its stamp alone,
written once after the solve with the crossing times (its own completion stamp); the curves of an ODE-only sweep
are in one columnar file, ``DIR/curves.parquet`` (:func:`read_curves`), and such a run is reused only when its
curves are there too. Finished runs are reused, so an interrupted or extended sweep computes only what is missing.
``DIR/results.csv`` (and ``results.parquet`` when pyarrow is importable) has one row per (point, seed, variant),
rewritten as runs complete; ``DIR/summary.md``/``summary.json`` hold the seed means and the acceptance verdicts
of theory §5.

``training.t_max = "auto"`` is resolved per run by :func:`auto_t_max`. Runs are executed in this process
(``jobs = 1``), by local worker processes, or by a Dask cluster (:func:`make_executor`); a run that fails, or whose
worker dies, is retried once and then recorded with its error while the sweep goes on. On CUDA, runs whose networks
have the same shapes train together (:func:`batch_groups`).

Layout: :mod:`~featureode.workflow.horizon` (``t_max = "auto"``), :mod:`~featureode.workflow.tasks` (runs and
what a worker executes), :mod:`~featureode.workflow.executors`, :mod:`~featureode.workflow.table` (results table,
statistics, summary); this module plans and runs a sweep (their public names are re-exported here).
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from featureode.core.basis import check_basis
from featureode.config import Config, suggest
from featureode.results.trajectory import (
    TrajectoryFileError,
    read_json,
    write_json,
    write_text,
)
from featureode.workflow.executors import Executor, _Inline, make_executor  # noqa: F401  (make_executor re-exported)
from featureode.workflow.grid import (
    Grid,
    GridError,
    Point,
    check_points,
    load_grid,
    probe_config,
    suite_path,
)
from featureode.workflow.horizon import auto_t_max, lazy_t10  # noqa: F401  (re-exported)
from featureode.workflow.table import (  # noqa: F401  (re-exported)
    RESULT_COLUMNS,
    acceptance,
    aggregate,
    curve_runs,
    mean_sd,
    read_curves,
    read_results,
    result_rows,
    summary_markdown,
    write_curves,
    write_results,
)
from featureode.workflow.tasks import (
    RunOutcome,
    RunTask,
    SweepError,
    _one_line,
    _uses_cuda,
    batch_groups,
    execute,
    ode_groups,
    stored_outcome,
)

#: Above this many runs a sweep asks for ``yes=True`` (``--yes``).
MAX_RUNS_WITHOUT_YES = 10_000
#: An ODE-only sweep rewrites its curve file at most this often while it runs (and once at the end); a run whose
#: curves are not in the file when the sweep resumes is computed again.
CURVES_EVERY_S = 30.0




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
    check_basis(basis, GridError, "--basis")
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
    tasks = [(p, RunTask(p.run_name(s), grid.raw_config(p, s), str(runs / p.run_name(s)), ode_only,
                         grid.t_max_factor, grid.t_max_cap)) for p in points for s in grid.seeds]
    owner: dict[str, Point] = {}
    for p, t in tasks:   # a seed suffix can meet another point's name ("a" seed 1 and a point named "a_s1")
        if t.name in owner and owner[t.name] is not p:
            raise GridError(f"{grid.source}: {owner[t.name].describe()} and {p.describe()} both get the run folder "
                            f"{t.name!r} (with their seeds); rename the points ([sweep] name)")
        owner[t.name] = p
    return tasks


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
    have = curve_runs(Path(runs[0][1].run_dir).parent.parent) if ode_only and runs else None
    pending = [t for _, t in runs if stored_outcome(t, have) is None]
    done = len(runs) - len(pending)
    est = estimate_seconds(pending, ode_only, jobs)
    lines.append(f"{grid.size} points × {len(grid.seeds)} seeds = {grid.n_runs} runs"
                 + (f" ({done} already finished)" if done else "")
                 + f"; rough estimate {_duration(est)} with {jobs} job{'s' if jobs > 1 else ''}"
                 + (" (ODE only)" if ode_only else ""))
    return "\n".join(lines)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def run_sweep(grid: Grid, out: "str | Path", executor: Executor | None = None, ode_only: bool = False, force: bool = False,
              progress: bool = True, yes: bool = False, title: str | None = None) -> SweepResult:
    """Run every run of ``grid`` into ``out/runs/`` (reusing finished ones) on ``executor`` (default: this process),
    write ``results.csv`` (+ parquet) as runs complete and ``summary.md``/``summary.json`` at the end.

    A run that fails, or whose worker dies, is retried once, then recorded with its error; the sweep goes on."""
    from featureode.workflow import runs as folders

    if not str(out).strip():
        raise SweepError("the output folder is empty (--out \"\"); name a folder")
    out = Path(out)
    start = getattr(executor, "start", None)   # optional (see Executor)
    if callable(start):
        start()   # the workers start while the runs are planned and checked
    tasks = plan(grid, out, ode_only, yes)
    # one writer per folder: a second sweep (with --force or not), a validate or a solve on it waits, then refuses
    with folders.locked(out):
        guard_sweep_dir(out, grid, force)
        return _run_locked(grid, out, tasks, executor, ode_only, progress, title)


def _run_locked(grid: Grid, out: Path, runs: list[tuple[Point, RunTask]], executor: Any, ode_only: bool,
                progress: bool, title: str | None) -> SweepResult:
    from tqdm.auto import tqdm

    columns = list(grid.keys) + list(RESULT_COLUMNS)
    outcomes: dict[str, RunOutcome] = {}
    todo = []
    have = curve_runs(out) if ode_only else None
    for _, task in runs:
        found = stored_outcome(task, have)
        if found is not None:
            outcomes[task.name] = found
        else:
            todo.append(dataclasses.replace(task, collect_curves=True) if ode_only else task)
    reused = len(outcomes)
    own = executor is None
    executor = executor if executor is not None else _Inline()
    probes = [probe_config(t.raw, t.name) for t in todo] if not ode_only else []  # the horizon: not a shape
    groups = [tuple(todo[i] for i in g) for g in batch_groups(probes, _uses_cuda(probes))] if probes \
        else ode_groups(todo, getattr(executor, "workers", 1))
    bar = tqdm(total=len(runs), initial=reused, desc=f"sweep {grid.name}", unit="run", disable=not progress,
               dynamic_ncols=True)
    last_write = last_curves = time.time()
    write_every = 2.0
    failed = sum(1 for x in outcomes.values() if not x.ok)
    kept = [n for n, o in outcomes.items() if o.reused and o.curves is None]

    def record(o: RunOutcome) -> None:
        nonlocal last_write, last_curves, failed, write_every
        outcomes[o.name] = o
        failed += not o.ok
        bar.update()
        bar.set_postfix(failed=failed, refresh=False)
        if time.time() - last_write > write_every:
            began = time.time()
            write_results(out, columns, result_rows(grid, runs, outcomes))
            last_write = time.time()
            # the table is rewritten whole: at least 20 writes' worth of sweep between two, so that on a big sweep
            # the checkpoints cost at most 5% of its time (every 2 s while a write is short)
            write_every = max(2.0, 20 * (last_write - began))
        if ode_only and time.time() - last_curves > CURVES_EVERY_S:   # a killed sweep keeps most of its curves
            write_curves(out, list(outcomes.values()), keep=kept)
            last_curves = time.time()

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
        if ode_only:
            write_curves(out, list(outcomes.values()), keep=kept)
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


def run_suite(name: str, out: "str | Path", executor: Executor | None = None, basis: str = "target", force: bool = False,
              progress: bool = True) -> SweepResult:
    """Run the validation suite ``name`` (a grid file in ``featureode/suites/``) through :func:`run_sweep`."""
    grid = apply_basis(load_grid(suite_path(name)), basis)
    return run_sweep(grid, out, executor, force=force, progress=progress, title=f"validation suite `{name}`")
