"""The comparison report (featureode.export.report) on analytic curves: metrics and bounds in report.json/report.md, and the
figure read back from its matplotlib objects (labels, crossing markers, targets, colours, ticks)."""
from __future__ import annotations

import json
import dataclasses
import math

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba

from featureode.config import load_config
from featureode.export.report import build_report, variant_colours
from featureode.results.trajectory import ODEResult, Status, Trajectory

V = np.array([0.8, 0.6])  # target coefficients of z0 and z0*z1


def _grid(t_end: float, n: int = 400) -> np.ndarray:
    return np.concatenate([[0.0], np.logspace(-2, math.log10(t_end), n)])


def _ode_variant(name: str, t: np.ndarray, rate: float, error: str | None = None) -> Trajectory:
    """f_β = v_β (1 − e^{−rate t}): the loss Σ(v − f)²/Σv² is e^{−2 rate t}, so t50 = ln 2/(2 rate)."""
    f = V * (1 - np.exp(-rate * t))[:, None]
    lam = np.ones((len(t), 2)) * [0.2, 0.02] * (1 + 0.1 * rate * t)[:, None]
    return Trajectory("ode", name, ("z0", "z0*z1"), V, t, np.exp(-2 * rate * t), f=f, lam=lam,
                      status=Status(error=error))


def _mlp(t: np.ndarray, insup_rate: float = 1.0) -> Trajectory:
    """Test loss 0.37 e^{−t} (t50 = ln 2, t10 = ln 10), in-support loss e^{−insup_rate t}."""
    f = V * (1 - np.exp(-t))[:, None]
    return Trajectory("mlp", "mlp", ("z0", "z0*z1"), V, t, 0.37 * np.exp(-t), f=f, lam=np.ones((len(t), 2)) * 0.1,
                      in_support_loss=np.exp(-insup_rate * t), f_stderr=0.01 + 0 * f, meta={"digest": "x"})


def _report(t_mlp=None, **kw):
    t = _grid(10.0)
    ode = ODEResult(("z0", "z0*z1"), V, {"lazy": _ode_variant("lazy", t, 0.5),
                                         "displacement": _ode_variant("displacement", t, 1.0)})
    return build_report(load_config(), ode, _mlp(t if t_mlp is None else t_mlp, **kw))


def test_report_metrics_against_closed_forms():
    rep = _report()
    assert rep.mlp.t50 == pytest.approx(math.log(2), rel=1e-9) and rep.mlp.t10 == pytest.approx(math.log(10), rel=1e-9)
    d, lz = rep.variants["displacement"].metrics, rep.variants["lazy"].metrics
    # ODE loss e^{−2 rate t}: t50 = ln 2 / (2 rate); ratios to the MLP's ln 2: 1/(2 rate)
    assert d.t50 == pytest.approx(math.log(2) / 2, rel=1e-6) and d.t50_ratio.value == pytest.approx(0.5, rel=1e-6)
    assert lz.t10_ratio.value == pytest.approx(1.0, rel=1e-6)
    # in-support: ODE Σ(v−f)²/Σv² = e^{−2 rate t}, MLP e^{−t}
    assert rep.variants["lazy"].in_support.t50_ratio.value == pytest.approx(1.0, rel=1e-6)
    assert rep.status == "ok"


def test_report_bounds_the_in_support_ratio_too():
    """An MLP whose in-support loss e^{−t/3} has not reached 10% when it stops at t = 4, against an ODE with in-support
    loss e^{−2t} (t10 = ln 10 / 2): the in-support t10 ratio is below (ln 10 / 2)/4, in report.json and report.md."""
    rep = _report(t_mlp=_grid(4.0, 60), insup_rate=1 / 3)
    js = json.loads(json.dumps(rep.to_json()))
    ins = js["variants"]["displacement"]["in_support"]
    assert ins["t10_ratio"] is None
    assert ins["t10_ratio_range"] == [0.0, pytest.approx(math.log(10) / 2 / 4.0, rel=1e-9)]
    # the MLP's test loss e^{−t} does cross (t10 = ln 10 < 4): that ratio is exact, 0.5
    assert js["variants"]["displacement"]["t10_ratio"] == pytest.approx(0.5, rel=1e-6)
    row = next(line for line in rep.markdown().splitlines() if line.startswith("| displacement"))
    cells = [c.strip() for c in row.split("|")[1:-1]]  # variant, t50, t10, ratios, log-RMS, in-support …
    assert cells[4] == "0.5" and cells[7] == "< 0.288"


