"""The closure diagnostics figure (``report_diagnostics.png``): what each variant predicts against what the network
measured, on the loss figure's logarithmic time axis.

One row per variant, four panels:

1. ``λ_β(t)/λ_β(0)`` per target mode, predicted (solid) against measured (dashed, the eNTK Rayleigh quotient);
2. the same per part (readout, first-layer weights, bias; theory §6 ``lambda_parts``) for the target's leading
   mode, each part over its own value at ``t = 0`` — the prediction of a variant for a part is its
   ``lambda_parts/PART`` array when it has one, else its total growth ``λ_β(t)/λ_β(0)`` (every built-in closure
   scales all parts of a mode alike);
3. ``r_i(t)`` on the directions of the target's support (at most four), predicted against measured (a variant
   whose ``r_i ≡ 1`` — lazy, or an eigenvalue law — is said so instead of drawn);
4. ``⟨a²⟩(t)/⟨a²⟩(0)``: measured (``a2``) against the variant's ``a2`` (or ``s``, the predicted readout growth of
   the scale factor, when the variant has one).

A mode with ``λ_β(0) = 0`` (no growth ratio exists) is named in its panel and left out; absent measurements are
said in the panel. The figure uses matplotlib's object API (no pyplot state); a variant's own curves (the
predicted ``⟨a²⟩``, "all parts") have its colour of :func:`featureode.export.style.variant_colour`, the per-mode
and per-direction curves one colour per mode or direction (solid: predicted, dashed: measured).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from featureode.core.errors import FeatureODEError
from featureode.calculus.hermite import Mode
from featureode.kernel.parametrization import PARTS
from featureode.export.report import _positive
from featureode.export.style import (PAPER_MIN_FONT_PT, figure_bytes, label, mode_label, mode_tex, new_figure, styled,
                                     variant_colour)
from featureode.results.trajectory import Trajectory, write_bytes

MAX_DIRECTIONS = 4


class DiagnosticsError(FeatureODEError, ValueError):
    """A diagnostics request that cannot be drawn (no variants, a mode that is not measured)."""


def _growth(lam: np.ndarray | None) -> tuple[np.ndarray | None, bool]:
    """``λ(t)/λ(0)`` of one series, and whether ``λ(0)`` was usable (finite and > 0)."""
    if lam is None or lam.size == 0:
        return None, True
    lam = np.asarray(lam, float)
    if not (np.isfinite(lam[0]) and lam[0] > 0):
        return None, False
    return lam / lam[0], True


def _note(ax, text: str, small: float) -> None:
    ax.text(0.02, 0.98, text, transform=ax.transAxes, va="top", ha="left", fontsize=small, color="0.3", wrap=True)


def diagnostics_figure(mlp: Trajectory, variants: Mapping[str, Trajectory], *,
                       modes: Sequence[str] | None = None, title: str = "",
                       figsize: tuple[float, float] | None = None, ax: Any = None,
                       style: "str | Mapping[str, Any] | None" = None) -> Figure:
    """The diagnostics figure for one run: ``mlp`` is the network's trajectory (``lam``, ``r``, and when the
    simulator records them ``a2`` and ``lambda_parts/PART``), ``variants`` the ODE trajectories by name (``lam``,
    ``r``, optionally ``a2``/``s``/``lambda_parts/PART``, e.g. ``ODEResult.variants``), ``modes`` the target modes
    to show (default: the target's support, ``v_β ≠ 0``). Raises :class:`DiagnosticsError` for no variants or a
    mode that the simulation did not measure.

    ``style`` (``"report"``, ``"paper"``, ``"column"`` or ``rcParams``), ``figsize`` and ``ax`` (the caller's axes:
    an array of one row of four per variant) as for :func:`featureode.export.report.report_figure`."""
    with styled(style) as st:
        return _diagnostics(mlp, variants, modes, title, figsize, ax, st)


def _diagnostics(mlp: Trajectory, variants: Mapping[str, Trajectory], modes: Sequence[str] | None, title: str,
                 figsize: tuple[float, float] | None, ax: Any, st: Any) -> Figure:
    if not variants:
        raise DiagnosticsError("the diagnostics figure needs at least one ODE variant")
    measured = list(mlp.modes)
    v = np.asarray(mlp.target, float)
    if modes is None:
        modes = [m for m, vb in zip(measured, v) if vb != 0] if v.size == len(measured) else measured
    missing = [m for m in modes if m not in measured]
    if missing:
        raise DiagnosticsError(f"diagnostics: mode(s) {', '.join(missing)} not measured by the simulation; "
                               f"measured modes: {', '.join(measured)}")
    rows = list(variants.items())
    small = PAPER_MIN_FONT_PT if st.compact else 7  # notes and legends
    if ax is None:
        size = figsize or st.size((15, 3.0 * len(rows) + 0.6), aspect=(0.8 * len(rows) + 0.1) * 4 / 15
                                  if st.name != "column" else 1.3 * len(rows) + 0.1)
        fig = new_figure(size, layout="constrained")
        # one row of four panels per variant; in a single column, two rows of two
        axes = (fig.subplots(2 * len(rows), 2, squeeze=False).reshape(-1, 4) if st.name == "column"
                else fig.subplots(len(rows), 4, squeeze=False))
        if title:
            fig.suptitle(title)
    else:
        axes = np.asarray(ax, dtype=object).reshape(-1, 4) if np.size(np.asarray(ax, dtype=object)) % 4 == 0 \
            else None
        if axes is None or axes.shape[0] != len(rows):
            raise DiagnosticsError(f"diagnostics_figure draws into {len(rows)} rows of 4 axes (one row per "
                                   f"variant), got {np.size(np.asarray(ax, dtype=object))} axes")
        fig = axes[0, 0].figure
    t_m = np.asarray(mlp.t, float)
    pos_m = _positive(t_m)
    dims = sorted({i for m in modes for i in Mode.parse(m).support})[:MAX_DIRECTIONS]
    colors = [f"C{k}" for k in range(10)]
    for row, (name, traj) in enumerate(rows):
        t_o = np.asarray(traj.t, float)
        pos_o = _positive(t_o)
        ax_l, ax_p, ax_r, ax_a = axes[row]
        # 1. λ_β(t)/λ_β(0) per mode
        zero = []
        for k, m in enumerate(modes):
            c = colors[k % 10]
            meas, ok_m = _growth(None if mlp.lam is None else np.asarray(mlp.lam)[:, measured.index(m)])
            pred = None
            ok_p = True
            if traj.lam is not None and m in traj.modes:
                pred, ok_p = _growth(np.asarray(traj.lam)[:, list(traj.modes).index(m)])
            if not (ok_m and ok_p):
                zero.append(m)
                continue
            if pred is not None:
                ax_l.plot(t_o[pos_o], pred[pos_o], color=c, label=f"{mode_label(m)} {name}")
            if meas is not None:
                ax_l.plot(t_m[pos_m], meas[pos_m], color=c, ls="--", label=f"{mode_label(m)} measured")
        if zero:
            _note(ax_l, "λ(0) = 0, no growth ratio: " + ", ".join(zero), small)
        if mlp.lam is None:
            _note(ax_l, "no measured λ_β(t) in the simulation", small)
        ax_l.set_ylabel(f"{name}\n{label('lambda_growth')}")
        # 2. parts, leading mode
        lead = modes[int(np.argmax([abs(v[measured.index(m)]) for m in modes]))] if v.size == len(measured) \
            else modes[0]
        k_m = measured.index(lead)
        total_pred = None
        if traj.lam is not None and lead in traj.modes:
            total_pred, _ = _growth(np.asarray(traj.lam)[:, list(traj.modes).index(lead)])
        have_parts = False
        for p, part in enumerate(PARTS):
            c = colors[p]
            meas_arr = mlp.get(f"lambda_parts/{part}")
            meas, ok_m = _growth(None if meas_arr is None else np.asarray(meas_arr)[:, k_m])
            pred_arr = traj.get(f"lambda_parts/{part}")
            pred = total_pred
            if pred_arr is not None and lead in traj.modes:
                pred, _ = _growth(np.asarray(pred_arr)[:, list(traj.modes).index(lead)])
            if meas is not None:
                have_parts = True
                ax_p.plot(t_m[pos_m], meas[pos_m], color=c, ls="--", label=f"{part} measured")
            elif not ok_m:
                _note(ax_p, f"{part}: λ(0) = 0 for {lead}", small)
            if pred is not None and (pred_arr is not None or p == 0):
                ax_p.plot(t_o[pos_o], pred[pos_o], color=c if pred_arr is not None else variant_colour(name),
                          label=f"{part} {name}" if pred_arr is not None else f"all parts {name}")
        if not have_parts:
            _note(ax_p, "no measured lambda_parts in the simulation", small)
        ax_p.set_title(f"parts of $\\lambda_{{{mode_tex(lead)}}}$", fontsize=max(small, 8))
        # 3. r_i(t)
        flat_r = traj.r is not None and bool(np.all(np.asarray(traj.r) == 1.0))
        if flat_r:
            _note(ax_r, f"{name}: $r_i \\equiv 1$ (no direction law)", small)
        for k, i in enumerate(dims):
            c = colors[k % 10]
            if traj.r is not None and not flat_r and np.asarray(traj.r).shape[1] > i:
                ax_r.plot(t_o[pos_o], np.asarray(traj.r)[pos_o, i], color=c, label=f"$r_{{{i}}}$ {name}")
            if mlp.r is not None and np.asarray(mlp.r).shape[1] > i:
                ax_r.plot(t_m[pos_m], np.asarray(mlp.r)[pos_m, i], color=c, ls="--", label=f"$r_{{{i}}}$ measured")
        if mlp.r is None:
            _note(ax_r, "no measured $r_i(t)$ in the simulation", small)
        ax_r.set_title(label("r"), fontsize=max(small, 8))
        # 4. ⟨a²⟩
        a2 = mlp.get("a2")
        if a2 is not None:
            ax_a.plot(t_m[pos_m], np.asarray(a2, float)[pos_m], color="k", ls="--", label="measured")
        else:
            _note(ax_a, "no measured ⟨a²⟩ in the simulation", small)
        pred_a2 = traj.get("a2")
        text = name
        if pred_a2 is None and traj.get("s") is not None:
            pred_a2, text = traj.get("s"), f"{name} (s)"
        if pred_a2 is not None:
            ax_a.plot(t_o[pos_o], np.asarray(pred_a2, float)[pos_o], color=variant_colour(name), label=text)
        ax_a.set_title(label("a2"), fontsize=max(small, 8))
        for a in axes[row]:
            a.set_xscale("log")
            a.set_xlabel(label("t"))
            if a.get_legend_handles_labels()[0]:
                a.legend(fontsize=small - 1 if small < 8 else small)
    return fig


def save_diagnostics(mlp: Trajectory, variants: Mapping[str, Trajectory], folder: "str | Path", *,
                     modes: Sequence[str] | None = None, title: str = "", fmt: str = "png",
                     style: "str | Mapping[str, Any] | None" = None) -> Path:
    """Draw :func:`diagnostics_figure` and write ``folder/report_diagnostics.FMT`` (``png``, ``pdf``, ``svg``);
    returns the path."""
    fig = diagnostics_figure(mlp, variants, modes=modes, title=title, style=style)
    path = Path(folder) / f"report_diagnostics.{fmt}"
    write_bytes(path, figure_bytes(fig, fmt, style))
    return path
