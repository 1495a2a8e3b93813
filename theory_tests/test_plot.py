"""Phase diagrams (``featureode plot``): axes, annotations, colour scale and contours of the Figure, bad requests."""
from __future__ import annotations

import statistics

import numpy as np
import pytest
import matplotlib
from matplotlib.collections import LineCollection, QuadMesh

from featureode.cli import main
from featureode.export.style import label
from featureode.workflow.plot import PlotError, phase_figure
from featureode.workflow.sweeps import RESULT_COLUMNS, write_results

GAMMAS, DIMS = (0.01, 0.1, 0.5), (8, 16)


def _ratio(variant: str, g: float, d: int, seed: int) -> float:
    return (1.0 + (g if variant == "lazy" else 0.2 * g) * d / 8) * (1 + 0.01 * seed)


def _rows(extra: dict | None = None) -> list[dict]:
    rows = []
    for g in GAMMAS:
        for d in DIMS:
            for seed in (0, 1, 2):
                for v in ("lazy", "displacement"):
                    r = _ratio(v, g, d, seed)
                    rows.append({"network.richness": g, "data.dim": d, **(extra or {}), "seed": seed, "variant": v,
                                 "t50": 2 * r, "t10": 5 * r, "t50_ratio": r, "t10_ratio": r, "log_rms": 0.1,
                                 "mlp_t50": 2.0, "mlp_t10": 5.0, "t_max": 10.0, "status": "ok",
                                 "run": f"runs/g{g}_d{d}_s{seed}"})
    return rows


def _texts(ax) -> dict[tuple[int, int], str]:
    return {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in ax.texts}


def test_heatmap_cells_axes_contour_and_centred_colours():
    fig = phase_figure(_rows(), "network.richness", "data.dim", "t10_ratio")
    axes = [ax for ax in fig.axes if ax.get_title() in ("lazy", "displacement")]
    assert [ax.get_title() for ax in axes] == ["displacement", "lazy"] or len(axes) == 2
    for ax in axes:
        v = ax.get_title()
        # mathtext labels of the config keys (issue 21), not the raw keys
        assert ax.get_xlabel() == r"$\gamma$" and ax.get_ylabel() == "$d$"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.01", "0.1", "0.5"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["8", "16"]
        texts = _texts(ax)
        for j, g in enumerate(GAMMAS):
            for i, d in enumerate(DIMS):
                vals = [_ratio(v, g, d, s) for s in (0, 1, 2)]
                assert texts[(j, i)] == f"{statistics.fmean(vals):.3g}\n±{statistics.stdev(vals):.2g}"
        (im,) = [c for c in ax.collections if isinstance(c, QuadMesh)]  # vector cells, no image
        assert not ax.images and im.get_array().shape == (len(DIMS), len(GAMMAS))
        assert im.norm(1.0) == pytest.approx(0.5)  # diverging map centred on ratio 1
        assert im.norm(1 / 1.3) == pytest.approx(1 - im.norm(1.3))  # symmetric in log ratio
        (band,) = [c for c in ax.collections if isinstance(c, LineCollection)]
        assert band.get_label() == "±10% of 1"
        # the cells within ±10% of 1, by hand from _ratio's seed means
        inside = {(j, i) for j, g in enumerate(GAMMAS) for i, d in enumerate(DIMS)
                  if 0.9 <= statistics.fmean([_ratio(v, g, d, s) for s in (0, 1, 2)]) <= 1.1}
        # lazy at γ = 0.1, d = 8: 1.1 × 1.01 = 1.111 is out; displacement at γ = 0.5, d = 8: the same
        assert inside == ({(0, 0), (0, 1)} if v == "lazy" else {(0, 0), (0, 1), (1, 0), (1, 1)})
        # its outline: the edges of inside cells that face an outside cell or the border
        want = sum(4 - sum((a + da, b + db) in inside for da, db in ((1, 0), (-1, 0), (0, 1), (0, -1)))
                   for a, b in inside)
        assert len(band.get_segments()) == want
    fig.savefig(__import__("io").BytesIO(), format="png")  # renders without pyplot


def _images(pdf: bytes) -> int:
    """Image XObjects in an uncompressed PDF (saved with ``pdf.compression = 0``)."""
    assert b"/FlateDecode" not in pdf  # the streams are readable: an image would show as /Subtype /Image
    return pdf.count(b"/Subtype /Image")


