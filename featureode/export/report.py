"""The comparison report of one config (theory §5–6): :class:`Report`, built from an
:class:`~featureode.results.trajectory.ODEResult` and the network's :class:`~featureode.results.trajectory.Trajectory`, and its three
files ``report.json``, ``report.md`` and ``report.png``.

For each ODE variant against the MLP (no constant is fitted): ``t50``, ``t10``, the ratios ODE/MLP (a
:class:`~featureode.results.metrics.Ratio`: exact, or a bound where one curve ends before it crosses) and ``log_rms``, on the
test loss and on the in-support loss ``Σ_β (v_β − f_β)² / Σ v_β²`` (the target's modes only; on the target basis the
ODE's loss is an in-support loss by construction).

The figure is built on :class:`matplotlib.figure.Figure` (no pyplot, no global backend): loss curves with the 0.5
and 0.1 levels and each curve's ``t50``/``t10`` marked; mode coefficients ``f_β(t)`` with the targets ``v_β``;
eigenvalues ``λ_β(t)``. One colour per variant (the MLP is black) and one line style per mode, in every panel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from featureode.core.errors import FeatureODEError
from featureode.config import Config, require_config
from featureode.kernel.parametrization import parametrization_of
from featureode.kernel.population import has_exact_population_loss
from featureode.results.metrics import CurveMetrics, crossing_time, curve_metrics, in_support_loss
from featureode.export.style import (  # noqa: F401  (variant_colours re-exported)
    MLP_COLOUR,
    MLP_IN_SUPPORT_COLOUR,
    PAPER_MIN_FONT_PT,
    figure_bytes,
    label,
    mode_label,
    mode_tex,
    new_figure,
    styled,
    variant_colour,
    variant_colours,
)
from featureode.results.trajectory import ODEResult, Trajectory, json_ready, write_bytes, write_json, write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Line style of the k-th mode shown (the same in every panel).
MODE_STYLES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 2)))
LEVELS = {"t50": 0.5, "t10": 0.1}


class ReportError(FeatureODEError, ValueError):
    """A report request that cannot be met (an unknown figure variant); the message names the valid choices."""


@dataclass(frozen=True)
class MLPSummary:
    """The network's curves as reported: ``loss`` is ``L/L(0)`` of the test loss, or of the exact population loss
    when the run recorded it (``[training] exact_loss``; ``curve`` says which, and ``test_t50``/``test_t10`` keep the
    test set's crossings either way); ``in_support_loss`` as measured; crossings of both; how the run ended."""

    t: np.ndarray
    loss: np.ndarray
    in_support_loss: np.ndarray
    t50: float | None
    t10: float | None
    in_support_t50: float | None
    in_support_t10: float | None
    complete: bool
    reached_t: float
    error: str | None = None
    curve: str = "test loss"
    test_t50: float | None = None
    test_t10: float | None = None

    @classmethod
    def of(cls, mlp: Trajectory) -> "MLPSummary":
        """The summary of a simulation (``kind = "mlp"``): against its exact population loss when it has one."""
        t = np.asarray(mlp.t, float)
        test = mlp.ratio
        exact = (mlp.arrays or {}).get("loss_exact_ratio")
        loss = test if exact is None else np.asarray(exact, float)
        insup = np.asarray(mlp.in_support_loss if mlp.in_support_loss is not None  # type: ignore[type-var]  # numpy's stub refuses the builtin float as dtype
                           else in_support_loss(mlp.f, mlp.target), float)  # type: ignore[arg-type]  # a simulation without its in-support loss stores f
        return cls(t, loss, insup, crossing_time(t, loss, 0.5), crossing_time(t, loss, 0.1),
                   crossing_time(t, insup / insup[0], 0.5), crossing_time(t, insup / insup[0], 0.1),
                   mlp.status.complete, mlp.end_t, mlp.status.error,
                   "test loss" if exact is None else "exact population loss",
                   crossing_time(t, test, 0.5), crossing_time(t, test, 0.1))

    def __repr__(self) -> str:
        return (f"MLPSummary({len(self.t)} times to t = {self.reached_t:.4g}: t50 = {_num(self.t50, 4)}, "
                f"t10 = {_num(self.t10, 4)}; {self.status})")

    @property
    def status(self) -> str:
        """``"ok"``, or how the run ended early."""
        if self.error is not None:
            return self.error
        return "ok" if self.complete else f"stopped early at t = {self.reached_t:.4g}"

    def to_json(self) -> dict[str, Any]:
        """``report.json``'s ``"mlp"`` entry (theory §6 keys plus in-support crossings and the run's end)."""
        out = {"t": self.t, "loss": self.loss, "in_support_loss": self.in_support_loss, "t50": self.t50,
               "t10": self.t10, "in_support_t50": self.in_support_t50, "in_support_t10": self.in_support_t10,
               "complete": self.complete, "reached_t": self.reached_t, "status": self.status}
        if self.curve != "test loss":
            out.update({"curve": self.curve, "test_t50": self.test_t50, "test_t10": self.test_t10})
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class VariantReport:
    """One ODE variant against the MLP: its normalised loss curve, the metrics on the test loss and on the
    in-support loss (``None`` when the variant produced no curve), and its error if it failed."""

    name: str
    t: np.ndarray
    loss: np.ndarray
    metrics: CurveMetrics | None
    in_support: CurveMetrics | None
    error: str | None = None

    def __repr__(self) -> str:
        if self.metrics is None:
            return f"VariantReport({self.name!r}: no curve; {self.status})"
        m = self.metrics
        return (f"VariantReport({self.name!r}: t50 = {_num(m.t50, 4)}, t10 = {_num(m.t10, 4)}, t50 ratio "
                f"{m.t50_ratio.text()}, t10 ratio {m.t10_ratio.text()}, log-RMS {_num(m.log_rms)})")

    @property
    def status(self) -> str:
        """``"ok"`` or the error."""
        return "ok" if self.error is None else self.error

    def to_json(self) -> dict[str, Any]:
        """``report.json``'s ``variants[NAME]`` entry (theory §6 keys, ratio ranges, ``in_support``)."""
        if self.metrics is None:
            out: dict[str, Any] = {"t": [], "loss": [], "t50": None, "t10": None, "t50_ratio": None,
                                   "t10_ratio": None, "log_rms": None, "in_support": {}}
        else:
            ins = self.in_support.to_json() if self.in_support is not None else {}
            out = {"t": self.t, "loss": self.loss, **self.metrics.to_json(), "in_support": ins}
        out["status"] = self.status
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class Report:
    """The comparison of every ODE variant of ``config`` with its MLP (theory §5), with the results it was built
    from (``ode``, ``network``) for the figure."""

    config: Config
    modes: tuple[str, ...]
    mlp: MLPSummary
    variants: Mapping[str, VariantReport]
    ode: ODEResult
    network: Trajectory
    wall_s: float | None = None

    @property
    def digest(self) -> str:
        """The digest of the whole config (the key of a cached ``report.json``)."""
        return self.config.digest()

    @property
    def status(self) -> str:
        """``"ok"``, or what went wrong (the MLP's early stop, each failed variant)."""
        issues = ([] if self.mlp.status == "ok" else [f"MLP {self.mlp.status}"]) + [
            f"{name}: {v.error}" for name, v in self.variants.items() if v.error is not None]
        return "ok" if not issues else "; ".join(issues)

    def to_json(self) -> dict[str, Any]:
        """``report.json`` in strict JSON form (theory §6: ``mlp``, ``variants``; plus ``config``, ``modes``,
        ``digest``, ``wall_s``, ``status`` and ``parametrization``: its name and the per-group learning rates
        ``lr_scale`` ``{a, w, b}`` that the network trained with and every ODE constant was derived under)."""
        par = parametrization_of(self.config)
        return json_ready({"config": self.config.to_dict(), "modes": list(self.modes), "mlp": self.mlp.to_json(),
                           "variants": {k: v.to_json() for k, v in self.variants.items()}, "digest": self.digest,
                           "wall_s": self.wall_s, "status": self.status,
                           "parametrization": {"name": par.name, "lr_scale": par.rates.as_dict()}})

    def markdown(self) -> str:
        """``report.md``: the metrics table."""
        return report_markdown(self)

    def figure(self, variant: "str | Sequence[str] | None" = None, **kw: Any) -> "Figure":
        """The report's figure (:func:`report_figure`; ``figsize``, ``ax``, ``style`` passed on)."""
        return report_figure(self, variant, **kw)

    def write(self, out: "str | Path", variant: "str | Sequence[str] | None" = None, fmt: str = "png",
              style: "str | Mapping[str, Any] | None" = None) -> None:
        """Write ``out/report.json``, ``report.md`` and the figure ``report.FMT`` (``png``, ``pdf`` or ``svg``;
        atomically)."""
        out = Path(out)
        from featureode.core.provenance import provenance

        write_json(out / "report.json", {**self.to_json(), "provenance": provenance()})
        write_text(out / "report.md", report_markdown(self, figure=f"report.{fmt}"))
        write_bytes(out / f"report.{fmt}", figure_bytes(self.figure(variant, style=style), fmt, style))

    def __repr__(self) -> str:
        each = "; ".join(f"{k} t10 ratio {v.metrics.t10_ratio.text()}" if v.metrics is not None else f"{k} failed"
                         for k, v in self.variants.items())
        return (f"Report({self.config.target.expr!r}, d = {self.config.data.dim}, "
                f"γ = {self.config.network.richness:g}: MLP t10 = {_num(self.mlp.t10, 4)}; {each}; {self.status})")


def build_report(cfg: Config, ode: ODEResult, mlp: Trajectory, wall_s: float | None = None) -> Report:
    """The :class:`Report` of the ODE variants ``ode`` against the simulation ``mlp`` of ``cfg``."""
    cfg = require_config(cfg, "build_report", ReportError)
    summary = MLPSummary.of(mlp)
    variants: dict[str, VariantReport] = {}
    for name, tr in ode.variants.items():
        if len(tr.t) < 2:
            variants[name] = VariantReport(name, np.zeros(0), np.zeros(0), None, None,
                                           tr.status.error or "no solution")
            continue
        met = curve_metrics(tr.t, tr.loss, summary.t, summary.loss)
        # the ODE's loss on the target's modes only (on an extended basis the other modes are left out, as in the
        # MLP's in-support loss)
        ode_insup = tr.in_support_loss if tr.in_support_loss is not None else in_support_loss(tr.f, ode.target)  # type: ignore[arg-type]  # an ODE trajectory always stores f
        ins = curve_metrics(tr.t, ode_insup, summary.t, summary.in_support_loss)
        variants[name] = VariantReport(name, np.asarray(tr.t, float), tr.ratio, met, ins,
                                       tr.status.error)
    return Report(cfg, tuple(ode.modes), summary, variants, ode, mlp, wall_s)


# ----------------------------------------------------------------------------------------------------------------
# report.md
# ----------------------------------------------------------------------------------------------------------------
def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}g}"


