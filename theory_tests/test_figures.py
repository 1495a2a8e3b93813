"""Paper figures: one colour per variant in every figure, drawing into the caller's axes, the paper styles' sizes
and text, vector PDF, --format, and a key zipped with a plotted axis."""
from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from featureode.cli import main
from featureode.config import load_config
from featureode.export.diagnostics import diagnostics_figure, diagnostics_panels
from featureode.export.report import build_report, report_figure
from featureode.export.style import COLUMN_WIDTH, PAPER_WIDTH, StyleError, figure_format, label, variant_colour
from featureode.results.trajectory import ODEResult
from featureode.workflow.plot import PlotError, phase_figure
from featureode.workflow.sweeps import RESULT_COLUMNS, write_results
from test_diagnostics import _mlp as _diag_mlp
from test_diagnostics import _ode as _diag_ode
from test_report import V, _grid, _mlp, _ode_variant


def _report(names=("lazy", "displacement")):
    t = _grid(10.0)
    ode = ODEResult(("z0", "z0*z1"), V, {n: _ode_variant(n, t, 0.5 + k / 2) for k, n in enumerate(names)})
    return build_report(load_config(), ode, _mlp(t))


def _rows(variants=("lazy", "displacement"), zipped=False):
    rows = []
    for g in (0.01, 0.5):
        for d, expr in ((8, "z0"), (16, "z0*z1")):
            for v in variants:
                r = 1 + g * d / 16 + (0.1 if v == "lazy" else 0)
                rows.append({"network.richness": g, "data.dim": d, **({"target.expr": expr} if zipped else {}),
                             "seed": 0, "variant": v, "t50": r, "t10": r, "t50_ratio": r, "t10_ratio": r,
                             "log_rms": 0.1, "mlp_t50": 1.0, "mlp_t10": 1.0, "t_max": 10.0, "status": "ok",
                             "run": f"runs/g{g}_d{d}"})
    return rows


def _line_colour(ax, label):
    (line,) = [ln for ln in ax.lines if ln.get_label() == label]
    return to_rgba(line.get_color())


def test_a_variant_has_one_colour_in_every_figure():
    """displacement: the same colour in reports with other companions and order, in an overlaid phase line and as
    a diagnostics row's own colour; a user variant's colour is fixed by its name, not its position."""
    a = report_figure(_report(("lazy", "displacement"))).axes[0]
    b = report_figure(_report(("displacement", "agop", "my_closure"))).axes[0]
    c = report_figure(_report(("my_closure", "lazy"))).axes[0]
    disp = _line_colour(a, "ODE displacement")
    assert _line_colour(b, "ODE displacement") == disp
    assert _line_colour(b, "ODE my_closure") == _line_colour(c, "ODE my_closure")
    assert _line_colour(a, "ODE lazy") == _line_colour(c, "ODE lazy") != disp
    assert len({_line_colour(b, f"ODE {n}") for n in ("displacement", "agop", "my_closure")}) == 3
    assert _line_colour(a, "MLP test loss") == to_rgba("black")
    phase = phase_figure(_rows(), "network.richness", None, "t10_ratio", ["lazy", "displacement"],
                         {"data.dim": 8}).axes[0]
    (bars,) = [cont for cont in phase.containers if cont.get_label() == "displacement"]
    assert to_rgba(bars.lines[0].get_color()) == disp
    assert len(phase.containers) == 2  # both variants overlaid on the one axes
    diag = diagnostics_figure(_diag_mlp(), {"displacement": _diag_ode("displacement")}, modes=["z0"])
    (a2_panel,) = [a for a in diag.axes if a.get_title() == label("a2")]
    a2 = [ln for ln in a2_panel.lines if ln.get_label().endswith("displacement")]
    assert a2 and to_rgba(a2[0].get_color()) == disp