def test_heatmap_is_vector_in_a_pdf_and_still_a_png(tmp_path):
    """A phase diagram saved as PDF (``save_figure``, ``plot --format pdf``, the paper style) embeds no image:
    the cells and the colour bar's ramp are vector paths, the cell colours those of the norm at the cell means;
    as PNG it is a picture of the figure's size at the style's dpi."""
    from PIL import Image

    from featureode.export.style import save_figure

    rows = _rows()
    write_results(tmp_path, ["network.richness", "data.dim", *RESULT_COLUMNS], rows)
    fig = phase_figure(rows, "network.richness", "data.dim", "t10_ratio", style="paper")
    (ax,) = [a for a in fig.axes if a.get_title() == "lazy"]
    (mesh,) = [c for c in ax.collections if isinstance(c, QuadMesh)]
    means = [[statistics.fmean(_ratio("lazy", g, d, s) for s in (0, 1, 2)) for g in GAMMAS] for d in DIMS]
    with matplotlib.rc_context({"pdf.compression": 0}):
        pdf = save_figure(fig, tmp_path / "phase.pdf", style="paper")
        assert main(["plot", str(tmp_path), "--x", "network.richness", "--y", "data.dim", "--format", "pdf",
                     "--style", "paper", "--out", str(tmp_path / "cli.pdf")]) == 0
    for path in (pdf, tmp_path / "cli.pdf"):
        data = path.read_bytes()
        assert data[:5] == b"%PDF-" and _images(data) == 0, path
        assert data.count(b" re") + data.count(b" l") > 50  # the cells and the ramp as paths
    png = save_figure(fig, tmp_path / "phase.png", style="paper")
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > 300 and len(im.convert("RGB").getcolors(10**6)) > 20
    np.testing.assert_allclose(mesh.get_facecolors(), mesh.cmap(mesh.norm(np.ravel(means))), atol=1e-12)  # drawn


def test_line_with_seed_error_bars_and_one_variant():
    rows = [r for r in _rows() if r["data.dim"] == 16]
    fig = phase_figure(rows, "network.richness", None, "t50_ratio", variant="lazy", where={"data.dim": "16"})
    (ax,) = fig.axes
    assert ax.get_title() == "lazy" and ax.get_xlabel() == r"$\gamma$" and ax.get_ylabel() == label("t50_ratio")
    line = ax.lines[0]
    want = [statistics.fmean([_ratio("lazy", g, 16, s) for s in (0, 1, 2)]) for g in GAMMAS]
    np.testing.assert_allclose(line.get_xdata(), GAMMAS)
    np.testing.assert_allclose(line.get_ydata(), want, rtol=1e-12)
    bars = ax.containers[0].lines[2][0].get_segments()
    sds = [statistics.stdev([_ratio("lazy", g, 16, s) for s in (0, 1, 2)]) for g in GAMMAS]
    np.testing.assert_allclose([seg[1, 1] - seg[0, 1] for seg in bars], [2 * s for s in sds], rtol=1e-12)
    assert any(p.get_label() == "±10%" for p in ax.patches)
    assert ax.get_xscale() == "log"  # 0.01 … 0.5 spans more than 20×


