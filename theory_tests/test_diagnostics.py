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


def test_one_row_of_four_panels_per_variant_on_a_log_time_axis():
    fig = diagnostics_figure(_mlp(), {"displacement": _ode("displacement"), "lazy": _ode("lazy")}, title="x")
    assert len(fig.axes) == 8
    assert all(ax.get_xscale() == "log" for ax in fig.axes)
    lines = fig.axes[0].get_lines()
    measured = next(line for line in lines if line.get_label() == "$z_{0}$ measured")  # modes in mathtext
    assert {line.get_label() for line in lines} >= {"$z_{0} z_{1}$ measured", "$z_{0} z_{1}$ displacement"}
    np.testing.assert_allclose(measured.get_ydata(), (1 + 0.01 * T)[1:])      # λ(t)/λ(0), t > 0 only
    assert "lambda_parts" not in _texts(fig) and "⟨a²⟩" not in _texts(fig)


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
