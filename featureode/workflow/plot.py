"""Phase diagrams of a sweep (``featureode plot``, theory §7), from the rows of ``results.csv``, and its curves
(:func:`curves_figure`, ``--metric loss``: one line per run, from an ODE-only sweep's curve file or the runs' files).

Over two keys a heatmap of the seed mean of a metric, one cell per (x, y), annotated; a ratio metric (ODE/MLP) uses a
diverging colour map centred on 1 on a log scale symmetric about 1, and the contour of the region within ±10% of 1
is drawn along the cell edges; cells and colour bar are vector (a PDF embeds no image). Over one key a line with the seed
standard deviation as error bars (the ±10% band shaded for ratios). One panel per variant unless one is named;
several named variants of a line plot are overlaid on one axes, each in its colour of
:func:`featureode.export.style.variant_colour`. An axis may be several keys varied together (``[zip]``), written
``"target.expr,data.dim"``; a varied key that is a function of an axis (zipped with it) is accepted without being
named and shown with it (axis label and tick labels). Labels are mathtext (:func:`featureode.export.style.label`:
``network.richness`` → ``$\\gamma$``). Built on :class:`matplotlib.figure.Figure` (no pyplot state); ``figsize``,
``ax`` and ``style`` as for every figure of the package.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.collections import LineCollection

from featureode.config import suggest
from featureode.export.style import label, new_figure, save_figure, styled, variant_colour, vector_colorbar
from featureode.workflow.grid import Grid, slug
from featureode.workflow.sweeps import RESULT_COLUMNS, SweepError, mean_sd, read_results

#: Metrics ``plot`` can draw (columns of ``results.csv``); the ratios are centred on 1.
METRICS = ("t10_ratio", "t50_ratio", "log_rms", "t50", "t10", "mlp_t50", "mlp_t10", "t_max")
RATIOS = ("t10_ratio", "t50_ratio")


class PlotError(SweepError):
    """A plot request that the results cannot answer; the message names the key and the fix."""


def _keys(axis: str, columns: Sequence[str]) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in axis.split(","))
    for k in keys:
        if k not in columns:
            varied = [c for c in columns if c not in RESULT_COLUMNS]
            raise PlotError(f"{k!r} is not a varied key of these results" + suggest(k, varied))
    return keys


def _order(values: list[tuple]) -> list[tuple]:
    """Distinct axis values: sorted when all are numbers, else in order of first appearance."""
    distinct = list(dict.fromkeys(values))
    if all(isinstance(x, (int, float)) and x is not None for v in distinct for x in v):
        return sorted(distinct)
    return distinct


def _label(v: tuple) -> str:
    return ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)


def function_of(rows: Sequence[dict[str, Any]], keys: Sequence[str], key: str) -> bool:
    """Whether ``key`` takes one value for each value of ``keys`` over ``rows`` (e.g. zipped with them)."""
    seen: dict[tuple, str] = {}
    for r in rows:
        at, value = tuple(str(r[k]) for k in keys), str(r[key])
        if seen.setdefault(at, value) != value:
            return False
    return bool(keys)


def _variants(variant: "str | Sequence[str] | None") -> list[str] | None:
    if variant is None:
        return None
    return [variant] if isinstance(variant, str) else list(variant)


def select(rows: Sequence[dict[str, Any]], keys: Sequence[str], metric: str, variant: "str | Sequence[str] | None",
           where: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The finished rows to draw, by variant panel: ``status == "ok"``, matching ``where``, with the metric known;
    refuses results that vary a key that is neither in ``keys`` (the axis keys and those that are functions of an
    axis, :func:`function_of`) nor fixed by ``where``. ``variant``: one name or several (panels in that order)."""
    if not rows:
        raise PlotError("the results table is empty; run the sweep first")
    columns = list(rows[0])
    if metric not in METRICS:
        raise PlotError(f"unknown metric {metric!r}" + suggest(metric, list(METRICS)))
    for k, v in (where or {}).items():
        if k not in columns:
            raise PlotError(f"--where {k!r} is not a column of these results" + suggest(k, columns))
    picked = [r for r in rows if r["status"] == "ok" and all(_same(r[k], v) for k, v in (where or {}).items())]
    chosen = _variants(variant)
    if chosen is not None:
        known = sorted({r["variant"] for r in rows})
        for name in chosen:
            if name not in known:
                raise PlotError(f"unknown variant {name!r}" + suggest(name, known))
        picked = sorted((r for r in picked if r["variant"] in chosen), key=lambda r: chosen.index(r["variant"]))
    varied = [c for c in columns if c not in RESULT_COLUMNS]
    for k in varied:
        if k in keys or k in (where or {}):
            continue
        seen = sorted({str(r[k]) for r in picked})
        if len(seen) > 1:
            raise PlotError(f"the results also vary {k} ({', '.join(seen)}); put it on an axis or fix it with "
                            f"--where {k}={seen[0]}")
    if metric.startswith("mlp_"):  # the network's own times: the same in every variant's rows
        first = picked[0]["variant"] if picked else None
        panels = {"MLP": [r for r in picked if r["variant"] == first]}
    else:
        panels = {}
        for r in picked:
            panels.setdefault(r["variant"], []).append(r)
    panels = {k: v for k, v in panels.items() if any(_finite(r[metric]) for r in v)}
    if not panels:
        raise PlotError(f"no finished run has a value of {metric}" + (" (ODE-only sweeps have no ratios; use "
                                                                      "--metric t10)" if metric in RATIOS else ""))
    return panels