def test_figures_draw_into_the_callers_axes():
    fig = Figure(figsize=(8, 3))
    ax1, ax2 = fig.subplots(1, 2)
    rep = _report()
    assert report_figure(rep, ax=ax1) is fig
    assert {"ODE lazy", "ODE displacement", "MLP test loss"} <= {ln.get_label() for ln in ax1.lines}
    assert phase_figure(_rows(), "network.richness", None, "t10_ratio", "lazy", {"data.dim": 8}, ax=ax2) is fig
    assert ax2.containers and len(fig.axes) == 2  # no new axes made
    three = Figure().subplots(1, 3)
    out = report_figure(rep, ax=three)
    assert out is three[0].figure and all(a.lines for a in three)
    with pytest.raises(ValueError, match="one axes .* or three"):
        report_figure(rep, ax=Figure().subplots(1, 2))
    n = len(diagnostics_panels(_diag_mlp(), variants={"lazy": _diag_ode("lazy")}))
    grid = Figure().subplots(2, n // 2)
    assert diagnostics_figure(_diag_mlp(), {"lazy": _diag_ode("lazy")}, ax=grid) is grid[0, 0].figure
    assert len(grid[0, 0].figure.axes) == n and grid[-1, -1].get_legend() is not None  # the key beside the last
    with pytest.raises(ValueError, match=f"draws into {n} axes"):
        diagnostics_figure(_diag_mlp(), {"lazy": _diag_ode("lazy")}, ax=Figure().subplots(1, 4))


def _font_sizes(fig) -> list[float]:
    FigureCanvasAgg(fig).draw()
    return [t.get_fontsize() for t in fig.findobj(lambda o: hasattr(o, "get_fontsize") and hasattr(o, "get_text"))
            if t.get_text() and t.get_visible()]


@pytest.mark.parametrize("style, width", [("paper", PAPER_WIDTH), ("column", COLUMN_WIDTH)])
def test_paper_styles_are_sized_for_the_page_with_8pt_text(style, width):
    rep = _report()
    figs = [report_figure(rep, style=style),
            phase_figure(_rows(), "network.richness", "data.dim", "t10_ratio", style=style),
            diagnostics_figure(_diag_mlp(), {"lazy": _diag_ode("lazy")}, style=style)]
    for fig in figs:
        assert fig.get_figwidth() == pytest.approx(width)
        sizes = _font_sizes(fig)
        assert sizes and min(sizes) >= 8, min(sizes)
    assert min(_font_sizes(report_figure(rep))) < 8  # the report style is not the paper one


def _pdf_streams(data: bytes) -> bytes:
    """Every stream of a PDF, inflated where it is Flate-compressed."""
    out = []
    for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        try:
            out.append(zlib.decompress(m.group(1)))
        except zlib.error:
            out.append(m.group(1))
    return b"\n".join(out)


def test_pdf_is_vector_and_files_take_the_format(tmp_path, capsys):
    rep = _report()
    rep.write(tmp_path, fmt="pdf", style="paper")
    pdf = (tmp_path / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and not (tmp_path / "report.png").exists()
    assert b"/Subtype /Image" not in pdf  # no raster image in a line plot
    assert b" l\n" in _pdf_streams(pdf) or b" l " in _pdf_streams(pdf)  # path (lineto) operators: vector curves
    assert "![report](report.pdf)" in (tmp_path / "report.md").read_text()
    write_results(tmp_path, ["network.richness", "data.dim", *RESULT_COLUMNS], _rows())
    assert main(["plot", str(tmp_path), "--x", "network.richness", "--where", "data.dim=8", "--format", "pdf",
                 "--variant", "lazy", "--variant", "displacement"]) == 0
    out = tmp_path / "plots" / "t10_ratio.pdf"
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert out.read_bytes().startswith(b"%PDF") and b"/Subtype /Image" not in out.read_bytes()
    svg = tmp_path / "phase.svg"
    assert main(["plot", str(tmp_path), "--x", "network.richness", "--y", "data.dim", "--out", str(svg)]) == 0
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    assert main(["plot", str(tmp_path), "--x", "network.richness", "--y", "data.dim", "--out",
                 str(tmp_path / "a.png"), "--format", "pdf"]) == 2
    assert "ends in .png but the format is pdf" in capsys.readouterr().err
    with pytest.raises(StyleError, match="cannot tell the figure format from .jpg"):
        figure_format("x.jpg", None)


def test_a_key_zipped_with_an_axis_is_accepted_and_named():
    """target.expr zipped with data.dim: a heatmap over γ × d is drawn (it was refused), the d axis names both."""
    rows = _rows(zipped=True)
    fig = phase_figure(rows, "network.richness", "data.dim", "t10_ratio")
    ax = [a for a in fig.axes if a.get_title() == "lazy"][0]
    assert ax.get_ylabel() == r"$d$, target $f^*$" and ax.get_xlabel() == r"$\gamma$"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["8, z0", "16, z0*z1"]
    # a key varied independently of the axes is still refused
    extra = [dict(r, **{"network.width": w}) for r in rows for w in (64, 128)]
    with pytest.raises(PlotError, match="also vary network.width"):
        phase_figure(extra, "network.richness", "data.dim", "t10_ratio")


def test_variant_colours_are_fixed_for_builtins_and_hashed_for_others():
    assert variant_colour("displacement") == variant_colour("displacement")
    assert variant_colour("mlp") == "black"
    builtin = {variant_colour(n) for n in ("lazy", "agop", "displacement", "second_order", "resummed", "rational",
                                           "replay")}
    assert len(builtin) == 7 and variant_colour("exp_displacement") not in builtin
    np.testing.assert_equal(variant_colour("exp_displacement"), variant_colour("exp_displacement"))


@pytest.mark.slow
def test_compare_writes_its_figures_in_the_asked_format(tmp_path):
    """compare --format pdf --style column on a tiny network: report.pdf and report_diagnostics.pdf, no PNG, and the
    report.md shows the PDF (about 15 s on one core)."""
    sets = ["data.dim=4", "target.expr=z0", "network.width=32", "training.batch=64", "training.n_test=500",
            "training.n_points=8", "training.t_max=6.0", "training.compile=false", 'training.device="cpu"',
            'ode.variants=["lazy", "displacement"]', 'ode.basis="target"']
    out = tmp_path / "cmp"
    assert main(["compare", "--out", str(out), "--format", "pdf", "--style", "column", "--quiet"]
                + [a for s in sets for a in ("--set", s)]) == 0
    assert (out / "report.pdf").read_bytes().startswith(b"%PDF")
    assert (out / "report_diagnostics.pdf").read_bytes().startswith(b"%PDF")
    assert not list(out.glob("*.png")) and "![report](report.pdf)" in (out / "report.md").read_text()


def _media_box(pdf: bytes) -> tuple[float, float]:
    """Width and height (PostScript points, 1/72 in) of a one-page PDF's MediaBox."""
    (box,) = re.findall(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", pdf)
    x0, y0, x1, y1 = map(float, box)
    return x1 - x0, y1 - y0


def _legends(fig) -> list:
    return list(fig.legends) + [a.get_legend() for a in fig.axes if a.get_legend() is not None]


def _points_under(fig, box) -> int:
    """How many drawn data points of the figure's lines (inside their axes) lie inside the display box ``box``."""
    count = 0
    for a in fig.axes:
        if not a.get_visible():
            continue
        frame = a.get_window_extent()
        for line in a.lines:
            xy = line.get_transform().transform(line.get_xydata())
            xy = xy[np.isfinite(xy).all(axis=1)]
            inside_axes = frame.contains_points(xy) if hasattr(frame, "contains_points") else np.array(
                [frame.contains(*p) for p in xy], bool)
            count += int(sum(box.contains(*p) for p in xy[inside_axes]))
    return count


THREE = ("lazy", "displacement", "resummed")
#: ``\columnwidth`` of ``\documentclass[twocolumn]{article}`` (229.5 TeX points) in PDF points, and a page's 0.8.
ARTICLE_COLUMN_BP = 229.5 * 72 / 72.27
PAGE_HEIGHT_BP = 8 * 72


@pytest.mark.parametrize("style", ["report", "paper", "column"])
def test_paper_figures_fit_the_page_and_no_key_covers_a_curve(style):
    """The saved PDF (its MediaBox, after savefig's tight box) is no wider than the style (+1 pt; ``column``: the
    two-column article's column), the diagnostics of three variants at most 8 in tall in the paper styles; in the
    paper styles every key lies outside every axes, and in every style no data point lies under a key."""
    from featureode.export.style import figure_bytes, get_style

    rep = report_figure(_report(THREE), style=style)
    diag = diagnostics_figure(_diag_mlp(), {n: _diag_ode(n) for n in THREE}, style=style,
                              title="z0 + z0*z1, d = 16, γ = 0.5, relu")
    st = get_style(style)
    for name, fig in (("report", rep), ("diagnostics", diag)):
        width, height = _media_box(figure_bytes(fig, "pdf", style))
        limit = (st.width if st.width is not None else fig.get_figwidth()) * 72 + 1
        assert width <= limit, (name, width, limit)
        if style == "column":
            assert width <= ARTICLE_COLUMN_BP, (name, width)
        if st.compact and name == "diagnostics":
            assert height <= PAGE_HEIGHT_BP, (name, height)
        FigureCanvasAgg(fig).draw()
        legends = _legends(fig)
        assert legends, name
        for leg in legends:
            box = leg.get_window_extent()
            assert _points_under(fig, box) == 0, (name, leg)
            if st.compact:
                for a in fig.axes:
                    if a.get_visible():
                        frame = a.get_window_extent()
                        assert not (box.x0 < frame.x1 and frame.x0 < box.x1 and box.y0 < frame.y1
                                    and frame.y0 < box.y1), (name, "key over an axes")