def _rates_lines(cfg: Config) -> list[str]:
    """The per-group learning rates, when they are not plain SGD (one line; none otherwise)."""
    rates = parametrization_of(cfg).rates
    if rates.is_default:
        return []
    frozen = [name for name, k in (("readout", "a"), ("first layer", "w"), ("bias", "b")) if getattr(rates, k) == 0]
    return [f"Per-group learning rates (`[training] lr_scale`): {rates.text()}"
            + (f" ({', '.join(frozen)} frozen)" if frozen else "")
            + "; the kernel, the closures' constants and the MLP's step all use them."]


#: a test set smaller than this is flagged in ``report.md`` for targets of degree ≥ 3
PRECISE_TEST_SET = 100_000


def _test_set_lines(cfg: Config) -> list[str]:
    """A note on the MLP's crossing times when the target has degree ≥ 3 and the test set is small (none
    otherwise): their squared residuals have heavy tails, so a mean over 20 000 points is off by several percent
    (``docs/validation/test_set_size.md``)."""
    degree = max((m.degree for m in cfg.target_obj(cfg.spectrum()).modes), default=0)
    n = cfg.training.n_test
    if degree < 3 or n >= PRECISE_TEST_SET or cfg.training.exact_loss:
        return []
    fix = ("`[training] exact_loss = true` measures the same training's loss exactly (relu and erf), and a larger "
           "`[training] n_test` (e.g. 320000) more precisely" if has_exact_population_loss(cfg.network.activation)
           else "A larger `[training] n_test` (e.g. 320000) measures the same training more precisely")
    return [f"The MLP's loss is measured on {n} test points. For a target of degree {degree} that makes its t10 "
            f"uncertain by several percent (1–10% at 20 000 points, both ways; docs/validation/test_set_size.md). "
            f"{fix}."]