def _same(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _panel_axes(ax: Any, names: Sequence[str], what: str, size: tuple[float, float], nrow: int, ncol: int,
                **share: bool) -> tuple[Any, list[Any], bool]:
    """``(figure, one axes per panel, whether the figure is ours)``: a new constrained figure of ``size`` with an
    ``nrow × ncol`` grid (``share``: subplots' sharex/sharey; cells past the panels hidden), or the caller's ``ax``,
    which must hold one axes per panel (``what``, e.g. "this plot has", opens the one-line error)."""
    n = len(names)
    if ax is None:
        fig = new_figure(size, layout="constrained")
        axes = list(fig.subplots(nrow, ncol, squeeze=False, **share).ravel())
        for a in axes[n:]:
            a.set_visible(False)
        return fig, axes, True
    axes = list(np.ravel(np.asarray(ax, dtype=object)))
    if len(axes) != n:
        raise PlotError(f"{what} {n} panel{'s' if n > 1 else ''} ({', '.join(names)}); give ax as {n} axes, "
                        "or choose the variant(s) to draw")
    return axes[0].figure, axes, False


def phase_figure(rows: Sequence[dict[str, Any]], x: str, y: str | None = None, metric: str = "t10_ratio",
                 variant: "str | Sequence[str] | None" = None, where: dict[str, Any] | None = None, *,
                 overlay: bool | None = None, figsize: tuple[float, float] | None = None, ax: Any = None,
                 style: "str | Mapping[str, Any] | None" = None) -> Figure:
    """The phase diagram of ``metric`` over ``x`` (and ``y``): a heatmap, or a line with seed error bars.

    ``variant``: one name or several (default: every variant, one panel each); ``overlay`` (line plots): all
    variants on one axes, each in its colour (default: when several variants are named). ``style``: ``"report"``
    (default), ``"paper"``, ``"column"`` or ``rcParams``; ``figsize`` overrides its size; ``ax``: draw into the
    caller's axes (one per panel). Returns the figure drawn into."""
    columns = list(rows[0]) if rows else []
    xk = _keys(x, columns) if rows else ()
    yk = _keys(y, columns) if (rows and y) else ()
    fixed = [r for r in rows if all(_same(r[k], v) for k, v in (where or {}).items() if k in columns)]
    free = [c for c in columns if c not in RESULT_COLUMNS and c not in xk + yk and c not in (where or {})]
    dx = tuple(k for k in free if function_of(fixed, xk, k))
    dy = tuple(k for k in free if k not in dx and yk and function_of(fixed, yk, k))
    panels = select(rows, xk + yk + dx + dy, metric, variant, where)
    chosen = _variants(variant)
    if overlay is None:
        overlay = chosen is not None and len(chosen) > 1
    overlay = bool(overlay and not yk and len(panels) > 1)
    n = 1 if overlay else len(panels)
    ncol = min(n, 3)
    nrow = math.ceil(n / ncol)
    xs = _order([tuple(r[k] for k in xk) for rs in panels.values() for r in rs])
    ys = _order([tuple(r[k] for k in yk) for rs in panels.values() for r in rs]) if yk else []
    x_dep = {tuple(r[k] for k in xk): tuple(r[k] for k in dx) for rs in panels.values() for r in rs}
    y_dep = {tuple(r[k] for k in yk): tuple(r[k] for k in dy) for rs in panels.values() for r in rs}
    x_name = ", ".join([label(x)] + [label(k) for k in dx])
    y_name = ", ".join([label(y)] + [label(k) for k in dy]) if yk else label(metric)  # type: ignore[arg-type]  # metric is set when there is no y key
    with styled(style) as st:
        w = max(4.2, 0.9 * len(xs) + 2.2) if yk else 5.0
        h = max(3.2, 0.5 * len(ys) + 1.8) if yk else 3.8
        size = figsize or st.size((w * ncol, h * nrow + 0.4), aspect=(h * nrow + 0.4) / (w * ncol))
        fig, axes, own = _panel_axes(ax, list(panels), "this plot has", size, nrow, ncol, sharey=not yk)
        ratio = metric in RATIOS
        stats = {name: _cells(rs, xk, yk, metric) for name, rs in panels.items()}
        finite = [m for st_ in stats.values() for m, _, _ in st_.values() if m is not None]
        norm = _norm(finite, ratio)
        xlabels = [_label(v + x_dep.get(v, ())) for v in xs]
        if overlay:
            for k, (name, st_) in enumerate(stats.items()):
                _line(axes[0], st_, xs, xlabels, ratio, colour=variant_colour(name), name=name,
                      band=k == len(stats) - 1)
            axes[0].set(xlabel=x_name, ylabel=y_name)
            axes[0].legend()
        else:
            for a, (name, st_) in zip(axes, stats.items()):
                if yk:
                    _heatmap(fig, a, st_, xs, ys, norm, ratio, metric, xlabels,
                             [_label(v + y_dep.get(v, ())) for v in ys])
                else:
                    _line(a, st_, xs, xlabels, ratio, colour=variant_colour(name), band=True)
                a.set(xlabel=x_name, ylabel=y_name)
                a.set_title(name)
        if own:
            fixed_text = ", ".join(f"{label(k)} = {v}" for k, v in (where or {}).items())
            fig.suptitle(f"{label(metric)} (seed mean)" + (f", {fixed_text}" if fixed_text else "")
                         + ("; outlined: within ±10% of 1" if ratio and yk and not st.compact else "")
                         + ("; —: a curve ends before it crosses" if not st.compact and any(
                             m is None for st_ in stats.values() for m, _, _ in st_.values()) else ""))
    return fig


def _cells(rows: Sequence[dict[str, Any]], xk: Sequence[str], yk: Sequence[str], metric: str
           ) -> dict[tuple[tuple, tuple], tuple[float | None, float | None, int]]:
    """(x, y) → seed mean, sd and count of ``metric``."""
    groups: dict[tuple[tuple, tuple], list[float | None]] = {}
    for r in rows:
        groups.setdefault((tuple(r[k] for k in xk), tuple(r[k] for k in yk)), []).append(
            r[metric] if _finite(r[metric]) else None)
    return {k: mean_sd(v) for k, v in groups.items()}


def _norm(values: Sequence[float], ratio: bool) -> Normalize:
    """Log scale symmetric about 1 for ratios (1 is the centre of the diverging map); else linear or log."""
    if ratio:
        m = max([1.25] + [max(v, 1 / v) for v in values if v > 0])
        return LogNorm(vmin=1 / m, vmax=m)
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if lo > 0 and hi / lo > 10:
        return LogNorm(vmin=lo, vmax=hi)
    return Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1)


