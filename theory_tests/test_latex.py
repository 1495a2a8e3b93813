"""Feature ODE LaTeX: the standalone ``derive`` document compiles and shows terms, variants and constants."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from _ode_theories import extended_theory, make_theory
from featureode.config import config_from_dict
from featureode.hermite import Mode
from featureode.latex import derive_document, mode_latex, system_latex, tex_text
from featureode.variants import Variant


def _cfg(**ode):
    return config_from_dict({"data": {"dim": 8}, "target": {"expr": "staircase(2)"}, "ode": ode})


CFG = _cfg(variants=["lazy", "agop", "displacement", "mine"], scale=True,
           custom={"mine": {"closure": "exp(eta*sum_b(B[b,i]*D[b]**2))", "params": {"eta": 0.2},
                            "ablate": ["scale"], "replace": {"eigen_growth": "prod_i(r[i]**(2*B[b,i]))"}}})


def test_document_shows_terms_variants_and_constants():
    theory = make_theory("staircase(2)")
    doc = derive_document(CFG, theory)
    for text in (r"\texttt{agop\_growth}", r"\texttt{displacement\_growth}", r"\texttt{mine\_growth}",
                 r"Variant \texttt{lazy+scale}", r"Variant \texttt{mine}", r"removed: \texttt{scale}",
                 r"\texttt{eigen\_growth} (replaced)", r"\eta = 0.2", r"\kappa = 0.1298", r"$z_{0} z_{1}$",
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
