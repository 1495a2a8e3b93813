"""ODE vs MLP on one config (theory §5–6): :func:`compare_config` solves every ODE variant, simulates the MLP (or
reuses a finished simulation in the folder) and writes the report.

The jobs live in their own modules: the curve metrics and the :class:`~featureode.results.metrics.Ratio` of two crossing
times in :mod:`featureode.results.metrics`, run folders (stamp, lock, cached results) in :mod:`featureode.workflow.runs`, the
:class:`~featureode.export.report.Report` and its ``report.json``/``report.md``/``report.png`` in :mod:`featureode.export.report`.
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path
from typing import Sequence

from featureode.workflow import runs
from featureode.config import Config, require_config
from featureode.export.report import Report, build_report, figure_variants
from featureode.export.style import figure_format, get_style
from featureode.results.trajectory import ODEResult, Trajectory


def compare_config(cfg: Config, out: "str | Path", progress: bool = True,
                   figure_variant: "str | Sequence[str] | None" = None, fmt: str = "png",
                   style: "str | None" = None) -> Report:
    """Solve every ODE variant of ``cfg`` into ``out/ode.json``, simulate the MLP into ``out/mlp.json`` (or reuse a
    finished simulation of the same config there), and write ``out/report.json``, ``report.md``, ``report.png`` and
    the closure diagnostics ``report_diagnostics.png`` (:func:`featureode.export.diagnostics.save_diagnostics`).
    ``figure_variant``: the ODE variant(s) of the figure's mode and eigenvalue panels (default ``displacement``);
    ``fmt``: the figures' format (``png``, ``pdf`` or ``svg``: ``report.FMT``, ``report_diagnostics.FMT``);
    ``style``: their style (:data:`featureode.export.style.STYLES`).
    The variant ``replay`` (:func:`featureode.ode.replay.replay`, driven by this simulation's measured eigenvalues, so
    never parameter-free) is added to ``ode.json`` after the simulation; on the extended basis the simulation then
    measures the Gram on every mode of that basis (a finished simulation that measured fewer is reused, with a
    warning). The folder is locked while it runs
    (:func:`featureode.workflow.runs.locked`). Returns the :class:`Report`."""
    from featureode.ode.solve import solve_config
    from featureode.ode.variants import MEANFIELD_NAMES, REPLAY, variants_from_config

    cfg = require_config(cfg, "compare_config")
    names = [v.label for v in variants_from_config(cfg.ode, allow_replay=True)]
    names += [n for n in cfg.ode.variants if n in MEANFIELD_NAMES and n not in (cfg.ode.custom or {})]
    with_replay = REPLAY in cfg.ode.variants
    figure_variants(names + [REPLAY] * with_replay, figure_variant)  # checked before the work
    figure_format(None, fmt), get_style(style)
    out = Path(out)
    with runs.locked(out):
        runs.unmark_finished(out)
        t0 = time.time()
        ode = solve_config(cfg, out, allow_replay=True, progress=progress)  # a failed variant keeps its partial curve (status.error)
        # a replay on the extended basis needs the measured Gram on all of the ODE's modes
        extended_replay = with_replay and cfg.ode.basis == "extended"
        mlp = runs.mlp_trajectory(cfg, out, progress=progress, modes=list(ode.modes) if extended_replay else None)
        if extended_replay and not set(ode.modes) <= set(mlp.modes):
            warnings.warn(f"{out / 'mlp.json'} measured {len(mlp.modes)} of the {len(ode.modes)} modes of the extended "
                          "basis (a simulation finished before replay was asked for); replay uses those. Delete "
                          "mlp.json, mlp.npz and checkpoint.pt there to train again measuring all of them",
                          stacklevel=2)
        if with_replay:
            ode = _with_replay(cfg, ode, mlp, out)
        report = build_report(cfg, ode, mlp, wall_s=time.time() - t0)
        report.write(out, variant=figure_variant, fmt=fmt, style=style)
        _diagnostics(cfg, ode, mlp, out, fmt, style)
        figures = [f"report.{fmt}", *([f"report_diagnostics.{fmt}"] if (out / f"report_diagnostics.{fmt}").exists()
                                        else [])]
        runs.mark_finished(out, cfg, [*COMPARE_FILES, *figures])   # last: the run is finished only now
    return report


#: What a finished comparison holds besides its figures (``report.FMT`` and, when it could be drawn,
#: ``report_diagnostics.FMT``).
COMPARE_FILES = ("ode.json", "ode.npz", "mlp.json", "mlp.npz", "report.json", "report.md")


def _with_replay(cfg: Config, ode: ODEResult, mlp: Trajectory, out: Path) -> ODEResult:
    """``ode`` with the ``replay`` trajectory inserted where the config lists it, and ``ode.json`` rewritten. A
    replay that cannot be computed (no measured Gram, say) is kept as a failed variant with its error."""
    from featureode.ode.replay import ReplayError, replay
    from featureode.ode.variants import REPLAY

    try:
        rep = replay(mlp, basis=cfg.ode.basis, source=str(out / "mlp.json"))
    except ReplayError as exc:
        rep = Trajectory.failed(REPLAY, mlp.modes, mlp.target, str(exc),
                                meta={"uses_measurements": True, "parameter_free": False})
    order = [n for n in cfg.ode.variants if n == REPLAY or n in ode.variants]
    variants = {n: rep if n == REPLAY else ode.variants[n] for n in order}
    variants.update({n: tr for n, tr in ode.variants.items() if n not in variants})
    ode = dataclasses.replace(ode, variants=variants)
    ode.save(out)
    return ode


def _diagnostics(cfg: Config, ode: ODEResult, mlp: Trajectory, out: Path, fmt: str = "png",
                 style: "str | None" = None) -> None:
    """Write ``report_diagnostics.FMT``; a diagnostics request that cannot be met (a mode the network did not
    measure, say) is a warning naming why, not a failed comparison."""
    from featureode.export.diagnostics import DiagnosticsError, save_diagnostics

    title = f"{cfg.target.expr}, d = {cfg.data.dim}, γ = {cfg.network.richness:g}, {cfg.network.activation}"
    try:
        save_diagnostics(mlp, dict(ode.variants), out, title=title, fmt=fmt, style=style)
    except DiagnosticsError as exc:
        warnings.warn(f"{out / f'report_diagnostics.{fmt}'} not written: {exc}", stacklevel=2)
