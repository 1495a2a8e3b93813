"""ODE vs MLP on one config (DESIGN §5–6): :func:`compare_config` solves every ODE variant, simulates the MLP (or
reuses a finished simulation in the folder) and writes the report.

The jobs live in their own modules: the curve metrics and the :class:`~featureode.metrics.Ratio` of two crossing
times in :mod:`featureode.metrics`, run folders (stamp, lock, cached results) in :mod:`featureode.runs`, the
:class:`~featureode.report.Report` and its ``report.json``/``report.md``/``report.png`` in :mod:`featureode.report`.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from . import runs
from .config import Config
from .report import Report, build_report, figure_variants


def compare_config(cfg: Config, out: "str | Path", progress: bool = True,
                   figure_variant: "str | Sequence[str] | None" = None) -> Report:
    """Solve every ODE variant of ``cfg`` into ``out/ode.json``, simulate the MLP into ``out/mlp.json`` (or reuse a
    finished simulation of the same config there), and write ``out/report.json``, ``report.md``, ``report.png``.
    ``figure_variant``: the ODE variant(s) of the figure's mode and eigenvalue panels (default ``displacement``).
    The folder is locked while it runs (:func:`featureode.runs.locked`). Returns the :class:`Report`."""
    from .solve import solve_config
    from .variants import variants_from_config

    figure_variants([v.label for v in variants_from_config(cfg.ode)], figure_variant)  # checked before the work
    out = Path(out)
    with runs.locked(out):
        t0 = time.time()
        ode = solve_config(cfg, out)  # a failed variant keeps its partial curve, with status.error
        mlp = runs.mlp_trajectory(cfg, out, progress=progress)
        report = build_report(cfg, ode, mlp, wall_s=time.time() - t0)
        report.write(out, variant=figure_variant)
    return report
