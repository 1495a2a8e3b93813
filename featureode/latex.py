"""LaTeX rendering of feature-ODE systems (DESIGN §4) and the standalone ``derive`` document.

:func:`system_latex` prints a resolved system in indexed form, each term under a brace with its name (removed terms
show their neutral value, replaced ones are marked). :func:`derive_document` writes a document that compiles with
plain ``pdflatex`` (amsmath, amssymb, geometry only): setup, the terms, every variant with its ablations, and the
constants with their values.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import sympy as sp
from sympy.printing.latex import LatexPrinter

from . import ode
from .hermite import Mode
from .indexed import IndexSpace
from .variants import Variant, closure_names, get_closure, variants_from_config

_INDEXED = {"f": "f_{%s}", "D": "D_{%s}", "v": "v_{%s}", "lam0": r"\lambda_{%s}(0)", "lam": r"\lambda_{%s}",
            "rho": r"\rho_{%s}", "gpow": "g^{%s}", "c": "c_{|%s|}", "g": "g_{%s}", "r": "r_{%s}",
            "B": "{%s}_{%s}", "K": r"\tilde K_{%s%s}", "S": r"S_{%s%s}", "Sd": r"\bar S_{%s}"}
_LHS = {"r": "r_i", "s": "s", "rho": r"\rho_\beta", "lam": r"\lambda_\beta(t)",
        "dfdt": r"\frac{d f_\beta}{dt}", "dDdt": r"\frac{d D_\beta}{dt}"}


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "_": r"\_", "^": r"\^{}", "#": r"\#",
                "$": r"\$", "%": r"\%", "&": r"\&", "~": r"\~{}"}


_ASCII = {"Σ": "sum ", "−": "-", "≤": "<=", "≥": ">=", "…": "...", "²": "^2"}


def tex_text(text: str) -> str:
    """Escape text for LaTeX (a few symbols spelled out, other non-ASCII characters become ``?``)."""
    text = "".join(_ASCII.get(ch, ch) for ch in text).encode("ascii", "replace").decode()
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in text)


def mode_latex(mode: Mode) -> str:
    """``h_α`` in math mode: ``z_0 z_1``, ``h_2(z_0)``, ``1``."""
    if not mode.items:
        return "1"
    return " ".join(f"z_{{{i}}}" if n == 1 else f"h_{{{n}}}(z_{{{i}}})" for i, n in mode.items)


class _Printer(LatexPrinter):
    """LaTeX in DESIGN notation; term placeholders are printed as braces labelled with the term name."""

    def __init__(self, fill: Mapping[str, tuple[sp.Expr, str]] | None = None,
                 space: IndexSpace | None = None) -> None:
        super().__init__({"mul_symbol": None})
        self.fill = dict(fill or {})
        self.space = space or ode.index_space()

    def _print_Indexed(self, expr: sp.Indexed) -> str:
        template = _INDEXED.get(str(expr.base))
        idx = [self._print(k) for k in expr.indices]
        if template is None:
            return f"{self._print(expr.base.label)}_{{{','.join(idx)}}}"
        if str(expr.base) in ("K", "S"):
            return template % (idx[0], idx[1])
        return template % tuple(idx) if template.count("%s") == len(idx) else template % idx[0]

    def _reduce(self, expr: sp.Expr, op: str) -> str:
        idx = expr.limits[0][0]
        if self.space.kinds[idx] == "mode":
            under = rf"{self._print(idx)} \in \mathcal{{B}}"
        else:
            under = rf"{self._print(idx)}=0}}^{{d-1"
        body = self._print(expr.function)
        if isinstance(expr.function, sp.Add):
            body = rf"\left({body}\right)"
        return rf"{op}_{{{under}}} {body}"

    def _print_Sum(self, expr: sp.Sum) -> str:
        return self._reduce(expr, r"\sum")

    def _print_Product(self, expr: sp.Product) -> str:
        return self._reduce(expr, r"\prod")

    def _print_Function(self, expr: sp.Expr, exp: Any = None) -> str:
        name = type(expr).__name__
        if name not in self.fill:
            return super()._print_Function(expr, exp)
        body, label = self.fill[name]
        return rf"\underbrace{{{self._print(body)}}}_{{\text{{{label}}}}}"


def expr_latex(expr: sp.Expr) -> str:
    """An indexed expression in DESIGN notation."""
    return _Printer().doprint(expr)


def system_latex(system: ode.System) -> str:
    """The system as an ``align*`` block, every term braced and named (removed: neutral value, marked)."""
    fill = {}
    for t in system.terms:
        mark = " (replaced)" if t.name in system.replaced else ""
        fill[t.name] = (t.body, rf"\texttt{{{tex_text(t.name)}}}{mark}")
    for name in system.removed:
        term = next(t for t in _all_terms() if t.name == name)
        fill[name] = (term.neutral, rf"removed: \texttt{{{tex_text(name)}}}")
    printer = _Printer(fill, system.space)
    rows = [rf"{_LHS[a.name]} &= {printer.doprint(a.template)}" for a in system.assignments]
    return "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"


def _all_terms() -> list[ode.Term]:
    return list(ode.CORE_TERMS) + [c.term for c in map(get_closure, closure_names()) if c.term is not None]


def _num(x: float | None, digits: int = 4) -> str:
    if x is None or not np.isfinite(x):
        return "--"
    return f"{x:.{digits}g}".replace("e", r"\mathrm{e}")


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    header = list(header)
    lines = [r"\begin{tabular}{" + "l" * len(header) + "}", r"\hline", " & ".join(header) + r" \\", r"\hline"]
    lines += [" & ".join(row) + r" \\" for row in rows]
    return "\n".join(lines + [r"\hline", r"\end{tabular}"])


def _variant_section(variant: Variant, basis: str, theory: Any) -> str:
    system = variant.system(basis)
    closure = variant.closure_obj
    kappa = theory.kappa if variant.kappa is None else variant.kappa
    facts = [rf"closure \texttt{{{tex_text(closure.name)}}}: {tex_text(closure.doc)}"]
    if any(sp.Symbol("kappa") in a.expr.free_symbols for a in system.assignments):
        facts.append(rf"$\kappa = {_num(kappa)}$" + (r" (derived, $\gamma^2 c_1/\Lambda_1^2$)"
                                                      if variant.kappa is None else " (given)"))
    facts.append("scale factor " + ("on" if variant.scale else "off"))
    if system.removed:
        facts.append("removed terms: " + ", ".join(rf"\texttt{{{tex_text(n)}}}" for n in system.removed))
    if system.replaced:
        facts.append("replaced terms: " + ", ".join(rf"\texttt{{{tex_text(n)}}}" for n in system.replaced))
    uses = set().union(*(a.expr.free_symbols | {x.base for x in a.expr.atoms(sp.Indexed)}
                         for a in system.assignments))
    if ode.q in uses:
        from .parametrization import get_parametrization
        name = getattr(theory, "parametrization", None) or "meanfield"
        q = get_parametrization(name).closure_prefactor(float(theory.gamma))
        facts.append(rf"$q = {_num(q)}$ (closure prefactor of the {tex_text(name)} parametrization)")
    facts += [rf"${expr_latex(sp.Symbol(k))} = {_num(val)}$" for k, val in variant.param_values.items()]
    out = (rf"\subsection*{{Variant \texttt{{{tex_text(variant.label)}}}}}" + "\n" + "; ".join(facts) + ".\n"
           + system_latex(system))
    if ode.S in uses:
        out += "\n" + _second_order_table(theory)
    return out


def _second_order_table(theory: Any) -> str:
    """``S_{βα}`` (columns: the target's modes, which drive) with their Monte Carlo standard errors."""
    from .second_order import second_order_constants

    drivers = [k for k, vb in enumerate(np.asarray(theory.target, float)) if vb != 0]
    so = second_order_constants(theory.modes, theory.g, theory.activation, theory.bias_std, drivers=drivers)
    head = [r"$\beta$"] + [rf"$S_{{\beta,{mode_latex(theory.modes[k])}}}$" for k in drivers]
    rows = [[f"${mode_latex(m)}$"] + [rf"${_num(so.S[r, k])} \pm {_num(so.S_stderr[r, k], 2)}$" for k in drivers]
            for r, m in enumerate(theory.modes)]
    return (rf"Second-order constants (Monte Carlo over ${so.n_neurons}$ init neurons):" + "\n\n"
            + _table(head, rows) + "\n")


def _constants(theory: Any) -> str:
    g = np.asarray(theory.g, dtype=float)
    lam_e, err, lam_h = (np.asarray(x, dtype=float) for x in
                         (theory.lambda_exact, theory.lambda_exact_stderr, theory.lambda_hea))
    rows = [[f"${mode_latex(m)}$", f"${_num(float(vb))}$", f"${_num(le)} \\pm {_num(se, 2)}$", f"${_num(lh)}$",
             f"${_num(float(m.g_power(g)))}$"]
            for m, vb, le, se, lh in zip(theory.modes, np.asarray(theory.target, float), lam_e, err, lam_h)]
    modes = _table([r"$\beta$", r"$v_\beta$", r"$\lambda_\beta(0)$ exact", r"$\lambda_\beta(0)$ HEA",
                    r"$g^\beta$"], rows)
    lev = _table(["$l$", r"$\Lambda_l$", "$c_l$"],
                 [[f"${k}$", f"${_num(float(a))}$", f"${_num(float(b))}$"]
                  for k, (a, b) in enumerate(zip(theory.level_coefficients, theory.c))])
    spectrum = ", ".join(f"{_num(x, 3)}" for x in g)
    return ("\\section*{Constants}\n"
            + rf"$\gamma = {_num(theory.gamma)}$, derived $\kappa = \gamma^2 c_1/\Lambda_1^2 = {_num(theory.kappa)}$;"
            + rf" spectrum $g_0, \dots, g_{{{g.size - 1}}} = {spectrum}$." + "\n\n" + modes + "\n\n\\medskip\n"
            + lev + "\n")


def derive_document(cfg: Any, theory: Any = None) -> str:
    """A standalone LaTeX document for the config's ODE family (``theory``: a ``KernelTheory``; computed with
    ``featureode.kernel.kernel_theory`` when ``None``)."""
    o = cfg.ode
    if theory is None:
        from . import kernel
        theory = kernel.kernel_theory(cfg, with_gram=o.basis == "extended")
    variants = variants_from_config(o)
    n = cfg.network
    setup = (rf"Target \texttt{{{tex_text(cfg.target.expr)}}} in $d = {cfg.data.dim}$ dimensions "
             rf"({tex_text(cfg.spectrum().description)}); activation \texttt{{{tex_text(n.activation)}}}, "
             rf"richness $\gamma = {_num(n.richness)}$, bias scale $\sigma_b = {_num(n.bias_std)}$; "
             rf"mode set: {tex_text(o.basis)} basis with $M = {len(theory.modes)}$ modes "
             rf"$\mathcal{{B}}$; initial eigenvalues: {tex_text(o.eigenvalues)}; "
             rf"$t_{{\max}} = {_num(cfg.training.t_max)}$.")
    notation = (r"State per mode $\beta \in \mathcal{B}$: the network coefficient $f_\beta(t)$ and the integrated "
                r"residual $D_\beta(t)$, both 0 at $t = 0$. $\beta_i$ is the order of mode $\beta$ along direction "
                r"$i$, $|\beta| = \sum_i \beta_i$, $g^\beta = \prod_i g_i^{\beta_i}$; $v_\beta$ the target, "
                r"$\lambda_\beta(0)$ the initial eigenvalue, $c_l$ and $\Lambda_l$ the closure constants; "
                r"$\tilde K_{\beta\alpha}$ the initial Gram matrix with zero diagonal (extended basis). "
                r"Loss $L(t)/L(0) = \sum_\beta (v_\beta - f_\beta)^2 / \sum_\beta v_\beta^2$.")
    used = {t for v in variants for t in v.term_names(o.basis)}
    terms = [t for t in _all_terms() if t.name in used]
    terms += [v.closure_obj.term for v in variants if v.closure_obj.term is not None
              and v.closure_obj.term.name not in {t.name for t in terms}]
    items = "\n".join(rf"\item[\texttt{{{tex_text(t.name)}}}] {tex_text(t.doc)}: "
                      rf"$\displaystyle {expr_latex(t.body)}$ (removed: ${expr_latex(t.neutral)}$)" for t in terms)
    parts = [r"\documentclass[11pt]{article}", r"\usepackage[margin=2cm]{geometry}", r"\usepackage{amsmath,amssymb}",
             r"\allowdisplaybreaks", r"\begin{document}",
             rf"\section*{{Feature ODE for \texttt{{{tex_text(cfg.target.expr)}}}}}", setup, "",
             notation, r"\section*{Terms}", r"\begin{description}", items, r"\end{description}",
             r"\section*{Variants}"]
    parts += [_variant_section(v, o.basis, theory) for v in variants]
    parts += [_constants(theory), r"\end{document}", ""]
    return "\n".join(parts)