def test_report_json_keys_and_a_failed_variant():
    t = _grid(10.0)
    broken = Trajectory("ode", "agop", ("z0", "z0*z1"), V, t[:1], np.ones(1), status=Status(False, 0.0, "diverged"))
    ode = ODEResult(("z0", "z0*z1"), V, {"displacement": _ode_variant("displacement", t, 1.0), "agop": broken})
    rep = build_report(load_config(), ode, _mlp(t))
    js = rep.to_json()
    assert set(js["mlp"]) >= {"t", "loss", "t50", "t10"}
    assert set(js["variants"]["displacement"]) >= {"t", "loss", "t50", "t10", "t50_ratio", "t10_ratio", "log_rms"}
    assert js["variants"]["agop"]["error"] == "diverged" and js["variants"]["agop"]["t50_ratio"] is None
    assert rep.status == "agop: diverged" and js["digest"] == load_config().digest()
    md = rep.markdown()
    assert "| agop | — | — | — | — | — | — | — | — |" in md and "**agop failed**: diverged" in md


def _crossings(ax, key: str) -> dict[str, float]:
    return {line.get_label()[len(key) + 2:]: float(line.get_xdata()[0]) for line in ax.lines
            if line.get_label().startswith(f"_{key} ")}


def test_figure_labels_crossings_targets_and_colours():
    rep = _report()
    fig = rep.figure()
    axes = fig.axes
    assert len(axes) == 3
    for ax in axes:
        assert ax.get_xlabel() == "$t$" and ax.get_ylabel()  # mathtext labels (issue 21)
    # crossings marked on the loss panel, at the analytic times: MLP ln 2 / ln 10, ODE (rate r) ln 2/(2r), ln 10/(2r)
    t50, t10 = _crossings(axes[0], "t50"), _crossings(axes[0], "t10")
    assert t50["MLP test loss"] == pytest.approx(math.log(2), rel=1e-9)
    assert t10["MLP test loss"] == pytest.approx(math.log(10), rel=1e-9)
    assert t50["ODE displacement"] == pytest.approx(math.log(2) / 2, rel=1e-6)
    assert t10["ODE lazy"] == pytest.approx(math.log(10), rel=1e-6)
    levels = sorted(float(line.get_ydata()[0]) for line in axes[0].lines if len(set(line.get_ydata())) == 1
                    and not line.get_label().startswith("_t"))
    assert levels == [0.1, 0.5]
    # the targets v_β as horizontal lines on the mode panel
    flat = {round(float(line.get_ydata()[0]), 12) for line in axes[1].lines if len(set(line.get_ydata())) == 1}
    assert flat >= {0.8, 0.6}
    # modes in mathtext: the legend and the target notes (z0 → z_{0}, z0*z1 → z_{0} z_{1})
    legend = [x.get_text() for x in axes[1].get_legend().get_texts()]
    assert legend[:2] == ["$z_{0}$", "$z_{0} z_{1}$"]
    notes = {x.get_text() for x in axes[1].texts}
    assert notes == {"target $v_{z_{0}} = 0.8$", "target $v_{z_{0} z_{1}} = 0.6$"}
    # one colour per variant, the same in the loss panel and the mode panel
    colours = variant_colours(["lazy", "displacement"])
    in_loss = {line.get_label(): to_rgba(line.get_color()) for line in axes[0].lines}
    assert in_loss["ODE displacement"] == to_rgba(colours["displacement"])
    mode_colours = {to_rgba(line.get_color()) for line in axes[1].lines}
    assert to_rgba(colours["displacement"]) in mode_colours and to_rgba(colours["lazy"]) not in mode_colours
    # one line style per mode: the two displacement curves of the mode panel differ in style
    styles = [line.get_linestyle() for line in axes[1].lines if to_rgba(line.get_color()) ==
              to_rgba(colours["displacement"])]
    assert len(styles) == 2 and styles[0] != styles[1]
    title = fig._suptitle.get_text()
    cfg = load_config()
    assert f"seed {cfg.training.seed}" in title and f"batch {cfg.training.batch}" in title and "t_max = 300" in title


def test_figure_variant_selection():
    rep = _report()
    fig = rep.figure(variant="lazy")
    lazy = to_rgba(variant_colours(["lazy", "displacement"])["lazy"])
    for ax in fig.axes[1:]:
        assert "lazy" in ax.get_title() and any(to_rgba(line.get_color()) == lazy for line in ax.lines)
    both = rep.figure(variant=["lazy", "displacement"])
    assert "lazy, displacement" in both.axes[2].get_title()
    with pytest.raises(ValueError, match="'agop' is not a variant .* choose from lazy, displacement"):
        rep.figure(variant="agop")