def test_zipped_axis_and_non_ratio_metric():
    rows = _rows({"target.expr": "z0"})
    fig = phase_figure(rows, "network.richness", "target.expr,data.dim", "mlp_t10")
    (ax,) = [a for a in fig.axes if a.get_title() == "MLP"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["z0, 8", "z0, 16"]
    assert not [c for c in ax.collections if isinstance(c, LineCollection)]  # no ±10% contour for a time
    assert set(_texts(ax).values()) == {"5\n±0"}


def test_bad_plot_requests():
    rows = _rows()
    with pytest.raises(PlotError, match="'network.richnes' is not a varied key of these results; did you mean "
                                        "'network.richness'"):
        phase_figure(rows, "network.richnes")
    with pytest.raises(PlotError, match="unknown metric 't10ratio'; did you mean 't10_ratio'"):
        phase_figure(rows, "network.richness", "data.dim", "t10ratio")
    with pytest.raises(PlotError, match=r"the results also vary data.dim \(16, 8\); put it on an axis or fix it with "
                                        r"--where data.dim=16"):
        phase_figure(rows, "network.richness")
    with pytest.raises(PlotError, match="unknown variant 'agp'"):
        phase_figure(rows, "network.richness", "data.dim", variant="agp")


def test_plot_cli_writes_a_png(tmp_path, capsys):
    rows = _rows()
    write_results(tmp_path, ["network.richness", "data.dim", *RESULT_COLUMNS], rows)
    png = tmp_path / "phase.png"
    assert main(["plot", str(tmp_path), "--x", "network.richness", "--y", "data.dim", "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(tmp_path), "--x", "network.richness", "--where", "data.dim"]) == 2
    assert "--where 'data.dim' must be KEY=VALUE" in capsys.readouterr().err


def test_curves_of_an_ode_only_sweep_read_back_from_its_curve_file(tmp_path, capsys):
    """``featureode plot DIR --metric loss``: the curves of an ODE-only sweep (kept in its one columnar file, not in
    the run folders), one line per run coloured by --x; each line is the run's L(t)/L(0) as solve_config computes it
    for the run's config, and the lazy one is the closed form exp(−2λt) of the one-mode lazy flow."""
    from featureode.export.style import save_figure
    from featureode.kernel.theory import kernel_theory
    from featureode.ode.solve import solve_config
    from featureode.workflow.grid import grid_from_dict
    from featureode.workflow.plot import curves_figure
    from featureode.workflow.sweeps import plan, run_sweep

    grid = grid_from_dict({"set": {"data.dim": 4, "training.t_max": 20.0, "ode.variants": ["lazy", "displacement"],
                                   "ode.basis": "target", "ode.n_points": 30, "target.expr": "z0"},
                           "grid": {"network.richness": [0.05, 0.5, 1.0]}, "sweep": {"seeds": [0]}})
    assert not run_sweep(grid, tmp_path, ode_only=True, progress=False).failed
    assert not list(tmp_path.glob("runs/*/ode.json"))                # the curves live in the sweep's file alone
    fig = curves_figure(tmp_path, "network.richness")
    panels = {a.get_title(): a for a in fig.axes if a.get_title()}
    assert set(panels) == {"lazy", "displacement"}
    for name, ax in panels.items():
        (lines,) = [c for c in ax.collections if isinstance(c, LineCollection)]
        segments = lines.get_segments()
        assert len(segments) == 3
        for (_, task), seg in zip(plan(grid, tmp_path, ode_only=True), segments):
            tr = solve_config(task.config()).variants[name]
            keep = (tr.t > 0) & (tr.loss > 0)
            np.testing.assert_array_equal(seg[:, 0], tr.t[keep])
            np.testing.assert_array_equal(seg[:, 1], tr.loss[keep])
            if name == "lazy":
                lam = kernel_theory(task.config()).lambda_exact[0]
                np.testing.assert_allclose(seg[:, 1], np.exp(-2 * lam * seg[:, 0]), rtol=1e-6)
        assert len({tuple(c) for c in lines.get_colors()}) == 3            # one colour per γ
    from featureode.export.style import new_figure

    mine = new_figure((6.0, 3.0))   # the caller's axes: one per panel, drawn into, no title set
    axes = mine.subplots(1, 2)
    assert curves_figure(tmp_path, "network.richness", variant=["lazy", "displacement"], ax=axes) is mine
    assert [a.get_title() for a in axes] == ["lazy", "displacement"] and not mine.get_suptitle()
    assert all(len(a.collections[0].get_segments()) == 3 for a in axes)
    with pytest.raises(PlotError, match="give ax as 2 axes"):
        curves_figure(tmp_path, "network.richness", ax=axes[0])
    with matplotlib.rc_context({"pdf.compression": 0}):  # the colour bar's ramp stays vector
        assert _images(save_figure(fig, tmp_path / "curves.pdf").read_bytes()) == 0
    out = tmp_path / "curves.png"
    assert main(["plot", str(tmp_path), "--x", "network.richness", "--metric", "loss", "--out", str(out)]) == 0
    assert out.stat().st_size > 0 and "wrote" in capsys.readouterr().out
    assert main(["plot", str(tmp_path), "--x", "network.richness", "--y", "data.dim", "--metric", "loss"]) == 2
    assert "drop --y" in capsys.readouterr().err