def _heatmap(fig: Figure, ax: Any, st: dict, xs: list[tuple], ys: list[tuple], norm: Normalize, ratio: bool,
             metric: str, xlabels: list[str], ylabels: list[str]) -> None:
    z = np.full((len(ys), len(xs)), np.nan)
    for (xv, yv), (m, _, _) in st.items():
        if m is not None:
            z[ys.index(yv), xs.index(xv)] = m
    cmap = "RdBu_r" if ratio else "viridis"
    # one vector quadrilateral per cell (an image would be embedded raster in a PDF): cell (i, j) spans
    # [j - 1/2, j + 1/2] × [i - 1/2, i + 1/2], as imshow placed it; edges in the face colour close the seams some
    # PDF viewers show between abutting cells; missing cells are not drawn (the grey axes shows)
    im = ax.pcolormesh(np.arange(len(xs) + 1) - 0.5, np.arange(len(ys) + 1) - 0.5, np.ma.masked_invalid(z),
                       cmap=cmap, norm=norm, shading="flat", edgecolors="face", linewidth=0.3, rasterized=False)
    ax.set(xlim=(-0.5, len(xs) - 0.5), ylim=(-0.5, len(ys) - 0.5))
    ax.set_facecolor("0.85")
    ax.set_xticks(range(len(xs)), xlabels)
    ax.set_yticks(range(len(ys)), ylabels)
    for i in range(len(ys)):
        for j in range(len(xs)):
            m, sd, _ = st.get((xs[j], ys[i]), (None, None, 0))
            text = "—" if m is None else f"{m:.3g}"
            if sd is not None:
                text += f"\n±{sd:.2g}"
            shade = im.cmap(norm(m)) if m is not None else (0.85, 0.85, 0.85, 1)
            dark = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.5
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    if ratio:
        edges = band_edges(z)
        if edges:
            ax.add_collection(LineCollection(edges, colors="k", linewidths=2.0, label="±10% of 1"))
    bar = vector_colorbar(fig, im, ax=ax, shrink=0.9)
    bar.set_label(label(metric))
    if ratio:
        fine = (0.9, 1.1) if norm.vmax < 1.6 else ()  # type: ignore[operator]  # the norm is built with both limits
        ticks = [t for t in (0.25, 0.5, 0.67, 0.8, *fine, 1.0, 1.25, 1.5, 2.0, 4.0) if norm.vmin <= t <= norm.vmax]
        bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
        bar.minorticks_off()


