"""The diagnostics figure: panels per variant, measured against predicted, and clear messages for what is missing."""
from __future__ import annotations

import numpy as np
import pytest

from featureode.export.diagnostics import DiagnosticsError, diagnostics_figure, save_diagnostics
from featureode.results.trajectory import Trajectory

T = np.concatenate([[0.0], np.geomspace(0.1, 100.0, 30)])
MODES = ("z0", "z0*z1")


def _mlp(lam0=(0.3, 0.05), with_diagnostics: bool = True) -> Trajectory:
    grow = 1 + 0.01 * T
    lam = np.outer(grow, lam0)
    arrays = {}
    if with_diagnostics:
        arrays = {"a2": 1 + 0.02 * T, **{f"lambda_parts/{p}": lam * w for p, w in
                                          (("readout", 0.4), ("weights", 0.5), ("bias", 0.1))}}
    return Trajectory("mlp", "mlp", MODES, np.array([0.8, 0.6]), T, np.exp(-T / 10), lam=lam,
                      r=np.ones((T.size, 4)) + 0.01 * T[:, None], arrays=arrays)


def _ode(name: str, lam0=(0.3, 0.05)) -> Trajectory:
    lam = np.outer(1 + 0.008 * T, lam0)
    return Trajectory("ode", name, MODES, np.array([0.8, 0.6]), T, np.exp(-T / 9), lam=lam,
                      r=np.ones((T.size, 4)) + 0.005 * T[:, None], arrays={"s": np.ones(T.size)})


def _texts(fig) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_one_panel_per_quantity_with_every_variant_overlaid_on_a_log_time_axis():
    """Panels: λ growth per mode, the leading mode's parts, r_i per support direction, ⟨a²⟩ — as many for two
    variants as for one; each variant's curve in its colour against the measurement (dashed, black)."""
    from matplotlib.colors import to_rgba

    from featureode.export.diagnostics import diagnostics_panels
    from featureode.export.style import variant_colour

    variants = {"displacement": _ode("displacement"), "lazy": _ode("lazy")}
    fig = diagnostics_figure(_mlp(), variants, title="x")
    panels = diagnostics_panels(_mlp(), variants=variants)
    assert panels == [("mode", "z0"), ("mode", "z0*z1"), ("part", "readout"), ("part", "weights"),
                      ("part", "bias"), ("r", "0"), ("r", "1"), ("a2", "")]
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 8 and len(diagnostics_figure(_mlp(), {"lazy": _ode("lazy")}).axes) == 8
    assert all(ax.get_xscale() == "log" for ax in shown)
    lines = shown[0].get_lines()
    measured = next(line for line in lines if line.get_label() == "$z_{0}$ measured")  # modes in mathtext
    assert measured.get_linestyle() == "--" and to_rgba(measured.get_color()) == to_rgba("black")
    assert {line.get_label() for line in shown[1].get_lines()} == {
        "$z_{0} z_{1}$ measured", "$z_{0} z_{1}$ displacement", "$z_{0} z_{1}$ lazy"}
    for line in lines:
        if not line.get_label().endswith("measured"):
            assert to_rgba(line.get_color()) == to_rgba(variant_colour(line.get_label().split()[-1]))
    np.testing.assert_allclose(measured.get_ydata(), (1 + 0.01 * T)[1:])      # λ(t)/λ(0), t > 0 only
    (pred,) = [ln for ln in lines if ln.get_label() == "$z_{0}$ lazy"]
    np.testing.assert_allclose(pred.get_ydata(), (1 + 0.008 * T)[1:])
    assert "lambda_parts" not in _texts(fig) and "⟨a²⟩" not in _texts(fig)
    (key,) = fig.legends  # one key for the figure, none in the panels
    assert [t.get_text() for t in key.get_texts()] == ["ODE displacement", "ODE lazy", "measured (MLP)"]
    assert all(ax.get_legend() is None for ax in fig.axes)


def test_missing_measurements_and_zero_eigenvalues_are_said_not_crashed():
    fig = diagnostics_figure(_mlp(lam0=(0.3, 0.0), with_diagnostics=False), {"second_order": _ode("second_order")})
    text = _texts(fig)
    assert "λ(0) = 0, no growth ratio: z0*z1" in text
    assert "no measured lambda_parts" in text and "no measured ⟨a²⟩" in text


def test_bad_requests_are_named(tmp_path):
    with pytest.raises(DiagnosticsError, match="at least one ODE variant"):
        diagnostics_figure(_mlp(), {})
    with pytest.raises(DiagnosticsError, match="h2\\(z0\\) not measured.*measured modes: z0, z0\\*z1"):
        diagnostics_figure(_mlp(), {"lazy": _ode("lazy")}, modes=["h2(z0)"])
    path = save_diagnostics(_mlp(), {"lazy": _ode("lazy")}, tmp_path)
    assert path.name == "report_diagnostics.png" and path.stat().st_size > 1000
