"""Feature ODE LaTeX: the standalone ``derive`` document compiles and shows terms, variants and constants."""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _ode_theories import C, LEVELS, extended_theory, make_theory, theory_from_modes
from featureode.ode import terms as ode
from featureode.config import config_from_dict
from featureode.calculus.hermite import Mode
from featureode.export.latex import (_num, derive_document, derive_fragment, doc_latex, expr_latex, mode_latex,
                                     system_latex, tex_text)
from featureode.ode.variants import Variant


def latex_ready() -> bool:
    """pdflatex with booktabs (texlive-latex-base and texlive-latex-recommended), what the documents need."""
    if shutil.which("pdflatex") is None or shutil.which("kpsewhich") is None:
        return False
    return subprocess.run(["kpsewhich", "booktabs.sty"], capture_output=True).returncode == 0


NO_LATEX = "pdflatex with booktabs is not installed (texlive-latex-base, texlive-latex-recommended)"


def _cfg(**ode):
    return config_from_dict({"data": {"dim": 8}, "target": {"expr": "staircase(2)"}, "ode": ode})


CFG = _cfg(variants=["lazy", "agop", "displacement", "mine"], scale=True,
           custom={"mine": {"closure": "exp(eta*sum_b(B[b,i]*D[b]**2))", "params": {"eta": 0.2},
                            "ablate": ["scale"], "replace": {"eigen_growth": "prod_i(r[i]**(2*B[b,i]))"}}})


def test_document_shows_terms_variants_and_constants():
    theory = make_theory("staircase(2)")
    doc = derive_document(CFG, theory)
    kappa = 0.5**2 * C[1] / LEVELS[1] ** 2  # theory §4: κ = γ² c_1 / Λ_1² from the theory's constants (γ = 0.5)
    for text in (r"\texttt{agop\_growth}", r"\texttt{displacement\_growth}", r"\texttt{mine\_growth}",
                 r"Variant \texttt{lazy+scale}", r"Variant \texttt{mine}", r"removed: \texttt{scale}",
                 r"\texttt{eigen\_growth} (replaced)", r"\eta = 0.2", rf"\kappa = {kappa:.4g}", r"$z_{0} z_{1}$",
                 r"\frac{d f_\beta}{dt}", r"\sum_{\beta \in \mathcal{B}}", r"\prod_{i=0}^{d-1}"):
        assert text in doc, text


@pytest.mark.skipif(not latex_ready(), reason=NO_LATEX)
@pytest.mark.parametrize("basis", ["target", "extended", "long", "resummed"])
def test_document_compiles_with_pdflatex(tmp_path: Path, basis):
    """It compiles in one pass, and neither the setup paragraph, the term list nor the Constants section (spectrum,
    mode and level tables) overflows the page: pdflatex reports no overfull box on their lines ("long": 70 modes at
    d = 70; "resummed": the resummed and rational laws, resummed's named sub-expressions listed after its term)."""
    if basis == "resummed":
        cfg = _cfg(variants=["resummed", "rational"])
        theory = dataclasses.replace(make_theory("staircase(2)"), activation="relu", bias_std=0.5)
    elif basis == "long":
        cfg = CFG.replace(data={"dim": 70})
        theory = theory_from_modes({f"z{i}": 70**-0.5 for i in range(70)}, dim=70)
    else:
        cfg = CFG.replace(ode={"basis": basis})
        theory = extended_theory("staircase(2)", 8) if basis == "extended" else make_theory("staircase(2)")
    doc = derive_document(cfg, theory)
    (tmp_path / "ode.tex").write_text(doc)
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "ode.tex"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    assert (tmp_path / "ode.pdf").stat().st_size > 1000
    lines = doc.splitlines()
    setup = next(i for i, line in enumerate(lines, 1) if line.startswith("Target "))
    constants = lines.index(r"\section*{Constants}") + 1
    terms = (lines.index(r"\begin{description}") + 1, lines.index(r"\end{description}") + 1)
    log = (tmp_path / "ode.log").read_text(errors="replace")
    overfull = [int(a) for a in re.findall(r"Overfull \\hbox .* at lines (\d+)--\d+", log)]
    assert [a for a in overfull if a == setup or terms[0] <= a <= terms[1] or a >= constants] == [], log[-2000:]
    assert "Rerun" not in log
    if basis == "resummed":
        assert "with\n\\begin{align*}\n\\xi_{\\alpha} &= " in doc and r"\omega_{\alpha}^{2} &= " in doc
    if basis == "long":  # 70 rows: two tabulars of at most 40, each with the header
        assert doc.count(r"$\beta$ & $v_\beta$") == 2 and "$z_{69}$" in doc


@pytest.mark.parametrize("x, tex", [
    (9.176e-05, r"9.176 \times 10^{-5}"), (1e-6, r"10^{-6}"), (-2.5e-7, r"-2.5 \times 10^{-7}"),
    (23456.0, r"2.346 \times 10^{4}"), (0.5, "0.5"), (0.001117, "0.001117"), (300.0, "300"), (0.0, "0"),
    (-0.25, "-0.25"), (None, r"\text{--}"), (float("nan"), r"\text{--}"), (float("inf"), r"\text{--}")])
