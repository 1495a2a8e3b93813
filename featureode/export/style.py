"""One look for every figure of the package: a colour per variant, mathtext labels and named styles.

* :func:`variant_colour` — the colour of an ODE variant, the same in every figure whatever the other variants: a
  fixed colour per built-in closure (:data:`VARIANT_COLOURS`), a colour drawn deterministically from the name's hash
  for any other variant (:data:`EXTRA_COLOURS`; two user variants may share one), black for the MLP.
* :func:`label` — the axis label of a config key, a metric or a plotted quantity in mathtext (``network.richness`` →
  ``$\\gamma$``, ``t10_ratio`` → ``$t_{10}$ ratio (ODE/MLP)``); a key it does not know is shown as written.
* :data:`STYLES` — named styles (matplotlib ``rcParams`` plus a figure width): ``report`` (the report files'
  look, the default), ``paper`` (a 6.75 in two-column-page width, 8 pt text) and ``column`` (one column of a
  two-column paper: 229.5 pt = 3.18 in, the ``\\columnwidth`` of ``\\documentclass[twocolumn]{article}``, so it
  also fits a 3.25 in column; 8 pt text). In the paper styles a figure's keys sit outside its axes. Every public
  figure function takes ``style`` (a name, or a dict of ``rcParams`` laid over ``report``), ``figsize`` and ``ax``
  (draw into the caller's axes), and builds its figure inside :func:`styled`.
* :func:`save_figure` — write a figure as PNG, PDF (vector) or SVG, chosen by ``fmt`` or the file's suffix.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from featureode.core.errors import FeatureODEError

#: The colour of each built-in closure (and of ``replay``); the MLP is :data:`MLP_COLOUR`.
VARIANT_COLOURS: dict[str, str] = {
    "lazy": "#1f77b4", "agop": "#ff7f0e", "displacement": "#2ca02c", "second_order": "#d62728",
    "resummed": "#9467bd", "rational": "#b8860b", "replay": "#8c564b", "meanfield": "#008080",
    "meanfield+tail": "#20b2aa", "meanfield+whole": "#c71585"}
#: Colours of other variants, picked by the hash of the name (none of them is a built-in's colour or a grey).
EXTRA_COLOURS: tuple[str, ...] = ("#e377c2", "#bcbd22", "#17becf", "#1b9e77", "#d95f02", "#7570b3", "#e7298a",
                                  "#66a61e", "#e6ab02", "#a6761d", "#0b3d91", "#8c0a52")
MLP_COLOUR = "black"
MLP_IN_SUPPORT_COLOUR = "0.55"
#: Figure widths (inches) of a two-column paper: the full text width and one column (229.5 TeX points, the column
#: of the standard two-column article, narrower than a 3.25 in one).
PAPER_WIDTH, COLUMN_WIDTH = 6.75, 229.5 / 72.27

#: Labels (mathtext) of config keys, metrics of ``results.csv`` and plotted quantities.
LABELS: dict[str, str] = {
    "network.richness": r"$\gamma$", "network.width": r"$N$", "network.bias_std": r"$\sigma_b$",
    "network.activation": r"activation $\sigma$", "network.parametrization": "parametrization",
    "data.dim": r"$d$", "data.exponent": r"spectrum exponent $a$", "data.offset": r"spectrum offset $i_0$",
    "target.expr": r"target $f^*$", "training.batch": r"batch $B$", "training.t_max": r"$t_{\max}$",
    "training.seed": "seed", "training.eta_safety": r"$\eta$ safety", "training.dtype": "dtype",
    "ode.basis": "ODE basis", "ode.eigenvalues": r"$\lambda_\beta(0)$", "ode.kappa": r"$\kappa$",
    "t10_ratio": r"$t_{10}$ ratio (ODE/MLP)", "t50_ratio": r"$t_{50}$ ratio (ODE/MLP)", "log_rms": "log-RMS",
    "t50": r"ODE $t_{50}$", "t10": r"ODE $t_{10}$", "mlp_t50": r"MLP $t_{50}$", "mlp_t10": r"MLP $t_{10}$",
    "t_max": r"$t_{\max}$", "t": r"$t$", "loss": r"$L(t)/L(0)$", "f": r"$f_\beta(t)$",
    "lambda": r"$\lambda_\beta(t)$", "r": r"$r_i(t)$", "a2": r"$\langle a^2\rangle(t)/\langle a^2\rangle(0)$",
    "lambda_growth": r"$\lambda_\beta(t)/\lambda_\beta(0)$", "hea_over_exact": r"HEA / exact $\lambda_\beta(0)$",
}


def mode_tex(mode: str) -> str:
    """A mode name in math (without the ``$``): ``z0*z1`` → ``z_{0} z_{1}``, ``h3(z0)`` → ``h_{3}(z_{0})``
    (:func:`featureode.export.latex.mode_latex`, the LaTeX document's form); a name that is not a mode as written."""
    from featureode.calculus.hermite import Mode, ModeError
    from featureode.export.latex import mode_latex, tex_text

    try:
        return mode_latex(Mode.parse(mode))
    except ModeError:
        return rf"\mathrm{{{tex_text(mode)}}}"


def mode_label(mode: str) -> str:
    """A mode name as a mathtext label: ``z0*z1`` → ``$z_{0} z_{1}$`` (:func:`mode_tex`)."""
    return f"${mode_tex(mode)}$"


def variant_colour(name: str) -> str:
    """The colour of variant ``name`` in every figure (see the module docstring); ``"MLP"``/``"mlp"`` is black."""
    if name in VARIANT_COLOURS:
        return VARIANT_COLOURS[name]
    if name.lower() == "mlp":
        return MLP_COLOUR
    digest = hashlib.sha256(name.encode()).digest()
    return EXTRA_COLOURS[int.from_bytes(digest[:4], "big") % len(EXTRA_COLOURS)]


def variant_colours(names: Sequence[str]) -> dict[str, str]:
    """``{name: variant_colour(name)}``: independent of the order and of the other names."""
    return {name: variant_colour(name) for name in names}


def label(key: str) -> str:
    """The axis label of ``key``: :data:`LABELS`, or the key as written; a zipped axis ``"a,b"`` joins its keys'
    labels with commas."""
    parts = [k.strip() for k in key.split(",")]
    return ", ".join(LABELS.get(k, k) for k in parts)


@dataclass(frozen=True)
class Style:
    """A named look: ``rc`` (matplotlib ``rcParams``), ``width`` (inches) of a full-width figure, ``dpi`` of a
    raster file, ``compact`` (paper sizes: titles shortened, legends smaller)."""

    name: str
    rc: Mapping[str, Any] = field(default_factory=dict)
    width: float | None = None
    dpi: int = 110
    compact: bool = False

    def size(self, default: tuple[float, float], aspect: float | None = None) -> tuple[float, float]:
        """The figure size: ``default`` for the report style, else this style's width by ``aspect`` × width (the
        default's aspect when ``None``)."""
        if self.width is None:
            return default
        return self.width, self.width * (aspect if aspect is not None else default[1] / default[0])


_PAPER_RC = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 8, "ytick.labelsize": 8,
             "legend.fontsize": 8, "figure.titlesize": 8, "lines.linewidth": 1.0, "lines.markersize": 3,
             "axes.linewidth": 0.6, "xtick.major.width": 0.6, "ytick.major.width": 0.6, "legend.frameon": False,
             "legend.handlelength": 1.6, "pdf.fonttype": 42, "svg.fonttype": "none", "mathtext.fontset": "cm",
             "font.family": "serif", "font.serif": ["DejaVu Serif"], "savefig.bbox": "tight",
             "savefig.pad_inches": 0.02}
