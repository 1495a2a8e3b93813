"""The derivation script runs, its SymPy checks pass, its formulas are the package's, and the LaTeX compiles."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sympy as sp

from featureode.calculus.activations import ACTIVATIONS

SCRIPT = Path(__file__).resolve().parents[1] / "derivations" / "activation_coefficients.py"


@pytest.fixture(scope="module")
def derivation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("derivation") / "activation_coefficients.tex"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--max-order", "4"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_script_prints_steps_and_checks(derivation: tuple[Path, str]) -> None:
    _, stdout = derivation
    assert "Gaussian integration by parts" in stdout and "ReLU" in stdout and "erf" in stdout
    assert "[checked] m_0 equals the direct integral" in stdout
    assert "[checked] m_4 general form" in stdout
    assert "SymPy checks passed" in stdout


def test_latex_uses_the_package_expressions(derivation: tuple[Path, str]) -> None:
    out, _ = derivation
    tex = out.read_text(encoding="utf-8")
    assert tex.startswith("\\documentclass") and tex.rstrip().endswith("\\end{document}")
    for name in ("relu", "erf"):
        act = ACTIVATIONS[name]
        for k in range(5):
            assert sp.latex(act.mean_expr(k)) in tex, (name, k)
            assert sp.latex(act.hermite_expr(k)) in tex, (name, k)


def test_bad_order_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.tex"), "--max-order", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "--max-order must be ≥ 2, got 1" in proc.stderr


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_latex_compiles(derivation: tuple[Path, str]) -> None:
    out, _ = derivation
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", out.name], cwd=out.parent,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert out.with_suffix(".pdf").stat().st_size > 10_000


CLOSURE_SCRIPT = Path(__file__).resolve().parents[1] / "derivations" / "closure_second_order.py"


@pytest.mark.slow
def test_second_order_closure_derivation_checks_and_writes_the_terms(tmp_path: Path) -> None:
    from featureode.ode import terms as ode
    from featureode.export.latex import expr_latex

    out = tmp_path / "closure_second_order.tex"
    proc = subprocess.run([sys.executable, str(CLOSURE_SCRIPT), "--out", str(out), "--mc-neurons", "100000"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for step in ("Picard iterations", "order γD of λ_β vanishes", "linear σ: S_{z0,z0} = 2 g_0",
                 "within 4 standard errors of the closed form",
                 "RESUMMED_GROWTH equals the exact flow for the driving mode z0", "3/4 of the exact growth",
                 "rational_growth: λ_z1 = 1 + γ² S D² + O(D⁴)", "never a sign change"):
        assert step in proc.stdout, step
    assert "SymPy checks passed (23)" in proc.stdout
    tex = out.read_text(encoding="utf-8")
    assert all(expr_latex(t.body) in tex for t in (ode.SECOND_ORDER_GROWTH, ode.RESUMMED_GROWTH, ode.RATIONAL_GROWTH))
    if shutil.which("pdflatex"):
        run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", out.name], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout[-2000:]


def test_second_order_closure_derivation_refuses_a_tiny_sample(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(CLOSURE_SCRIPT), "--out", str(tmp_path / "x.tex"),
                           "--mc-neurons", "10"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--mc-neurons must be ≥ 1000, got 10" in proc.stderr


GROWTH_SCRIPT = Path(__file__).resolve().parents[1] / "derivations" / "growth_algebra.py"


def test_growth_algebra_derivation_checks_the_tilted_laws() -> None:
    """The cumulant formula of the tilted laws of |ŵ|² equals the direct expansion in SymPy, and the package's laws
    on the kernel's grid equal it numerically (derivations/growth_algebra.py)."""
    proc = subprocess.run([sys.executable, str(GROWTH_SCRIPT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "K = [0, 1, 1, 3]" in proc.stdout and "on the grid = closed form to 1e-7" in proc.stdout
    assert "SymPy checks passed (23)" in proc.stdout