def test_numbers_are_typeset_as_powers_of_ten(x, tex):
    assert _num(x) == tex


@given(st.floats(-1e30, 1e30, allow_nan=False).filter(lambda v: v == 0 or abs(v) > 1e-300))
def test_typeset_numbers_read_back_to_four_digits(x):
    """m × 10^{e} (or 10^{e}) read back as a float is x to the 4 significant digits asked for."""
    text = _num(x)
    m = re.fullmatch(r"(-?[\d.]+) \\times 10\^\{(-?\d+)\}|(-?)10\^\{(-?\d+)\}|(-?[\d.]+)", text)
    assert m, text
    if m.group(1):
        back = float(m.group(1)) * 10.0 ** int(m.group(2))
    elif m.group(4):
        back = float(m.group(3) + "1") * 10.0 ** int(m.group(4))
    else:
        back = float(m.group(5))
    assert back == pytest.approx(x, rel=5.001e-4, abs=1e-300)


def test_spectrum_and_setup_text():
    """Every g_i of d = 16 is listed by index (g_15 too); d is stated once; no e-notation anywhere; the eigenvalues of
    a quadrature theory carry no ± 0; a Monte Carlo theory gets a standard-error column."""
    cfg = config_from_dict({"data": {"dim": 16}, "target": {"expr": "staircase(2)"}})
    theory = make_theory("staircase(2)", 16)
    doc = derive_document(cfg, theory)
    g = theory.g
    for i in range(16):
        assert f"$g_{{{i}}}$" in doc and f"${_num(g[i])}$" in doc
    assert doc.count("d = 16") == 1 and r"(i + 3)^{-1.5}" in doc
    assert not re.search(r"\de[-+]?\d|\\mathrm\{e\}", doc) and r"\pm" not in doc and "std.\\ error" not in doc
    err = np.asarray(theory.lambda_exact) * 0.01
    sampled = derive_document(cfg, dataclasses.replace(theory, lambda_exact_stderr=err))
    assert "std.\\ error" in sampled and f"${_num(err[0], 2)}$" in sampled


def test_long_spectrum_is_shortened_and_says_so():
    cfg = config_from_dict({"data": {"dim": 100}, "target": {"expr": "z0"}})
    doc = derive_document(cfg, make_theory("z0", 100))
    assert "$g_{0}$" in doc and "$g_{99}$" in doc and "$g_{60}$" not in doc
    assert r"$g_{56}, \dots, g_{91}$ not shown" in doc


def test_ablation_changes_the_rendering():
    full, cut = (system_latex(Variant("agop", ablate=a).system()) for a in ([], ["agop_growth"]))
    # constants first in a sum (issue 21): 1 + κ Σ …, not κ Σ … + 1
    assert r"\underbrace{1 + \kappa" in full and r"removed: \texttt{agop\_growth}" in cut and r"\kappa" not in cut


def test_text_helpers():
    assert tex_text("a_b^c {x} 50% Σg") == r"a\_b\^{}c \{x\} 50\% sum g"
    assert mode_latex(Mode.parse("h2(z0)*z3")) == "h_{2}(z_{0}) z_{3}" and mode_latex(Mode()) == "1"


def test_printer_uses_design_notation():
    """Each indexed object prints as its theory §4 symbol (hand-written here): c_{|β|}, g^β, β_i, λ_β(0), K̃_{βα}."""
    b, a, i = ode.beta, ode.alpha, ode.i
    cases = [(ode.c[b], r"c_{|\beta|}"), (ode.gpow[b], r"g^{\beta}"), (ode.B[b, i], r"{\beta}_{i}"),
             (ode.lam0[b], r"\lambda_{\beta}(0)"), (ode.lam[b], r"\lambda_{\beta}"),
             (ode.K[b, a], r"\tilde K_{\beta\alpha}"), (ode.f[a], r"f_{\alpha}"), (ode.D[b], r"D_{\beta}"),
             (ode.v[b], r"v_{\beta}"), (ode.g[i], r"g_{i}"), (ode.r[i], r"r_{i}"), (ode.rho[b], r"\rho_{\beta}")]
    for expr, tex in cases:
        assert expr_latex(expr) == tex, (expr, expr_latex(expr))
    assert expr_latex(ode.mode_sum(ode.D[b])) == r"\sum_{\beta \in \mathcal{B}} D_{\beta}"
    assert expr_latex(ode.direction_product(ode.r[i])) == r"\prod_{i=0}^{d-1} r_{i}"


