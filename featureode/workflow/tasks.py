"""Sweep runs: one (point, seed) as a picklable :class:`RunTask`, its :class:`RunOutcome`, stored outcomes and stamps,
and :func:`execute` (what a worker runs: grouped ODE-only solves, batched trainings)."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from featureode.core.basis import BASES
from featureode.core.errors import FeatureODEError
from featureode.config import MLP_SECTIONS, Config, resolved_device
from featureode.results.trajectory import TrajectoryFileError, read_json, write_json, write_npz
from featureode.workflow.grid import AUTO, probe_config
from featureode.workflow.horizon import auto_t_max
from featureode.core.provenance import provenance
from featureode.workflow.runs import (STAMP, claim, finished, locked, read_stamp, release, remove_stale,
                                      same_config, unmark_finished)

#: The most networks trained together in one batch on a GPU.
MAX_BATCH = 64
#: The most ODE-only runs solved together in one task.
ODE_GROUP = 32
class SweepError(FeatureODEError, RuntimeError):
    """A sweep that cannot run (output folder, scheduler, size); the message names the fix."""




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
    #: an ODE-only run whose curves the sweep collects into its one curve file (:func:`run_sweep
    #: <featureode.workflow.sweeps.run_sweep>` sets it); without it (a run executed on its own, e.g. by a SLURM job
    #: array) the curves are written to the run's folder (:data:`RUN_CURVES`) for the collecting sweep to pick up
    collect_curves: bool = False

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
    #: ODE-only runs: per variant the arrays ``t``, ``loss``, ``in_support_loss`` (kept by the sweep in one columnar
    #: file, :data:`featureode.workflow.table.CURVES`, not in the run's folder); ``None`` otherwise
    curves: dict[str, dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """Did the run finish?"""
        return self.status == "ok"


#: An ODE-only run executed outside a sweep keeps its curves here (``variant``, ``t``, ``loss``, ``in_support_loss``
#: arrays, long format), until a sweep collects them into its curve file.
RUN_CURVES = "curves.npz"
_VARIANT_KEYS = ("t50", "t10", "t50_ratio", "t10_ratio", "log_rms", "t50_ratio_range", "t10_ratio_range", "error")
#: Files of a finished run: a comparison, an ODE-only solve.
FULL_FILES = ("ode.json", "ode.npz", "mlp.json", "mlp.npz", "report.json", "report.md")  # + the figures its stamp lists
ODE_FILES = ("ode.json", "ode.npz")


def _outcome_from_files(task: RunTask, stamp: dict[str, Any], stamp_only: bool = True) -> RunOutcome | None:
    """The outcome stored in a run folder stamped ``stamp``, or ``None`` when its result file is missing or damaged
    (a full result also serves an ODE-only sweep). ``stamp_only=False`` refuses an ODE-only sweep's run, whose
    outcome is in its stamp and whose curves are in the sweep's curve file (a caller that cannot check that file)."""
    folder, seed = Path(task.run_dir), int(stamp["config"]["training"]["seed"])
    t_max = float(stamp["config"]["training"]["t_max"])
    try:
        if not finished(folder, stamp["digest"], FULL_FILES):
            raise TrajectoryFileError("not finished")
        rep = read_json(folder / "report.json")
        if rep.get("digest", stamp["digest"]) == stamp["digest"]:
            return RunOutcome(task.name, seed, "ok", t_max, {k: rep["mlp"].get(k) for k in ("t50", "t10")},
                              {n: {k: v[k] for k in _VARIANT_KEYS if k in v} for n, v in rep["variants"].items()},
                              reused=True)
    except (TrajectoryFileError, KeyError, TypeError, AttributeError):
        pass
    if not task.ode_only:
        return None
    if isinstance(stamp.get("ode"), dict) and stamp_only and finished(folder, stamp["digest"], ()):
        # an ODE-only run of a sweep: its outcome is in the stamp (its curves in the sweep's curves file)
        return RunOutcome(task.name, seed, "ok", t_max, None,
                          {n: {k: v[k] for k in ("t50", "t10", "error") if k in v} for n, v in stamp["ode"].items()},
                          reused=True)
    if not finished(folder, stamp["digest"], ODE_FILES):
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