def _visible_labels(ax, which: str) -> list[str]:
    FigureCanvasAgg(ax.figure).draw()
    lo, hi = ax.get_ylim() if which == "y" else ax.get_xlim()
    ticks = ax.get_yticklabels() if which == "y" else ax.get_xticklabels()
    return [t.get_text() for t in ticks if lo <= (t.get_position()[1] if which == "y" else t.get_position()[0]) <= hi
            and t.get_text()]


def test_short_run_has_readable_distinct_ticks():
    """t_max = 0.5 and an eigenvalue that barely moves: every log axis keeps at least two distinct tick labels."""
    t = _grid(0.5, 30)
    ode = ODEResult(("z0", "z0*z1"), V, {"displacement": _ode_variant("displacement", t, 0.01)})
    rep = build_report(load_config().replace(training={"t_max": 0.5}), ode, _mlp(t))
    fig = rep.figure()
    for ax, which in ((fig.axes[0], "x"), (fig.axes[0], "y"), (fig.axes[2], "y")):
        labels = _visible_labels(ax, which)
        assert len(labels) >= 2 and len(set(labels)) == len(labels), (which, labels)
        assert all(float(x) > 0 for x in labels)  # plain numbers


def test_report_files(tmp_path):
    rep = _report()
    rep.write(tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "ok"
    assert (tmp_path / "report.md").read_text().startswith("# featureode compare")
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_md_flags_a_small_test_set_for_degree_three_targets():
    """report.md notes that the MLP's t10 is uncertain on a small test set for a target of degree ≥ 3 (naming the
    size and the degree), and says nothing for the default staircase(2) or for a test set of 100 000 points or more."""
    t = _grid(10.0)
    ode = ODEResult(("z0", "z0*z1"), V, {"lazy": _ode_variant("lazy", t, 0.5)})
    for expr, n_test, flagged in (("staircase(2)", 20_000, False), ("h2(z0)*z1", 20_000, True),
                                  ("z0 + z0*z1*z2", 50_000, True), ("h3(z0)", 100_000, False)):
        cfg = load_config().replace(target={"expr": expr}, training={"n_test": n_test})
        text = build_report(cfg, ode, _mlp(t)).markdown()
        assert (f"measured on {n_test} test points. For a target of degree 3" in text) is flagged, (expr, n_test)


def test_report_scores_against_the_exact_population_loss_when_recorded():
    """A run with ``loss_exact_ratio`` (``[training] exact_loss``) is scored against it: the MLP's t50/t10 are its
    closed-form crossings (e^{−2t}: ln 2/2, ln 10/2), the test set's (e^{−t}: ln 2, ln 10) stay in the report and
    report.json, and the ODE ratios follow the exact curve. A small test set is then not flagged."""
    t = _grid(10.0)
    mlp = _mlp(t)
    mlp = dataclasses.replace(mlp, arrays={**(mlp.arrays or {}), "loss_exact_ratio": np.exp(-2 * t)})
    ode = ODEResult(("z0", "z0*z1"), V, {"lazy": _ode_variant("lazy", t, 1.0)})   # e^{−2t}: ratio 1 on the exact
    cfg = load_config().replace(target={"expr": "h2(z0)*z1"}, training={"exact_loss": True})
    rep = build_report(cfg, ode, mlp)
    assert rep.mlp.curve == "exact population loss"
    assert rep.mlp.t50 == pytest.approx(math.log(2) / 2, rel=1e-3) and rep.mlp.t10 == pytest.approx(math.log(10) / 2,
                                                                                                      rel=1e-3)
    assert rep.mlp.test_t10 == pytest.approx(math.log(10), rel=1e-3)
    assert rep.variants["lazy"].metrics.t10_ratio.value == pytest.approx(1.0, rel=2e-3)
    text = rep.markdown()
    assert "MLP (exact population loss): t50 = 0.3466, t10 = 1.151; test loss: t50 = 0.6931, t10 = 2.303" in text
    assert "test points" not in text
    assert rep.mlp.to_json()["curve"] == "exact population loss"
    plain = build_report(cfg.replace(training={"exact_loss": False}), ode, _mlp(t)).markdown()
    assert "MLP (test loss): t50 = 0.6931" in plain and "`[training] exact_loss = true`" in plain
    tanh = build_report(cfg.replace(training={"exact_loss": False}, network={"activation": "tanh"}), ode, _mlp(t))
    assert "exact_loss" not in tanh.markdown() and "A larger `[training] n_test`" in tanh.markdown()