def test_natural_term_order_and_math_in_prose():
    """The residual prints v − f, constants lead a sum, a bracketed sum follows the other factors; the lazy closure's
    description r_i = 1 is math, not escaped text."""
    doc = derive_document(CFG, make_theory("staircase(2)"))
    assert r"v_{\beta} - f_{\beta}" in doc and r"- f_{\beta} + v_{\beta}" not in doc
    assert r"\lambda_{\beta} \left(v_{\beta} - f_{\beta}\right)" in doc
    assert r"1 + \kappa \sum" in doc and r"+ 1}" not in doc
    assert r"$r_{i} = 1$: the pure kernel regime" in doc and r"r\_i" not in doc
    assert doc_latex("D accumulates η and x_{ij} ≥ 0") == r"$D$ accumulates $\eta$ and $x_{ij} \ge 0$"


def test_one_shared_block_and_per_variant_differences():
    doc = derive_document(CFG, make_theory("staircase(2)"))
    assert doc.count(r"\frac{d f_\beta}{dt}") == 1 and doc.count(r"\frac{d D_\beta}{dt}") == 1
    assert doc.count("r_i &=") == 4  # the one equation every variant has its own form of
    for label in ("lazy+scale", "agop+scale", "displacement+scale", "mine"):
        assert rf"\intertext{{\texttt{{{tex_text(label)}}}:}}" in doc
    assert r"\toprule" in doc and r"\midrule" in doc and r"\bottomrule" in doc and r"\hline" not in doc


def test_fragment_is_equations_only_with_or_without_labels():
    frag = derive_fragment(CFG)
    assert r"\documentclass" not in frag and r"\section" not in frag and r"\begin{document}" not in frag
    assert r"\underbrace" in frag and r"\texttt{kernel\_flow}" in frag
    plain = derive_fragment(CFG, labels=False)
    assert r"\underbrace" not in plain and r"\texttt{kernel\_flow}" not in plain
    # the bodies put in place, bracketed where a sum is a factor: ρ_β = s Π_i r_i^{β_i} (no scale: removed → 1)
    assert r"\frac{d f_\beta}{dt} &= \lambda_{\beta} \left(v_{\beta} - f_{\beta}\right)" in plain


def _pdflatex(folder: Path, name: str) -> str:
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", name], cwd=folder,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    return (folder / name).with_suffix(".log").read_text(errors="replace")


@pytest.mark.skipif(not latex_ready(), reason=NO_LATEX)
def test_fragment_and_a_pdf_figure_drop_into_a_two_column_paper(tmp_path: Path):
    """A plain article with amsmath alone \\inputs the fragment of every built-in closure; a two-column article
    with the fragment of every built-in closure on the extended basis, with and without the term names (the long
    second-order growth broken over two lines; resummed's growth in its named sub-expressions ξ_α, ζ_α, ω_α, each
    on its own line; the mean-field variants' velocity, definitions, residuals and losses) and the report and
    diagnostics figures in PDF (column style, three variants) compile with no overfull box over 1 pt."""
    from test_figures import _report

    every = _cfg(variants=["lazy", "agop", "displacement", "second_order", "resummed", "rational", "meanfield",
                           "meanfield+tail", "meanfield+whole"], basis="extended")
    (tmp_path / "every.tex").write_text(derive_fragment(every))
    (tmp_path / "ode.tex").write_text(derive_fragment(every) + "\nText.\n" + derive_fragment(every, labels=False))
    assert r"\begin{aligned}[t]" in (tmp_path / "ode.tex").read_text()
    assert r"\xi_{\alpha} &= " in (tmp_path / "ode.tex").read_text()
    assert r"\frac{d\hat{w}_i}{dt}" in (tmp_path / "ode.tex").read_text()
    _report().write(tmp_path, fmt="pdf", style="column")
    from test_diagnostics import _mlp as diag_mlp
    from test_diagnostics import _ode as diag_ode
    from featureode.export.diagnostics import save_diagnostics

    save_diagnostics(diag_mlp(), {n: diag_ode(n) for n in ("lazy", "displacement", "resummed")}, tmp_path,
                     title="z0 + z0*z1, d = 16", fmt="pdf", style="column")
    (tmp_path / "plain.tex").write_text("\\documentclass{article}\n\\usepackage{amsmath}\n\\begin{document}\n"
                                        "\\input{every}\n\\end{document}\n")
    _pdflatex(tmp_path, "plain.tex")
    (tmp_path / "paper.tex").write_text(
        "\\documentclass[twocolumn]{article}\n\\usepackage{amsmath,booktabs,graphicx}\n\\begin{document}\n"
        "\\section{Model}\nText.\n\\input{ode}\nText.\n\\begin{figure}[t]\n\\includegraphics{report.pdf}\n"
        "\\caption{ODE against MLP.}\n\\end{figure}\n"
        "\\begin{figure}[p]\n\\includegraphics{report_diagnostics.pdf}\n\\caption{Diagnostics.}\n\\end{figure}\n"
        "\\end{document}\n")
    log = _pdflatex(tmp_path, "paper.tex")
    over = [float(x) for x in re.findall(r"Overfull \\[hv]box \(([\d.]+)pt too", log)]
    assert all(x <= 1.0 for x in over), log[-3000:]