def stored_outcome(task: RunTask, curves: "set[str] | None" = None) -> RunOutcome | None:
    """A finished run of ``task`` found without computing anything (its folder is stamped with the same unresolved
    point), else ``None``. ``curves``: the runs (``runs/NAME``) whose curves the sweep's curve file holds; an
    ODE-only run whose outcome is in its stamp alone counts as finished only when its curves are there too (a sweep
    killed before it wrote the file computes them again). ``None``: not checked."""
    stamp = _read_stamp(Path(task.run_dir))
    if stamp is None or stamp.get("point") != task.point_digest:
        return None
    found = _outcome_from_files(task, stamp)
    if found is not None and curves is not None and _stamp_only(task, stamp) \
            and str(Path("runs") / task.name) not in curves:
        found.curves = _run_curves(Path(task.run_dir))   # computed outside the sweep (a job array), or lost
        if found.curves is None:
            return None
    return found


def _run_curves(folder: Path) -> dict[str, dict[str, Any]] | None:
    """The curves an ODE-only run executed outside a sweep left in its folder (:data:`RUN_CURVES`), per variant;
    ``None`` when there are none or they do not load."""
    import numpy as np

    try:
        with np.load(folder / RUN_CURVES, allow_pickle=False) as z:
            cols = {k: z[k] for k in ("variant", "t", "loss", "in_support_loss")}
    except (OSError, KeyError, ValueError, EOFError):
        return None
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(cols["variant"].tolist()):
        sel = cols["variant"] == name
        out[str(name)] = {k: cols[k][sel] for k in ("t", "loss", "in_support_loss")}
    return out


def _stamp_only(task: RunTask, stamp: dict[str, Any]) -> bool:
    """Is the run's outcome carried by its stamp alone (an ODE-only sweep's run: no ``ode.json``/``report.json``)?"""
    return isinstance(stamp.get("ode"), dict) and not any((Path(task.run_dir) / n).exists()
                                                          for n in ("report.json", "ode.json"))


def _stamp(task: RunTask, cfg: Config) -> RunOutcome | None:
    """Reuse a finished run of ``cfg`` in ``task.run_dir``, or stamp the folder for ``cfg`` through
    :func:`featureode.workflow.runs.claim` (the path ``compare`` takes, under the folder's lock): results of another
    config are removed, a simulation of the same network is kept for ``compare`` to reuse. An ODE-only run adds its
    outcome to the stamp when it is done (:func:`_ode_outcome`)."""
    folder = Path(task.run_dir)
    with locked(folder):
        old = _read_stamp(folder)
        if old is not None and same_config(old, cfg):
            found = _outcome_from_files(task, old)
            if found is not None:
                if old.get("point") != task.point_digest:
                    write_json(folder / STAMP, {**old, "point": task.point_digest})
                return found
        claim(folder, cfg, force=True, extra={"point": task.point_digest}, check=False)
        release(folder)  # claim's own hold; the block's ends with it
    return None


def _reusable(task: RunTask, cfg: Config) -> RunOutcome | None:
    """An ODE-only run: a finished full run (ODE + MLP) of ``cfg`` already in its folder, else ``None``. Read
    without the folder's lock when there is no stamp of ``cfg`` (the common case: no folder yet); an ODE-only
    outcome carried by a stamp alone is not reused here (its curves may be missing from the sweep's file: the
    sweep checked that before handing the run out, and computing it again costs milliseconds)."""
    folder = Path(task.run_dir)
    if not same_config(_read_stamp(folder), cfg):
        return None
    with locked(folder):
        old = _read_stamp(folder)
        if old is None or not same_config(old, cfg):
            return None
        found = _outcome_from_files(task, old, stamp_only=False)
        if found is not None and old.get("point") != task.point_digest:
            write_json(folder / STAMP, {**old, "point": task.point_digest})
        return found