#: The named styles (see the module docstring).
STYLES: dict[str, Style] = {
    "report": Style("report"),
    "paper": Style("paper", _PAPER_RC, PAPER_WIDTH, 300, True),
    "column": Style("column", _PAPER_RC, COLUMN_WIDTH, 300, True),
}
#: The smallest text (points) of the paper styles.
PAPER_MIN_FONT_PT = 8


class StyleError(FeatureODEError, ValueError):
    """An unknown style name or figure format; the message names the valid ones."""


def get_style(style: "str | Mapping[str, Any] | Style | None") -> Style:
    """A :class:`Style` from a name of :data:`STYLES`, a dict of ``rcParams`` (laid over ``report``) or ``None``
    (``report``)."""
    if style is None:
        return STYLES["report"]
    if isinstance(style, Style):
        return style
    if isinstance(style, str):
        if style not in STYLES:
            raise StyleError(f"unknown figure style {style!r}; valid styles: {', '.join(STYLES)}")
        return STYLES[style]
    return Style("custom", dict(style))


@contextlib.contextmanager
def styled(style: "str | Mapping[str, Any] | Style | None") -> Iterator[Style]:
    """A context in which figures are built (and saved) with ``style``'s ``rcParams``."""
    import matplotlib

    st = get_style(style)
    with matplotlib.rc_context(dict(st.rc)):  # type: ignore[arg-type]  # rc keys are checked by matplotlib at run time
        yield st


