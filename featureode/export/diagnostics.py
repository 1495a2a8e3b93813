"""The closure diagnostics figure (``report_diagnostics.png``): what each variant predicts against what the network
measured, on the loss figure's logarithmic time axis.

One panel per measured quantity, every variant overlaid on it (solid, in its colour of
:func:`featureode.export.style.variant_colour`) against the measurement (dashed, black), so the figure's size
does not grow with the number of variants; panels in order (:func:`diagnostics_panels`):

1. ``λ_β(t)/λ_β(0)``, one panel per target mode (measured: the eNTK Rayleigh quotient);
2. the same per part (readout, first-layer weights, bias; theory §6 ``lambda_parts``) for the target's leading
   mode, each part over its own value at ``t = 0`` — the prediction of a variant for a part is its
   ``lambda_parts/PART`` array when it has one, else its total growth ``λ_β(t)/λ_β(0)`` (every built-in closure
   scales all parts of a mode alike); one panel saying so when the simulation measured no parts;
3. ``r_i(t)``, one panel per direction of the target's support (at most four; a variant whose ``r_i ≡ 1`` — lazy,
   or an eigenvalue law — is named in the panel instead of drawn);
4. ``⟨a²⟩(t)/⟨a²⟩(0)``: measured (``a2``) against the variant's ``a2`` (or ``s``, the predicted readout growth
   of the scale factor, when the variant has one).

A mode with ``λ_β(0) = 0`` (no growth ratio exists) is named in its panel; absent measurements are said in the
panel. One key for the whole figure, outside every axes (below them): variant → colour, and the line styles
(solid: ODE, dashed: measured). Four panels a row (``report``, ``paper``), two in the ``column`` style. The figure
uses matplotlib's object API (no pyplot state).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from featureode.core.errors import FeatureODEError
from featureode.calculus.hermite import Mode
from featureode.kernel.parametrization import PARTS
from featureode.export.report import _positive
from featureode.export.style import (MLP_COLOUR, PAPER_MIN_FONT_PT, figure_bytes, label, mode_tex, new_figure,
                                     styled, variant_colour)
from featureode.results.trajectory import Trajectory, write_bytes

MAX_DIRECTIONS = 4
#: Panel height (inches) of a row in each style, and the height of the key and title below/above the panels.
_ROW_HEIGHT = {"report": 2.8, "paper": 1.45, "column": 1.35}


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


def _note(ax: Any, text: str, small: float) -> None:
    ax.text(0.03, 0.97, text, transform=ax.transAxes, va="top", ha="left", fontsize=small, color="0.3", wrap=True)


def _modes(mlp: Trajectory, modes: Sequence[str] | None) -> list[str]:
    measured = list(mlp.modes)
    v = np.asarray(mlp.target, float)
    if modes is None:
        modes = [m for m, vb in zip(measured, v) if vb != 0] if v.size == len(measured) else measured
    missing = [m for m in modes if m not in measured]
    if missing:
        raise DiagnosticsError(f"diagnostics: mode(s) {', '.join(missing)} not measured by the simulation; "
                               f"measured modes: {', '.join(measured)}")
    return list(modes)


def _has_parts(mlp: Trajectory, variants: Mapping[str, Trajectory]) -> bool:
    return any(tr.get(f"lambda_parts/{p}") is not None for tr in (mlp, *variants.values()) for p in PARTS)


def diagnostics_panels(mlp: Trajectory, modes: Sequence[str] | None = None,
                       variants: Mapping[str, Trajectory] | None = None) -> list[tuple[str, str]]:
    """The panels of :func:`diagnostics_figure`, in order, as ``(kind, item)``: ``("mode", β)`` per mode,
    ``("part", PART)`` per part of the leading mode (one ``("part", "")`` when neither the simulation nor a variant
    has ``lambda_parts``), ``("r", i)`` per direction of the support (at most four) and ``("a2", "")`` — as many
    axes as ``ax=`` takes."""
    shown = _modes(mlp, modes)
    dims = sorted({i for m in shown for i in Mode.parse(m).support})[:MAX_DIRECTIONS]
    parts = list(PARTS) if _has_parts(mlp, variants or {}) else [""]
    return ([("mode", m) for m in shown] + [("part", p) for p in parts] + [("r", str(i)) for i in dims]
            + [("a2", "")])


def diagnostics_figure(mlp: Trajectory, variants: Mapping[str, Trajectory], *,
                       modes: Sequence[str] | None = None, title: str = "",
                       figsize: tuple[float, float] | None = None, ax: Any = None,
                       style: "str | Mapping[str, Any] | None" = None) -> Figure:
    """The diagnostics figure for one run: ``mlp`` is the network's trajectory (``lam``, ``r``, and when the
    simulator records them ``a2`` and ``lambda_parts/PART``), ``variants`` the ODE trajectories by name (``lam``,
    ``r``, optionally ``a2``/``s``/``lambda_parts/PART``, e.g. ``ODEResult.variants``), ``modes`` the target modes
    to show (default: the target's support, ``v_β ≠ 0``). Raises :class:`DiagnosticsError` for no variants or a
    mode that the simulation did not measure.

    ``style`` (``"report"``, ``"paper"``, ``"column"`` or ``rcParams``) and ``figsize`` as for
    :func:`featureode.export.report.report_figure`; ``ax``: the caller's axes, one per panel of
    :func:`diagnostics_panels` (the key is then drawn beside the last one)."""
    with styled(style) as st:
        return _diagnostics(mlp, variants, modes, title, figsize, ax, st)


def _diagnostics(mlp: Trajectory, variants: Mapping[str, Trajectory], modes: Sequence[str] | None, title: str,
                 figsize: tuple[float, float] | None, ax: Any, st: Any) -> Figure:
    from matplotlib.lines import Line2D

    if not variants:
        raise DiagnosticsError("the diagnostics figure needs at least one ODE variant")
    shown = _modes(mlp, modes)
    panels = diagnostics_panels(mlp, shown, variants)
    small = PAPER_MIN_FONT_PT if st.compact else 7  # notes and the key
    ncols = 2 if st.name == "column" else 4
    if ax is None:
        nrows = math.ceil(len(panels) / ncols)
        row_h = _ROW_HEIGHT.get(st.name, _ROW_HEIGHT["report"])
        extra = (0.55 if st.compact else 0.8) + (0.25 if title else 0.0)
        if st.compact:  # at most 8 in tall (0.8 of a page), however many modes and directions
            row_h = min(row_h, (8.0 - extra) / nrows)
        size = figsize or st.size((15, row_h * nrows + extra), aspect=(row_h * nrows + extra) / (st.width or 15))
        fig = new_figure(size, layout="constrained")
        grid = fig.subplots(nrows, ncols, squeeze=False).ravel()
        for spare in grid[len(panels):]:
            spare.set_visible(False)
        axes = list(grid[:len(panels)])
        if title:
            fig.suptitle(title)
    else:
        axes = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(axes) != len(panels):
            raise DiagnosticsError(f"diagnostics_figure draws into {len(panels)} axes (diagnostics_panels: "
                                   f"{', '.join(k + (f' {i}' if i else '') for k, i in panels)}), got {len(axes)}")
        fig = axes[0].figure
    measured = list(mlp.modes)
    v = np.asarray(mlp.target, float)
    lead = shown[int(np.argmax([abs(v[measured.index(m)]) for m in shown]))] if v.size == len(measured) \
        else shown[0]
    t_m = np.asarray(mlp.t, float)
    pos_m = _positive(t_m)

    def meas_line(a: Any, y: np.ndarray | None, text: str) -> None:
        if y is not None:
            a.plot(t_m[pos_m], np.asarray(y, float)[pos_m], color=MLP_COLOUR, ls="--", label=f"{text} measured",
                   zorder=3)

    def pred_line(a: Any, traj: Trajectory, name: str, y: Any, text: str) -> None:
        if y is not None:
            t_o = np.asarray(traj.t, float)
            keep = _positive(t_o)
            a.plot(t_o[keep], np.asarray(y, float)[keep], color=variant_colour(name), label=f"{text} {name}")

    def growth_of(traj: Trajectory, key: str, mode: str) -> tuple[np.ndarray | None, bool]:
        arr = traj.get(key)
        if arr is None or mode not in traj.modes:
            return None, True
        return _growth(np.asarray(arr)[:, list(traj.modes).index(mode)])

    for a, (kind, item) in zip(axes, panels):
        notes: list[str] = []
        if kind == "mode":
            tex = mode_tex(item)
            meas, ok = growth_of(mlp, "lambda", item)
            if mlp.lam is None:
                notes.append("no measured λ_β(t) in the simulation")
            zero = not ok
            for name, traj in variants.items():
                pred, ok_p = growth_of(traj, "lambda", item)
                zero = zero or not ok_p
                if ok and ok_p:
                    pred_line(a, traj, name, pred, f"${tex}$")
            if zero:
                notes.append(f"λ(0) = 0, no growth ratio: {item}")
            else:
                meas_line(a, meas, f"${tex}$")
            a.set_title(rf"$\lambda_{{{tex}}}(t)/\lambda_{{{tex}}}(0)$")
        elif kind == "part":
            tex = mode_tex(lead)
            if not item:
                notes.append("no measured lambda_parts in the simulation")
                a.set_title(rf"parts of $\lambda_{{{tex}}}$")
            else:
                meas, ok = growth_of(mlp, f"lambda_parts/{item}", lead)
                if not ok:
                    notes.append(f"{item}: λ(0) = 0 for {lead}")
                if mlp.get(f"lambda_parts/{item}") is None:
                    notes.append(f"no measured {item} part in the simulation")
                meas_line(a, meas, item)
                for name, traj in variants.items():
                    own = traj.get(f"lambda_parts/{item}") is not None
                    pred, _ = growth_of(traj, f"lambda_parts/{item}" if own else "lambda", lead)
                    pred_line(a, traj, name, pred, item if own else "all parts")
                a.set_title(rf"$\lambda_{{{tex}}}$, {item} part")
        elif kind == "r":
            i = int(item)
            flat = [name for name, traj in variants.items()
                    if traj.r is not None and bool(np.all(np.asarray(traj.r) == 1.0))]
            for name, traj in variants.items():
                if name not in flat and traj.r is not None and np.asarray(traj.r).shape[1] > i:
                    pred_line(a, traj, name, np.asarray(traj.r)[:, i], f"$r_{{{i}}}$")
            if mlp.r is not None and np.asarray(mlp.r).shape[1] > i:
                meas_line(a, np.asarray(mlp.r)[:, i], f"$r_{{{i}}}$")
            if mlp.r is None:
                notes.append("no measured $r_i(t)$ in the simulation")
            if flat:
                notes.append(f"$r_i \\equiv 1$: {', '.join(flat)}")
            a.set_title(f"$r_{{{i}}}(t)$")
        else:
            a2 = mlp.get("a2")
            if a2 is None:
                notes.append("no measured ⟨a²⟩ in the simulation")
            meas_line(a, a2, "⟨a²⟩")
            for name, traj in variants.items():
                pred = traj.get("a2")
                pred_line(a, traj, name, pred if pred is not None else traj.get("s"),
                          "⟨a²⟩" if pred is not None else "s")
            a.set_title(label("a2"))
        if notes:
            _note(a, "\n".join(notes), small)
        a.set_xscale("log")
    for k, a in enumerate(axes):  # the time label under the lowest panel of each column of the grid
        if ax is not None or k + ncols >= len(axes):
            a.set_xlabel(label("t"))
    # one key for the figure: variant → colour (solid: ODE), dashed: measured
    # (a variant without λ_β(t) draws nothing here: the mean-field flows follow neurons, not eigenvalues)
    handles = [Line2D([], [], color=variant_colour(n), label=f"ODE {n}") for n, traj in variants.items()
               if traj.lam is not None]
    handles.append(Line2D([], [], color=MLP_COLOUR, ls="--", label="measured (MLP)"))
    if ax is None:
        width_in = fig.get_figwidth()
        per_row = max(1, min(len(handles), int(width_in / (1.45 if st.compact else 1.9))))
        fig.legend(handles=handles, loc="outside lower center", ncols=per_row,
                   fontsize=small if st.compact else 9, frameon=False)
    else:
        axes[-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=small,
                        frameon=False)
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