def band_edges(z: np.ndarray, lo: float = 0.9, hi: float = 1.1) -> list[list[tuple[float, float]]]:
    """The contour of the region ``lo ≤ z ≤ hi`` on a grid of cells centred on integer points (``z[i, j]`` at
    x = j, y = i): the cell edges between a cell inside and one outside (or the border), as line segments."""
    inside = np.isfinite(z) & (z >= lo) & (z <= hi)
    ny, nx = inside.shape
    inside_at = lambda i, j: 0 <= i < ny and 0 <= j < nx and bool(inside[i, j])  # noqa: E731
    segs = []
    for i, j in zip(*np.nonzero(inside)):
        x0, x1, y0, y1 = j - 0.5, j + 0.5, i - 0.5, i + 0.5
        for di, dj, seg in ((-1, 0, [(x0, y0), (x1, y0)]), (1, 0, [(x0, y1), (x1, y1)]),
                            (0, -1, [(x0, y0), (x0, y1)]), (0, 1, [(x1, y0), (x1, y1)])):
            if not inside_at(i + di, j + dj):
                segs.append(seg)
    return segs


def _line(ax: Any, st: dict, xs: list[tuple], xlabels: list[str], ratio: bool, colour: str | None = None,
          name: str | None = None, band: bool = True) -> None:
    numeric = len(xs[0]) == 1 and all(isinstance(v[0], (int, float)) for v in xs)
    pos = [v[0] for v in xs] if numeric else list(range(len(xs)))
    got = [(p, *st[(v, ())]) for p, v in zip(pos, xs) if st.get((v, ()), (None,))[0] is not None]
    if got:
        p, m, sd, _ = zip(*got)
        ax.errorbar(np.asarray(p, float), np.asarray(m, float), yerr=np.array([s or 0.0 for s in sd]), marker="o",
                    capsize=3, lw=1.5, color=colour, label=name)
    if numeric and min(pos) > 0 and max(pos) / min(pos) > 20:
        ax.set_xscale("log")
        ax.minorticks_off()
    ax.set_xticks(pos, xlabels)
    if ratio and band:
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhspan(0.9, 1.1, color="0.5", alpha=0.15, lw=0, label="±10%")
        ax.legend(fontsize=8)