FORMATS = ("png", "pdf", "svg")


def figure_format(path: "str | Path | None", fmt: str | None) -> str:
    """The file format: ``fmt``, else ``path``'s suffix, else ``png``; a suffix that disagrees with ``fmt`` or is
    not one of :data:`FORMATS` is a :class:`StyleError`."""
    suffix = Path(path).suffix.lower().lstrip(".") if path is not None else ""
    if fmt is not None and fmt not in FORMATS:
        raise StyleError(f"unknown figure format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    if suffix and suffix in FORMATS:
        if fmt is not None and fmt != suffix:
            raise StyleError(f"{path} ends in .{suffix} but the format is {fmt}; give a matching suffix or leave one "
                             "of them out")
        return suffix
    if suffix and fmt is None:
        raise StyleError(f"{path}: cannot tell the figure format from .{suffix}; end the file name in .png, .pdf or "
                         ".svg, or pass --format")
    return fmt or "png"


def figure_bytes(fig: Any, fmt: str = "png", style: "str | Mapping[str, Any] | Style | None" = None) -> bytes:
    """The figure as ``fmt`` (``png`` at the style's dpi, ``pdf``/``svg`` vector)."""
    if fmt not in FORMATS:
        raise StyleError(f"unknown figure format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    buf = io.BytesIO()
    # fontTools warns of every embedded subset's zero timestamp (harmless; it reads it as 1970) on each PDF
    head_log = logging.getLogger("fontTools.ttLib.tables._h_e_a_d")
    level = head_log.level
    head_log.setLevel(logging.ERROR)
    try:
        with styled(style) as st:
            fig.savefig(buf, format=fmt, dpi=st.dpi, metadata=_metadata(fmt))
    finally:
        head_log.setLevel(level)
    return buf.getvalue()


def _metadata(fmt: str) -> dict[str, Any]:
    # no creation date: the same figure gives the same file
    if fmt == "pdf":
        return {"CreationDate": None, "Creator": "featureode"}
    if fmt == "svg":
        return {"Date": None, "Creator": "featureode"}
    return {"Software": "featureode"}


def save_figure(fig: Any, path: "str | Path", fmt: str | None = None,
                style: "str | Mapping[str, Any] | Style | None" = None) -> Path:
    """Write ``fig`` to ``path`` atomically as ``fmt`` (default: the suffix, else PNG; a path without a suffix gets
    one); returns the path written."""
    from featureode.results.trajectory import write_bytes

    path = Path(path)
    kind = figure_format(path, fmt)
    if not path.suffix:
        path = path.with_suffix(f".{kind}")
    write_bytes(path, figure_bytes(fig, kind, style))
    return path


def vector_colorbar(fig: Any, mappable: Any, **kwargs: Any) -> Any:
    """``fig.colorbar(mappable, **kwargs)`` whose colour ramp stays vector in a PDF or SVG (matplotlib rasterizes a
    ramp of 50 steps or more, an image in the file); its steps edged in their own colour, so no seam shows."""
    bar = fig.colorbar(mappable, **kwargs)
    if bar.solids is not None:
        bar.solids.set_rasterized(False)
        bar.solids.set_edgecolor("face")
        bar.solids.set_linewidth(0.3)
    return bar


def new_figure(figsize: tuple[float, float], layout: str | None = None) -> Any:
    """A :class:`matplotlib.figure.Figure` (no pyplot state) of ``figsize``."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout=layout)  # type: ignore[arg-type]  # layout names are matplotlib's
