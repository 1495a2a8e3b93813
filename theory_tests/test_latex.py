"""Feature ODE LaTeX: the standalone ``derive`` document compiles and shows terms, variants and constants."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from _ode_theories import C, LEVELS, extended_theory, make_theory
from featureode import ode
from featureode.config import config_from_dict
from featureode.hermite import Mode
from featureode.latex import derive_document, expr_latex, mode_latex, system_latex, tex_text
from featureode.variants import Variant


def _cfg(**ode):
    return config_from_dict({"data": {"dim": 8}, "target": {"expr": "staircase(2)"}, "ode": ode})


CFG = _cfg(variants=["lazy", "agop", "displacement", "mine"], scale=True,
           custom={"mine": {"closure": "exp(eta*sum_b(B[b,i]*D[b]**2))", "params": {"eta": 0.2},
                            "ablate": ["scale"], "replace": {"eigen_growth": "prod_i(r[i]**(2*B[b,i]))"}}})


def test_document_shows_terms_variants_and_constants():
    theory = make_theory("staircase(2)")
    doc = derive_document(CFG, theory)
    kappa = 0.5**2 * C[1] / LEVELS[1] ** 2  # DESIGN §4: κ = γ² c_1 / Λ_1² from the theory's constants (γ = 0.5)
    for text in (r"\texttt{agop\_growth}", r"\texttt{displacement\_growth}", r"\texttt{mine\_growth}",
                 r"Variant \texttt{lazy+scale}", r"Variant \texttt{mine}", r"removed: \texttt{scale}",
                 r"\texttt{eigen\_growth} (replaced)", r"\eta = 0.2", rf"\kappa = {kappa:.4g}", r"$z_{0} z_{1}$",
                 r"\frac{d f_\beta}{dt}", r"\sum_{\beta \in \mathcal{B}}", r"\prod_{i=0}^{d-1}"):
        assert text in doc, text


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
@pytest.mark.parametrize("basis", ["target", "extended"])
def test_document_compiles_with_pdflatex(tmp_path: Path, basis):
    cfg = CFG.replace(ode={"basis": basis})
    theory = extended_theory("staircase(2)", 8) if basis == "extended" else make_theory("staircase(2)")
    (tmp_path / "ode.tex").write_text(derive_document(cfg, theory))
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "ode.tex"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    assert (tmp_path / "ode.pdf").stat().st_size > 1000


def test_ablation_changes_the_rendering():
    full, cut = (system_latex(Variant("agop", ablate=a).system()) for a in ([], ["agop_growth"]))
    assert r"\underbrace{\kappa" in full and r"removed: \texttt{agop\_growth}" in cut and r"\kappa" not in cut


def test_text_helpers():
    assert tex_text("a_b^c {x} 50% Σg") == r"a\_b\^{}c \{x\} 50\% sum g"
    assert mode_latex(Mode.parse("h2(z0)*z3")) == "h_{2}(z_{0}) z_{3}" and mode_latex(Mode()) == "1"


def test_printer_uses_design_notation():
    """Each indexed object prints as its DESIGN §4 symbol (hand-written here): c_{|β|}, g^β, β_i, λ_β(0), K̃_{βα}."""
    b, a, i = ode.beta, ode.alpha, ode.i
    cases = [(ode.c[b], r"c_{|\beta|}"), (ode.gpow[b], r"g^{\beta}"), (ode.B[b, i], r"{\beta}_{i}"),
             (ode.lam0[b], r"\lambda_{\beta}(0)"), (ode.lam[b], r"\lambda_{\beta}"),
             (ode.K[b, a], r"\tilde K_{\beta\alpha}"), (ode.f[a], r"f_{\alpha}"), (ode.D[b], r"D_{\beta}"),
             (ode.v[b], r"v_{\beta}"), (ode.g[i], r"g_{i}"), (ode.r[i], r"r_{i}"), (ode.rho[b], r"\rho_{\beta}")]
    for expr, tex in cases:
        assert expr_latex(expr) == tex, (expr, expr_latex(expr))
    assert expr_latex(ode.mode_sum(ode.D[b])) == r"\sum_{\beta \in \mathcal{B}} D_{\beta}"
    assert expr_latex(ode.direction_product(ode.r[i])) == r"\prod_{i=0}^{d-1} r_{i}"