#: Curves ``plot`` can draw from a sweep's curves (:func:`featureode.workflow.table.load_sweep`): ``L(t)/L(0)`` and
#: the in-support loss, one line per run.
CURVE_METRICS = {"loss": "ratio", "in_support_loss": "in_support_loss"}


def curves_figure(out: "str | Path", x: str, quantity: str = "loss", variant: "str | Sequence[str] | None" = None,
                  where: dict[str, Any] | None = None, *, figsize: tuple[float, float] | None = None,
                  ax: Any = None, style: "str | Mapping[str, Any] | None" = None) -> Figure:
    """The curves of the sweep in ``out`` (``featureode plot DIR --metric loss --x KEY``): ``quantity`` (``"loss"``,
    ``L(t)/L(0)``, or ``"in_support_loss"``) against ``t``, one line per run, coloured by its value of the varied
    key ``x``; one panel per ODE variant (and one for the MLP of a trained sweep). Read through
    :func:`~featureode.workflow.table.load_sweep`: an ODE-only sweep's one curve file or each run's result files.
    ``where``: keep the runs with these key values; ``variant``: the panels to draw (default every one);
    ``figsize``, ``ax`` (the caller's axes, one per panel; no title is set then) and ``style`` as for
    :func:`phase_figure`."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable

    from featureode.workflow.table import load_sweep

    if quantity not in CURVE_METRICS:
        raise PlotError(f"unknown curve {quantity!r}" + suggest(quantity, list(CURVE_METRICS)))
    frame = load_sweep(out, quantities=[CURVE_METRICS[quantity]])
    columns = list(frame.columns)
    xk = _keys(x, [c for c in columns if c not in ("kind", "name", "t", "quantity", "component", "value")])
    for k, v in (where or {}).items():
        if k not in columns:
            raise PlotError(f"--where {k!r} is not a varied key of this sweep" + suggest(k, columns))
        frame = frame[[_same(a, v) for a in frame[k]]]
    names = list(dict.fromkeys(frame["name"]))
    chosen = _variants(variant)
    if chosen is not None:
        for name in chosen:
            if name not in names:
                raise PlotError(f"unknown variant {name!r}" + suggest(name, names))
        names = chosen
    if frame.empty or not names:
        raise PlotError(f"no curve to draw in {out}" + (" for --where " + ", ".join(
            f"{k}={v}" for k, v in where.items()) if where else "; run the sweep first"))
    values = _order([tuple(v) for v in frame[list(xk)].itertuples(index=False)])
    numeric = len(xk) == 1 and all(isinstance(v[0], (int, float)) for v in values)
    if numeric:
        lo, hi = float(values[0][0]), float(values[-1][0])
        norm: Normalize = LogNorm(lo, hi) if lo > 0 and hi / lo > 20 else Normalize(lo, hi if hi > lo else lo + 1)
        colour_of = {v: norm(float(v[0])) for v in values}
    else:
        norm = Normalize(0, max(1, len(values) - 1))
        colour_of = {v: norm(k) for k, v in enumerate(values)}
    cmap = colormaps["viridis"]
    n = len(names)
    ncol = min(n, 3)
    nrow = math.ceil(n / ncol)
    with styled(style) as st:
        size = figsize or st.size((4.6 * ncol + 1.0, 3.6 * nrow + 0.4),
                                  aspect=(3.6 * nrow + 0.4) / (4.6 * ncol + 1))
        fig, axes, own = _panel_axes(ax, list(names), "these curves have", size, nrow, ncol, sharex=True, sharey=True)
        for a, name in zip(axes, names):
            part = frame[frame["name"] == name]
            segments, colours = [], []
            for _, curve in part.groupby(["run", "kind"], sort=False):
                curve = curve[(curve["t"] > 0) & (curve["value"] > 0)]
                if len(curve) < 2:
                    continue
                segments.append(np.column_stack([curve["t"].to_numpy(float), curve["value"].to_numpy(float)]))
                colours.append(cmap(colour_of[tuple(curve[list(xk)].iloc[0])]))
            if segments:
                a.add_collection(LineCollection(segments, colors=colours, linewidths=1.0, alpha=0.8))
                a.set_xscale("log")
                a.set_yscale("log")
                a.autoscale()
            a.set_title(name)
            a.set(xlabel=label("t"), ylabel=label("loss") if quantity == "loss" else "in-support loss")
        bar = vector_colorbar(fig, ScalarMappable(norm=norm, cmap=cmap), ax=axes[:n], label=label(x))
        if not numeric:
            bar.set_ticks(range(len(values)), labels=[_label(v) for v in values])
        if own:
            fixed_text = ", ".join(f"{label(k)} = {v}" for k, v in (where or {}).items())
            fig.suptitle(f"{'loss' if quantity == 'loss' else 'in-support loss'} curves, one per run"
                         + (f", {fixed_text}" if fixed_text else ""))
    return fig


def natural_plots(out: "str | Path", grid: Grid, ode_only: bool = False, limit: int = 12, fmt: str = "png",
                  style: "str | Mapping[str, Any] | None" = None) -> list[Path]:
    """``sweep --plot``: the phase diagrams of a finished sweep in ``out/plots/``, of the t10 and t50 ratios (the
    ODE's t10 and t50 when ODE-only): a line over the only axis, else a heatmap with the last axis along x and the one
    before along y (a zipped axis counts as one), one figure per value of any further axes (at most ``limit``)."""
    axes = [ax for ax in grid.axes if len(ax.values) > 1]
    if not axes:
        return []
    rows = read_results(Path(out) / "results.csv")
    x, y = axes[-1].label, (axes[-2].label if len(axes) > 1 else None)
    others = axes[:-2]
    combos = [dict(zip([k for ax in others for k in ax.keys], [v for vals in combo for v in vals]))
              for combo in itertools.product(*(ax.values for ax in others))][:limit]
    made = []
    for metric in (("t10", "t50") if ode_only else ("t10_ratio", "t50_ratio")):
        for where in combos:
            suffix = "".join(f"_{k.split('.')[-1]}{slug(v)}" for k, v in where.items())
            try:
                fig = phase_figure(rows, x, y, metric, where=where or None, style=style)
            except PlotError:  # nothing finished to draw at this combination
                continue
            made.append(save_figure(fig, Path(out) / "plots" / f"{metric}{suffix}.{fmt}", fmt, style))
    return made