def report_markdown(report: Report, figure: str = "report.png") -> str:
    """The metrics table of ``report.md`` (``figure``: the figure file it shows)."""
    cfg, m = report.config, report.mlp
    lines = [f"# featureode compare: `{cfg.target.expr}`, d = {cfg.data.dim}, γ = {cfg.network.richness}, "
             f"{cfg.network.activation}, N = {cfg.network.width}",
             "",
             f"MLP ({m.curve}): t50 = {_num(m.t50, 4)}, t10 = {_num(m.t10, 4)}; "
             + ("" if m.curve == "test loss" else f"test loss: t50 = {_num(m.test_t50, 4)}, "
                f"t10 = {_num(m.test_t10, 4)}; ")
             + "in-support loss: "
             f"t50 = {_num(m.in_support_t50, 4)}, t10 = {_num(m.in_support_t10, 4)}"
             + ("" if m.complete else f" — **MLP stopped early at t = {m.reached_t:.4g}**"),
             "",
             "No constant below is fitted: every ODE constant is derived from the network's parametrisation.",
             *_rates_lines(cfg),
             *_test_set_lines(cfg),
             "",
             "| variant | t50 | t10 | t50 ratio | t10 ratio | log-RMS | t50 ratio (in-support) | "
             "t10 ratio (in-support) | log-RMS (in-support) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, v in report.variants.items():
        if v.metrics is None:
            lines.append(f"| {name} | — | — | — | — | — | — | — | — |")
            continue
        a, s = v.metrics, v.in_support
        lines.append(f"| {name} | {_num(a.t50, 4)} | {_num(a.t10, 4)} | {a.t50_ratio.text()} | {a.t10_ratio.text()} | "
                     f"{_num(a.log_rms)} | {s.t50_ratio.text()} | {s.t10_ratio.text()} | {_num(s.log_rms)} |")  # type: ignore[union-attr]  # in_support is set with metrics
    lines += [f"\n**{name} failed**: {v.error}" for name, v in report.variants.items() if v.error]
    lines += ["", "Ratios are ODE/MLP (`< x`, `> x`: a bound, where one curve ends before it crosses); log-RMS is the "
              "RMS of log L_ode − log L_mlp where the MLP loss exceeds 1e-2.",
              f"![report]({figure})", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# report.png
# ----------------------------------------------------------------------------------------------------------------
def figure_variants(names: Sequence[str], variant: "str | Sequence[str] | None") -> list[str]:
    """The variants drawn in the mode and eigenvalue panels, out of ``names``: ``variant`` (a name or several), by
    default the reference closure (:data:`featureode.ode.variants.REFERENCE`), else
    ``displacement``, else the first. An unknown name is a :class:`ReportError` listing the valid ones."""
    from featureode.ode.variants import REFERENCE

    names = list(names)
    if variant is None:
        for default in (REFERENCE, "displacement"):
            if default in names:
                return [default]
        return names[:1]
    chosen = [variant] if isinstance(variant, str) else list(variant)
    unknown = [v for v in chosen if v not in names]
    if unknown:
        raise ReportError(f"figure variant {', '.join(map(repr, unknown))} is not a variant of this config; choose "
                         f"from {', '.join(names)}")
    return chosen


def _positive(t: np.ndarray) -> np.ndarray:
    return np.asarray(t, float) > 0


def _tick_label(x: float, _pos: Any = None) -> str:
    return f"{x:g}"


def _log_ticks(ax: Any, which: str, compact: bool = False) -> None:
    """Readable ticks on a log axis: at least a factor 4 in range (a nearly constant curve of a short run does not
    leave one sub-decade with no or repeated labels), labels 1-2-5 per decade on short ranges, plain numbers."""
    from matplotlib import ticker

    get, set_ = (ax.get_xlim, ax.set_xlim) if which == "x" else (ax.get_ylim, ax.set_ylim)
    lo, hi = get()
    if hi / lo < 4:
        mid = math.sqrt(lo * hi)
        lo, hi = mid / 2, mid * 2
        set_(lo, hi)
    decades = math.log10(hi / lo)
    subs: tuple[float, ...]
    if compact:  # a paper-sized panel: fewer labels (8 pt text)
        subs = (1.0, 3.0) if decades <= 2 else (1.0,)
    else:
        subs = (1.0, 2.0, 5.0) if decades <= 2 else (1.0, 3.0) if decades <= 3.5 else (1.0,)
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(ticker.LogLocator(base=10, subs=subs, numticks=30))
    axis.set_major_formatter(ticker.FuncFormatter(_tick_label))
    axis.set_minor_locator(ticker.LogLocator(base=10, subs=[float(k) for k in range(1, 10)], numticks=30))
    axis.set_minor_formatter(ticker.NullFormatter())


def report_figure(report: Report, variant: "str | Sequence[str] | None" = None, *,
                  figsize: tuple[float, float] | None = None, ax: Any = None,
                  style: "str | Mapping[str, Any] | None" = None) -> "Figure":
    """A :class:`matplotlib.figure.Figure` of three panels on shared log-time axes: the loss ``L(t)/L(0)`` (MLP test
    and in-support loss, every ODE variant; the levels 0.5 and 0.1 with each curve's ``t50``/``t10`` marked), the
    mode coefficients ``f_β(t)`` with the targets ``v_β``, and the eigenvalues ``λ_β(t)``. ``variant``: the ODE
    variant(s) of the last two panels (default ``displacement`` if present, else the first).

    Colours are :func:`featureode.export.style.variant_colour`'s (the same for a variant in every figure).
    ``style``: ``"report"`` (default), ``"paper"`` (6.75 in wide, 8 pt text), ``"column"`` (3.25 in, the panels
    stacked) or a dict of ``rcParams``; ``figsize`` overrides the style's size; ``ax``: draw into the caller's
    axes instead of a new figure — one :class:`~matplotlib.axes.Axes` (the loss panel alone) or three (every
    panel). Returns the figure drawn into."""

    with styled(style) as st:
        shown_variants = figure_variants(list(report.variants), variant)
        if ax is None:
            column = st.name == "column"
            size = figsize or st.size((17, 5.0), aspect=2.1 if column else 0.36)
            # paper styles: one key for every panel, below them (constrained layout makes room for it)
            fig = new_figure(size, layout="constrained" if st.compact else None)
            axes = list(fig.subplots(3, 1, sharex=True) if column else fig.subplots(1, 3, sharex=True))
            own = True
        else:
            axes = list(ax) if isinstance(ax, (list, tuple)) or hasattr(ax, "ravel") else [ax]
            axes = list(np.ravel(np.asarray(axes, dtype=object)))
            if len(axes) not in (1, 3):
                raise ReportError(f"report_figure draws into one axes (the loss) or three, got {len(axes)}")
            fig, own = axes[0].figure, False
        small = PAPER_MIN_FONT_PT if st.compact else 7
        shared = own and st.compact  # one figure key outside the axes instead of a legend in each
        keys = _loss_panel(axes[0], report, small, st.compact, legend=not shared)
        if len(axes) == 3:
            keys += _mode_panels(axes[1], axes[2], report, shown_variants, small, st.compact, legend=not shared)
        for a, which in ((axes[0], "x"), (axes[0], "y")) + (((axes[2], "y"),) if len(axes) == 3 else ()):
            _log_ticks(a, which, st.compact)
        if own:
            cfg = report.config
            head = (f"{cfg.target.expr}, $d = {cfg.data.dim}$, $\\gamma = {cfg.network.richness:g}$, "
                    f"{cfg.network.activation}, $N = {cfg.network.width}$")
            rates = parametrization_of(cfg).rates
            if not rates.is_default:
                head += f"; {rates.text()}"
            if not st.compact:
                head += (f"; batch {cfg.training.batch}, seed {cfg.training.seed}, "
                         f"t_max = {cfg.training.t_max:g} (bands: ±2 s.e.)")
            fig.suptitle(head)
            if shared:
                if column:  # stacked on one time axis: its label once, under the lowest panel
                    for a in axes[:-1]:
                        a.set_xlabel("")
                per_row = max(1, int(fig.get_figwidth() / 1.25))
                fig.legend(handles=keys, loc="outside lower center", ncols=min(per_row, len(keys)),
                           fontsize=small, frameon=False)
            else:
                fig.tight_layout()
    return fig


def _loss_panel(ax: Any, report: Report, small: float, compact: bool, legend: bool = True) -> list[Any]:
    """Draw the loss panel; its legend in the axes when ``legend``, else return its key's handles."""
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    mlp = report.mlp
    at_right = blended_transform_factory(ax.transAxes, ax.transData)
    for key, level in LEVELS.items():
        ax.axhline(level, color="0.7", lw=0.8, ls=":", zorder=0)
        ax.text(0.99, level, f"{level:g} ($t_{{{key[1:]}}}$)", transform=at_right, ha="right", va="bottom",
                fontsize=small, color="0.35")
    curves = [("MLP test loss", mlp.t, mlp.loss, MLP_COLOUR, 2.2),
              ("MLP in-support loss", mlp.t, mlp.in_support_loss / mlp.in_support_loss[0], MLP_IN_SUPPORT_COLOUR,
               1.5)]
    curves += [(f"ODE {name}", v.t, v.loss, variant_colour(name), 1.5) for name, v in report.variants.items()
               if len(v.t) > 1]
    scale = 0.6 if compact else 1.0
    for text, t, y, colour, lw in curves:
        keep = _positive(t)
        ax.plot(t[keep], y[keep], color=colour, lw=lw * scale, label=text)
        for key, level in LEVELS.items():
            tc = crossing_time(t, y, level)
            if tc is not None and tc > 0:
                ax.plot([tc], [level], "o", ms=6 * scale, color=colour, mec="white", mew=0.8 * scale, zorder=5,
                        label=f"_{key} {text}")
    ax.set(xscale="log", yscale="log", xlabel=label("t"), ylabel=label("loss"),
           title="loss" if compact else r"loss (dots: $t_{50}$ and $t_{10}$ crossings)")
    ax.set_ylim(bottom=max(1e-4, ax.get_ylim()[0]))
    if legend:
        ax.legend(fontsize=small if compact else 8, loc="lower left")
        return []
    return [Line2D([], [], color=colour, lw=lw * scale, label=text) for text, _t, _y, colour, lw in curves]


def _mode_panels(ax_f: Any, ax_l: Any, report: Report, shown_variants: Sequence[str], small: float,
                 compact: bool, legend: bool = True) -> list[Any]:
    """Draw the mode and eigenvalue panels; their legends in the axes when ``legend``, else return the key's
    handles (the line style of each mode, the MLP's markers; the variants' colours are the loss panel's)."""
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    net = report.network
    pos = _positive(report.mlp.t)
    ode_modes, mlp_modes = list(report.ode.modes), list(net.modes)
    target = dict(zip(ode_modes, np.asarray(report.ode.target, float)))
    shown = [m for m in mlp_modes if m in ode_modes][:len(MODE_STYLES)]
    style = dict(zip(shown, MODE_STYLES))
    scale = 0.6 if compact else 1.0
    for ax, key, title in ((ax_f, "f", "mode coefficients"), (ax_l, "lambda", "eigenvalues")):
        y_mlp = net.get(key)
        for mode in shown:
            if y_mlp is not None:
                i = mlp_modes.index(mode)
                y = np.asarray(y_mlp, float)[:, i]
                ax.plot(net.t[pos], y[pos], ls=style[mode], color=MLP_COLOUR, lw=1.0 * scale, marker="o",
                        ms=2.5 * scale)
                if key == "f" and net.f_stderr is not None:
                    e = np.asarray(net.f_stderr, float)[:, i]
                    ax.fill_between(net.t[pos], (y - 2 * e)[pos], (y + 2 * e)[pos], color=MLP_COLOUR, alpha=0.12,
                                    lw=0)
            for name in shown_variants:
                tr = report.ode.variants[name]
                y_ode = tr.get(key)
                own = list(tr.modes) or ode_modes  # a replay lives on the network's measured modes
                if y_ode is None or len(tr.t) < 2 or mode not in own:
                    continue
                keep = _positive(tr.t)
                ax.plot(tr.t[keep], np.asarray(y_ode, float)[keep, own.index(mode)], ls=style[mode],
                        color=variant_colour(name), lw=1.6 * scale)
        # a variant without this quantity (the mean-field flows follow neurons, not λ_β) is neither drawn nor named
        drawn = [n for n in shown_variants if report.ode.variants[n].get(key) is not None]
        full = f"{title} {label(key)}" + ("" if compact else f"; ODE: {', '.join(drawn)}" if drawn else "; MLP")
        ax.set(xscale="log", xlabel=label("t"), ylabel=label(key), title=full)
        if key == "lambda":
            ax.set_yscale("log")
        handles = [Line2D([], [], color="0.3", ls=style[m], label=mode_label(m)) for m in shown]
        handles += [Line2D([], [], color=MLP_COLOUR, marker="o", ms=3, ls="none", label="MLP")]
        handles += [Line2D([], [], color=variant_colour(n), lw=1.6 * scale, label=f"ODE {n}") for n in drawn]
        if legend:
            ax.legend(handles=handles, fontsize=small, loc="center left" if key == "f" else "best")

    # the targets v_β on the mode panel, grouped where modes share a value
    at_left = blended_transform_factory(ax_f.transAxes, ax_f.transData)
    groups: dict[float, list[str]] = {}
    for mode in shown:
        groups.setdefault(round(float(target[mode]), 12), []).append(mode)
    for value, modes in groups.items():
        ax_f.axhline(value, color="0.6", lw=0.9 * scale, ls=style[modes[0]], zorder=0)
        ax_f.text(0.01, value, "target $" + " = ".join(f"v_{{{mode_tex(m)}}}" for m in modes) + f" = {value:.3g}$",
                  transform=at_left, ha="left", va="top", fontsize=small, color="0.35")
    if legend:
        return []
    return ([Line2D([], [], color="0.3", ls=style[m], lw=1.0 * scale, label=mode_label(m)) for m in shown]
            + [Line2D([], [], color=MLP_COLOUR, marker="o", ms=2.5 * scale, ls="none", label=r"MLP $f_\beta$, "
                      r"$\lambda_\beta$")])