def _ode_outcome(task: RunTask, cfg: Config, result: Any) -> RunOutcome:
    """The outcome of an ODE-only run from its :class:`~featureode.results.trajectory.ODEResult`; its folder gets
    its stamp alone, written once, after the solve, with the crossing times (``"ode"``): the stamp is then its own
    completion stamp (no ``done.json``), written without an fsync (lost or empty after a crash, it is unreadable and
    the run is computed again). A folder that held anything else first has its ODE and report files and its
    completion stamp removed, and its simulation too unless it is of ``cfg``'s network
    (:func:`~featureode.workflow.runs.remove_stale`). The curves
    travel back to the sweep in ``RunOutcome.curves`` (one columnar file per sweep instead of ``ode.json`` +
    ``ode.npz`` per run)."""
    folder = Path(task.run_dir)
    variants = {n: {"t50": tr.t50, "t10": tr.t10, **({"error": tr.status.error} if tr.status.error else {})}
                for n, tr in result.variants.items()}
    try:
        folder.mkdir(parents=True)
        fresh = True
    except FileExistsError:
        fresh = False
    # a variant that failed before any curve (Trajectory.failed) has no in-support loss: an empty column, not None
    curves = {n: {"t": tr.t, "loss": tr.loss,
                  "in_support_loss": tr.in_support_loss if tr.in_support_loss is not None else tr.loss}
              for n, tr in result.variants.items()}
    with locked(folder):
        if not fresh:   # this solve supersedes every ODE and report file there; a simulation of cfg's network stays
            remove_stale(folder, cfg, None)
            unmark_finished(folder)
            (folder / RUN_CURVES).unlink(missing_ok=True)
        if not task.collect_curves:   # no sweep collects them: they stay in the folder until one does
            import numpy as np

            write_npz(folder / RUN_CURVES, {
                "variant": np.array([n for n, c in curves.items() for _ in c["t"]], dtype=str),
                **{k: np.concatenate([np.asarray(c[k], dtype=float) for c in curves.values()])
                   if curves else np.zeros(0) for k in ("t", "loss", "in_support_loss")}})
        write_json(folder / STAMP, {"digest": cfg.digest(), "config": cfg.to_dict(), "source": cfg.source,
                                    "provenance": provenance(cfg.training.device), "point": task.point_digest,
                                    "ode": variants}, indent=None, durable=False)
    return RunOutcome(task.name, cfg.training.seed, "ok", cfg.training.t_max, None, variants, curves=curves)


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
            found = _reusable(task, cfg) if task.ode_only else _stamp(task, cfg)
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
        for basis in BASES:
            part = [(i, c) for i, _, c in todo if c.ode.basis == basis]
            if part:
                built = kernel_theory_batch([c for _, c in part], with_gram=basis == "extended")
                theories.update({i: th for (i, _), th in zip(part, built)})
        results = solve_batch([c for _, _, c in todo], [theories[i] for i, _, _ in todo])
    except Exception:  # noqa: BLE001 — each run then reports its own error
        return {i: _run_one(task, cfg) for i, task, cfg in todo}
    out = {}
    for (i, task, cfg), res in zip(todo, results):
        try:
            out[i] = _ode_outcome(task, cfg, res)
        except Exception as exc:  # noqa: BLE001 — recorded as the run's status
            out[i] = RunOutcome(task.name, cfg.training.seed, _one_line(exc), cfg.training.t_max)
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

            return _ode_outcome(task, cfg, solve_config(cfg))  # a failed variant keeps its "error"
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
    """ODE-only runs in groups solved together (:func:`_solve_many`): at least four groups per worker (so the
    workers stay busy to the end) and at most ``max_size`` (default :data:`ODE_GROUP`) runs per group (progress and
    retries stay fine-grained). Runs whose configs differ only in the richness γ and the seed (:func:`family_key`)
    share their kernel theory (:func:`featureode.kernel.theory.kernel_theory_batch`), so they are kept in one
    group: families are packed whole, in order of first appearance, and only a family larger than a group is
    split."""
    cap = ODE_GROUP if max_size is None else max_size
    size = max(1, min(cap, math.ceil(len(tasks) / (4 * max(1, workers)))))
    families: dict[str, list[RunTask]] = {}
    for t in tasks:
        families.setdefault(family_key(t), []).append(t)
    groups: list[tuple[RunTask, ...]] = []
    current: list[RunTask] = []
    for members in families.values():
        if current and len(current) + len(members) > size:
            groups.append(tuple(current))
            current = []
        for k in range(0, len(members), size):
            chunk = members[k:k + size]
            if len(chunk) == size:
                groups.append(tuple(chunk))
            else:
                current += chunk
    if current:
        groups.append(tuple(current))
    return groups


def family_key(task: Any) -> str:
    """What a run's kernel theory depends on: its config without ``network.richness`` and ``training.seed`` (γ
    enters no init quantity, theory §3; the seed only the simulation). Anything that is not a
    :class:`RunTask` is its own family."""
    raw = getattr(task, "raw", None)
    if not isinstance(raw, dict):
        return f"#{id(task)}"
    rest = {sec: {k: v for k, v in vals.items() if (sec, k) not in (("network", "richness"), ("training", "seed"))}
            for sec, vals in raw.items() if isinstance(vals, dict)}
    return json.dumps(rest, sort_keys=True, default=str)


def _uses_cuda(cfgs: Sequence[Config]) -> bool:
    """Does any config train on a CUDA device here (``device = "cuda…"``, or ``"auto"`` with CUDA available)?"""
    return any(c.training.device.startswith("cuda") or resolved_device(c.training.device) != "cpu" for c in cfgs)




