"""LaTeX rendering of feature-ODE systems and the ``derive`` outputs: a standalone document and a fragment.

:func:`system_latex` prints a resolved system in indexed form, each term under a brace with its name (removed terms
show their neutral value, replaced ones are marked; ``labels=False`` prints the plain equations). Terms are printed
in their natural order: numbers first, then the positive terms, then the negative ones (``1 + q \\sum …``,
``v_\\beta - f_\\beta``), and a bracketed sum after the other factors (``\\lambda_\\beta (v_\\beta - f_\\beta)``);
each formula is printed from its one SymPy expression.

:func:`equations_latex` is the ODE family of several variants as one shared block (the equations every variant
has alike) and, per variant, the equations where it differs. :func:`derive_fragment` (``derive --fragment``) is
that block alone, to ``\\input`` into a paper (needs amsmath only). :func:`derive_document` writes a document that
compiles with plain ``pdflatex`` (amsmath, amssymb and geometry from texlive-latex-base, booktabs from
texlive-latex-recommended): setup, the terms, the shared system, every variant's differences and facts, and the
constants with their values in booktabs tables (numbers as ``m \\times 10^{e}`` outside ``[10⁻³, 10⁴)``, long tables
broken across pages).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import sympy as sp
from sympy.printing.latex import LatexPrinter

from sympy.core.function import AppliedUndef

from featureode.ode import terms as ode
from featureode.calculus.hermite import Mode
from featureode.ode.indexed import IndexSpace
from featureode.ode.variants import MEANFIELD_NAMES, Variant, closure_names, get_closure, variants_from_config

if TYPE_CHECKING:  # type-only imports (these modules sit above this layer or are heavy)
    from featureode.config import Config
    from featureode.kernel.theory import KernelTheory

_INDEXED = {"f": "f_{%s}", "D": "D_{%s}", "v": "v_{%s}", "lam0": r"\lambda_{%s}(0)", "lam": r"\lambda_{%s}",
            "rho": r"\rho_{%s}", "gpow": "g^{%s}", "c": "c_{|%s|}", "g": "g_{%s}", "r": "r_{%s}",
            "B": "{%s}_{%s}", "K": r"\tilde K_{%s%s}", "S": r"S_{%s%s}", "Sd": r"\bar S_{%s}",
            "U": r"U_{%s%s%s}", "V": r"V_{%s%s}", "Ud": r"U_{%s%s%s}",
            "sv": r"s^{\mathrm{sp}}_{%s}"}
_LHS = {"r": "r_i", "s": "s", "rho": r"\rho_\beta", "lam": r"\lambda_\beta(t)",
        "dfdt": r"\frac{d f_\beta}{dt}", "dDdt": r"\frac{d D_\beta}{dt}"}


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "_": r"\_", "^": r"\^{}", "#": r"\#",
                "$": r"\$", "%": r"\%", "&": r"\&", "~": r"\~{}"}


_ASCII = {"Σ": "sum ", "−": "-", "≤": "<=", "≥": ">=", "…": "...", "²": "^2"}


def tex_text(text: str) -> str:
    """Escape text for LaTeX (a few symbols spelled out, other non-ASCII characters become ``?``)."""
    text = "".join(_ASCII.get(ch, ch) for ch in text).encode("ascii", "replace").decode()
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in text)


_GREEK = {"α": r"\alpha", "β": r"\beta", "γ": r"\gamma", "δ": r"\delta", "η": r"\eta", "κ": r"\kappa",
          "λ": r"\lambda", "μ": r"\mu", "ρ": r"\rho", "σ": r"\sigma", "Σ": r"\Sigma", "Λ": r"\Lambda",
          "θ": r"\theta", "Θ": r"\Theta"}
# symbols in prose: x_i, x_{ij}, D_beta, a Greek letter (with a subscript), a single capital letter used as a variable,
# each optionally "= value"
_MATH_WORD = re.compile(r"(?<![\w\\])((?:[A-Za-z]|[α-ωΑ-Ω])(?:_(?:\{[^}]*\}|[A-Za-z0-9]+))+|[α-ωΑ-Ω]|(?<![A-Za-z-])"
                        r"[B-HJ-Z](?![A-Za-z-]))((?:\s*[=≤≥<>]\s*[-+]?[0-9.]+)?)")


def doc_latex(text: str) -> str:
    """A term's or closure's one-line description for LaTeX: prose escaped, the symbols in it (``r_i = 1``, ``D``,
    Greek letters) in math mode."""
    out, last = [], 0
    for m in _MATH_WORD.finditer(text):
        out.append(tex_text(text[last:m.start()]))
        sym, rel = m.group(1), m.group(2)
        sym = "".join(_GREEK.get(ch, ch) + (" " if ch in _GREEK else "") for ch in sym).strip()
        sym = re.sub(r"_([A-Za-z0-9]+)", r"_{\1}", sym).replace(" _", "_")
        rel = rel.replace("≤", r"\le").replace("≥", r"\ge")
        out.append(f"${sym}{rel}$")
        last = m.end()
    out.append(tex_text(text[last:]))
    return "".join(out)


def mode_latex(mode: Mode) -> str:
    """``h_α`` in math mode: ``z_0 z_1``, ``h_2(z_0)``, ``1``."""
    if not mode.items:
        return "1"
    return " ".join(f"z_{{{i}}}" if n == 1 else f"h_{{{n}}}(z_{{{i}}})" for i, n in mode.items)


#: a term body printed longer than this (LaTeX source characters) is broken at its top-level sums, one per line
BREAK_CHARS = 120


class _Printer(LatexPrinter):
    """LaTeX in theory notation; term placeholders are printed as braces labelled with the term name."""

    def __init__(self, fill: Mapping[str, tuple[sp.Expr, str]] | None = None,
                 space: IndexSpace | None = None, wrap: bool = False) -> None:
        super().__init__({"mul_symbol": None})
        self.fill = dict(fill or {})
        self.space = space or ode.index_space()
        self.wrap = wrap  # break a long braced sum into lines (the shared block, narrow columns)

    def _as_ordered_terms(self, expr: sp.Expr, order: Any = None) -> list:
        """The terms of a sum in natural order: positive numbers, then positive terms, then negative ones (SymPy's
        order within each group)."""
        terms = super()._as_ordered_terms(expr, order=order)
        if not isinstance(expr, sp.Add):
            return terms

        def group(term: sp.Expr) -> int:
            if term.could_extract_minus_sign():
                return 2
            return 0 if term.is_number else 1
        return sorted(terms, key=group)

    def _print_Mul(self, expr: sp.Expr) -> str:
        """A product with a bracketed sum: the other factors first (``\\lambda_\\beta (v_\\beta - f_\\beta)``); any
        other product as SymPy prints it."""
        factors = expr.as_ordered_factors()
        if expr.could_extract_minus_sign() or not any(isinstance(f, sp.Add) for f in factors) or any(
                isinstance(f, sp.Pow) and f.exp.is_negative for f in factors):
            return super()._print_Mul(expr)
        ordered = sorted(factors, key=lambda f: 0 if f.is_number else 2 if isinstance(f, sp.Add) else 1)
        parts = [rf"\left({self._print(f)}\right)" if isinstance(f, sp.Add) else self._print(f) for f in ordered]
        return " ".join(parts)

    def _print_Indexed(self, expr: sp.Indexed) -> str:
        template = _INDEXED.get(str(expr.base))
        idx = [self._print(k) for k in expr.indices]
        if template is None:
            return f"{self._print(expr.base.label)}_{{{','.join(idx)}}}"
        if str(expr.base) in ("K", "S", "V"):
            return template % (idx[0], idx[1])
        if str(expr.base) == "U":
            return template % (idx[0], idx[1], idx[2])
        if str(expr.base) == "Ud":   # the diagonal U_{βαα}
            return template % (idx[0], idx[1], idx[1])
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
        tex = self._print(body)
        if self.wrap and isinstance(body, sp.Add) and len(tex) > BREAK_CHARS:  # a long sum: a term per line
            tex = r"\begin{aligned}[t] &" + r" \\ &".join(self.sum_lines(body)) + r"\end{aligned}"
        return rf"\underbrace{{{tex}}}_{{\text{{{label}}}}}"

    def sum_lines(self, body: sp.Add) -> list[str]:
        """The terms of a sum, each signed (``+ t``, ``- t``) after the first: one per line."""
        terms = [self._print(t) for t in self._as_ordered_terms(body)]
        return [terms[0]] + [f"- {t[1:].lstrip()}" if t.startswith("-") else f"+ {t}" for t in terms[1:]]

    def row(self, expr: sp.Expr) -> str:
        """``expr`` as (the rest of) an ``align`` row; with ``wrap``, a product with one long bracketed sum
        (``s ((1 + …)² + Σ …)``, the plain equations) breaks it a term per line between ``\biggl(`` and
        ``\biggr)``."""
        tex = self.doprint(expr)
        if not self.wrap or len(tex) <= BREAK_CHARS or not isinstance(expr, sp.Mul):
            return tex
        sums = [f for f in expr.args if isinstance(f, sp.Add)]
        if len(sums) != 1 or expr.could_extract_minus_sign() or any(
                isinstance(f, sp.Pow) and f.exp.is_negative for f in expr.args):
            return tex
        rest = expr.func(*[f for f in expr.args if f is not sums[0]])
        return (("" if rest == 1 else self.doprint(rest) + " ") + r"\biggl("
                + r" \\ &\qquad ".join(self.sum_lines(sums[0])) + r"\biggr)")


def expr_latex(expr: sp.Expr) -> str:
    """An indexed expression in theory notation."""
    return _Printer().doprint(expr)


def definition_rows(term: ode.Term, printer: LatexPrinter | None = None) -> list[str]:
    """``"ξ_α &= …"`` per named sub-expression of ``term`` (:class:`featureode.ode.terms.Definition`), a square
    root shown as its square (``ω_α^2 = \bar S_α/2``)."""
    printer = printer or _Printer()
    rows = []
    for w in term.where:
        lhs, rhs = w.name[w.index], w.expr
        if sp.count_ops(rhs ** 2) < sp.count_ops(rhs):
            lhs, rhs = lhs ** 2, rhs ** 2
        rows.append(rf"{printer.doprint(lhs)} &= {printer.doprint(rhs)}")
    return rows


def _shown(term: ode.Term) -> sp.Expr:
    """A term's body as printed: its compact form where it has named sub-expressions."""
    return term.body if term.compact is None else term.compact


def _fill(system: ode.System) -> dict[str, tuple[sp.Expr, str]]:
    """Each term placeholder of ``system``: its body as printed (a removed term: its neutral value) and its brace
    label."""
    fill = {}
    for t in system.terms:
        mark = " (replaced)" if t.name in system.replaced else ""
        fill[t.name] = (_shown(t), rf"\texttt{{{tex_text(t.name)}}}{mark}")
    for name in system.removed:
        term = next(t for t in _all_terms() if t.name == name)
        fill[name] = (term.neutral, rf"removed: \texttt{{{tex_text(name)}}}")
    return fill


def assignment_rows(system: ode.System, labels: bool = True, wrap: bool = False) -> list[tuple[str, str]]:
    """``(name, "LHS &= RHS")`` per assignment of ``system``; ``labels``: each term under a brace with its name,
    else the plain equation (the term bodies put in place); ``wrap``: a braced sum longer than
    :data:`BREAK_CHARS` one term per line (a plain product with a long sum: :meth:`_Printer.row`). A term with
    named sub-expressions is printed in its compact form, the definitions on their own rows after its assignment
    (:func:`definition_rows`)."""
    fill = _fill(system)
    defined = {t.name: t for t in system.terms if t.where}
    printer = _Printer(fill if labels else {}, system.space, wrap)
    rows = []
    for a in system.assignments:
        template = a.template
        # a sum of several terms: one term per line (a displayed line fits a column of a two-column page)
        parts = list(template.args) if isinstance(template, sp.Add) and sum(
            isinstance(x, AppliedUndef) and type(x).__name__ in fill for x in template.args) > 1 else [template]
        if not labels:
            parts = [x.xreplace({f: fill[type(f).__name__][0] for f in x.atoms(AppliedUndef)
                                 if type(f).__name__ in fill}) for x in parts]
        texts = [printer.row(x) for x in parts]
        body = texts[0] + "".join(rf" \\ &\qquad {'- ' + t[1:].lstrip() if t.startswith('-') else '+ ' + t}"
                                  for t in texts[1:])
        uses = [defined[type(x).__name__] for x in template.atoms(AppliedUndef) if type(x).__name__ in defined]
        body += "".join(r" \\ " + row for t in sorted(uses, key=lambda t: t.name)
                        for row in definition_rows(t, printer))
        rows.append((a.name, rf"{_LHS[a.name]} &= {body}"))
    return rows


def system_latex(system: ode.System, labels: bool = True) -> str:
    """The system as an ``align*`` block, every term braced and named (removed: neutral value, marked), or the
    plain equations with ``labels=False``."""
    rows = [row for _, row in assignment_rows(system, labels)]
    return "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"


def shared_and_different(variants: Sequence[Variant], basis: str, labels: bool = True
                         ) -> tuple[list[str], dict[str, list[str]]]:
    """The equations every variant has alike (in system order) and, per variant label, those where it differs."""
    systems = {v.label: assignment_rows(v.system(basis), labels, wrap=True) for v in variants}
    order = list(dict.fromkeys(name for rows in systems.values() for name, _ in rows))
    by_name = {label: dict(rows) for label, rows in systems.items()}
    shared: list[str] = []
    differ: dict[str, list[str]] = {label: [] for label in systems}
    for name in order:
        texts = {label: rows.get(name) for label, rows in by_name.items()}
        if len(set(texts.values())) == 1 and None not in texts.values():
            shared.append(str(next(iter(texts.values()))))
        else:
            for label, text in texts.items():
                if text is not None:
                    differ[label].append(text)
    return shared, differ


def equations_latex(variants: Sequence[Variant], basis: str, labels: bool = True) -> str:
    """The ODE family of ``variants`` as LaTeX: one ``align*`` block of the shared equations, then one of the
    equations per variant (named on their first line), for variants that differ."""
    shared, differ = shared_and_different(variants, basis, labels)
    out = "\\begin{align*}\n" + " \\\\\n".join(shared) + "\n\\end{align*}"
    if any(differ.values()):
        rows = []
        for label, eqs in differ.items():  # the variant's name between the rows (narrow enough for a column)
            for k, eq in enumerate(eqs):
                rows.append((rf"\intertext{{\texttt{{{tex_text(label)}}}:}}" + "\n" if k == 0 else "") + eq)
        out += ("\n" + ("with, per variant:" if len(differ) > 1 else "with:") + "\n\\begin{align*}\n"
                + " \\\\\n".join(rows) + "\n\\end{align*}")
    return out


def _all_terms() -> list[ode.Term]:
    return list(ode.CORE_TERMS) + [c.term for c in map(get_closure, closure_names()) if c.term is not None]


def meanfield_latex(names: Sequence[str]) -> str:
    """The mean-field variants among ``names`` (``meanfield``, ``meanfield+tail``, ``meanfield+whole``) as LaTeX,
    printed from :mod:`featureode.ode.meanfield_terms`: the neurons' velocity, the definitions, and per variant
    the residual that drives and the loss it reports. Empty when ``names`` holds none."""
    from featureode.ode import meanfield_terms as mf

    names = [n for n in names if n in mf.DRIVE]
    if not names:
        return ""
    coords = [rf"\frac{{d{expr_latex(mf.COORDINATES[k])}}}{{dt}} &= {expr_latex(v)}"
              + (r" \qquad (i \in T)" if k == r"\hat{w}_i" else "") for k, v in mf.VELOCITY.items()]
    defs = [f"{expr_latex(left)} &= {expr_latex(right)}" for left, right in mf.DEFINITIONS]
    per = [row for n in names for row in (rf"&\text{{\texttt{{{tex_text(n)}}}:}}",
                                          rf"r(z) &= {expr_latex(mf.DRIVE[n])},",
                                          rf"L/L(0) &= {expr_latex(mf.LOSS[n])}")]
    return "\n".join([
        r"The mean-field variants are not ODEs on the modes: every init neuron $\theta = (a, \hat w_T, b, C)$ of the "
        r"mean-field network moves ($T$ the target's directions, $P = \mathrm{diag}(\eta_a, \eta_w g, \eta_b)$; a "
        r"coordinate outside $T$ moves as $\hat w_i(t) = \hat w_i(0)\,e^{\eta_w g_i C(t)}$):",
        r"\begin{align*}", " \\\\\n".join(coords), r"\end{align*}", "with", r"\begin{align*}",
        " \\\\\n".join(defs), r"\end{align*}",
        r"($f_\alpha$ for $\alpha \subset T$; the basis' modes outside $T$ are projected, each even power of a "
        r"coordinate outside $T$ at its Gaussian moment), and per variant the residual that drives and the loss:",
        r"\begin{align*}", " \\\\\n".join(per), r"\end{align*}", ""])


def _num(x: float | None, digits: int = 4) -> str:
    """``x`` for math mode to ``digits`` significant digits: plain for ``10⁻³ ≤ |x| < 10⁴`` (and 0), else
    ``m \times 10^{e}``; a dash when missing or not finite."""
    if x is None or not np.isfinite(x):
        return r"\text{--}"
    x = float(x)
    if x == 0 or 1e-3 <= abs(x) < 1e4:
        return f"{x:.{digits}g}"
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    power = rf"10^{{{int(exponent)}}}"
    return power if mantissa == "1" else (rf"-{power}" if mantissa == "-1" else rf"{mantissa} \times {power}")


#: rows per tabular of a long table (a tabular cannot break across pages; consecutive ones can)
TABLE_ROWS = 40


def _table(header: Iterable[str], rows: Iterable[Iterable[str]], align: str | None = None) -> str:
    """A booktabs table; ``align`` one letter per column (default: first column left, the others right). More than
    :data:`TABLE_ROWS` rows become consecutive tabulars with the header repeated, so the table breaks across pages
    (in one pdflatex pass, unlike ``longtable``)."""
    header = list(header)
    align = align or "l" + "r" * (len(header) - 1)
    body = [" & ".join(row) + r" \\" for row in rows]
    parts = []
    for start in range(0, max(len(body), 1), TABLE_ROWS):
        parts.append("\n".join([rf"\begin{{tabular}}{{{align}}}", r"\toprule", " & ".join(header) + r" \\",
                                r"\midrule"] + body[start:start + TABLE_ROWS] + [r"\bottomrule", r"\end{tabular}"]))
    return "\n\n\\smallskip\n".join(parts)


def _variant_section(variant: Variant, basis: str, theory: Any) -> str:
    """A variant's facts (closure, constants, removed and replaced terms); its equations are in the System
    section (:func:`equations_latex`)."""
    system = variant.system(basis)
    closure = variant.closure_obj
    from featureode.ode.solve import closure_prefactors, theory_parametrization

    plain = theory_parametrization(theory).rates.is_default
    kappa = theory.kappa if variant.kappa is None else variant.kappa
    facts = [rf"closure \texttt{{{tex_text(closure.name)}}}: {doc_latex(closure.doc)}"]
    if any(sp.Symbol("kappa") in a.expr.free_symbols for a in system.assignments):
        derived = r"$\gamma^2 c_1/\Lambda_1^2$" if plain else r"$q\,\eta_w^2 c_1/\Lambda_1^2$"
        facts.append(rf"$\kappa = {_num(kappa)}$" + (rf" (derived, {derived})" if variant.kappa is None else " (given)"))
    facts.append("scale factor " + ("on" if variant.scale else "off"))
    if system.removed:
        facts.append("removed terms: " + ", ".join(rf"\texttt{{{tex_text(n)}}}" for n in system.removed))
    if system.replaced:
        facts.append("replaced terms: " + ", ".join(rf"\texttt{{{tex_text(n)}}}" for n in system.replaced))
    uses = set().union(*(a.expr.free_symbols | {x.base for x in a.expr.atoms(sp.Indexed)}
                         for a in system.assignments))
    pref = closure_prefactors(theory)
    if ode.q in uses or ode.qa in uses or ode.qw in uses:
        name = theory_parametrization(theory).name
        facts.append(rf"$q = {_num(pref['q'])}$ (closure prefactor of the {tex_text(name)} parametrization)")
    if ode.qw in uses:
        form = "q" if plain else r"q\,\eta_w^2"
        facts.append(rf"$q_{{w}} = {form} = {_num(pref['q_w'])}$ (first-layer displacement)")
    if ode.qa in uses:
        form = "q" if pref["q_a"] == pref["q"] and plain else r"q\,\eta_a^2/\mathbb{E}[a^2]^2"
        facts.append(rf"$q_{{a}} = {form} = {_num(pref['q_a'])}$ (readout growth)")
    facts += [rf"${expr_latex(sp.Symbol(k))} = {_num(val)}$" for k, val in variant.param_values.items()]
    out = rf"\subsection*{{Variant \texttt{{{tex_text(variant.label)}}}}}" + "\n" + "; ".join(facts) + ".\n"
    if uses & {ode.S, ode.U, ode.V}:
        out += "\n" + _second_order_table(theory)
    return out


def _second_order_table(theory: Any) -> str:
    """``S_{βα}`` (columns: the target's modes, which drive) and its parts ``V_{βα}`` (deterministic quadrature)."""
    from featureode.ode.solve import second_order_of

    from featureode.ode.solve import theory_parametrization

    drivers, so = second_order_of(theory)
    head = [r"$\beta$"] + [rf"$S_{{\beta,{mode_latex(theory.modes[k])}}}\ (V)$" for k in drivers]
    rows = [[f"${mode_latex(m)}$"] + [rf"${_num(so.S[r, k])}\ ({_num(so.V[r, k])})$" for k in drivers]
            for r, m in enumerate(theory.modes)]
    metric = "" if theory_parametrization(theory).rates.is_default else \
        r", metric $P = \mathrm{diag}(\eta_a, \eta_w g, \eta_b)$"
    return (r"Second-order constants (deterministic quadrature; $S = U_{\beta\alpha\alpha} + V$" + metric + "):"
            + "\n\n"
            + _table(head, rows) + "\n")


#: the spectrum table lists every g_i up to this d, else the first and the last ones
SPECTRUM_SHOWN = 64
_SPECTRUM_COLUMNS = 8


def _spectrum_table(g: np.ndarray) -> str:
    """``g_0 … g_{d−1}`` as a table of ``_SPECTRUM_COLUMNS`` columns (a header row of indices over a row of values);
    beyond :data:`SPECTRUM_SHOWN` entries the middle ones are left out, saying so."""
    index = list(range(g.size))
    if g.size > SPECTRUM_SHOWN:
        index = index[: SPECTRUM_SHOWN - _SPECTRUM_COLUMNS] + index[-_SPECTRUM_COLUMNS:]
    lines = [rf"\begin{{tabular}}{{{'r' * _SPECTRUM_COLUMNS}}}", r"\toprule"]
    for start in range(0, len(index), _SPECTRUM_COLUMNS):
        block = index[start:start + _SPECTRUM_COLUMNS]
        pad = [""] * (_SPECTRUM_COLUMNS - len(block))
        lines += [" & ".join([rf"$g_{{{i}}}$" for i in block] + pad) + r" \\", r"\midrule" if start == 0 else
                  r"\cmidrule(lr){1-8}", " & ".join([f"${_num(g[i], 4)}$" for i in block] + pad) + r" \\",
                  r"\midrule"]
    lines[-1] = r"\bottomrule"
    lines.append(r"\end{tabular}")
    note = ""
    if g.size > SPECTRUM_SHOWN:
        first, last = index[SPECTRUM_SHOWN - _SPECTRUM_COLUMNS - 1] + 1, index[-_SPECTRUM_COLUMNS] - 1
        note = rf" ($g_{{{first}}}, \dots, g_{{{last}}}$ not shown)"
    return rf"Spectrum $g_0 \ge \dots \ge g_{{{g.size - 1}}}$, $\sum_i g_i = {_num(g.sum())}${note}:" + "\n\n" \
        + r"\smallskip" + "\n" + "\n".join(lines)


def _constants(theory: Any) -> str:
    g = np.asarray(theory.g, dtype=float)
    lam_e, err, lam_h = (np.asarray(x, dtype=float) for x in
                         (theory.lambda_exact, theory.lambda_exact_stderr, theory.lambda_hea))
    sampled = bool(np.any(err > 0))  # Monte Carlo eigenvalues carry an error bar; quadrature ones are exact
    rows = [[f"${mode_latex(m)}$", f"${_num(float(vb))}$", f"${_num(le)}$"] + ([f"${_num(se, 2)}$"] if sampled else [])
            + [f"${_num(lh)}$", f"${_num(float(m.g_power(g)))}$"]
            for m, vb, le, se, lh in zip(theory.modes, np.asarray(theory.target, float), lam_e, err, lam_h)]
    header = ([r"$\beta$", r"$v_\beta$", r"$\lambda_\beta(0)$ exact"] + ([r"std.\ error"] if sampled else [])
              + [r"$\lambda_\beta(0)$ HEA", r"$g^\beta$"])
    modes = _table(header, rows)
    lev = _table(["$l$", r"$\Lambda_l$", "$c_l$"],
                 [[f"${k}$", f"${_num(float(a))}$", f"${_num(float(b))}$"]
                  for k, (a, b) in enumerate(zip(theory.level_coefficients, theory.c))])
    from featureode.ode.solve import theory_parametrization

    rates = theory_parametrization(theory).rates
    if rates.is_default:
        head = rf"$\gamma = {_num(theory.gamma)}$, derived $\kappa = \gamma^2 c_1/\Lambda_1^2 = {_num(theory.kappa)}$."
    else:
        head = (rf"$\gamma = {_num(theory.gamma)}$, {_rates_tex(rates)}; the initial eigenvalues and $\Lambda_l$ are "
                r"those of the gradient-flow kernel $\eta_a \Theta_{\mathrm{readout}} + \eta_w \Theta_{\mathrm{weights}}"
                r" + \eta_b \Theta_{\mathrm{bias}}$; derived $\kappa = q\,\eta_w^2 c_1/\Lambda_1^2 = "
                + rf"{_num(theory.kappa)}$.")
    return ("\\section*{Constants}\n"
            + head
            + "\n\n" + _spectrum_table(g) + "\n\n\\medskip\n"
            + rf"Initial eigenvalues of the $M = {len(theory.modes)}$ modes"
            + (" (Monte Carlo, with standard errors)" if sampled else " (deterministic quadrature)") + ":\n\n"
            + "\\smallskip\n" + modes + "\n\n\\medskip\n" + r"Level coefficients $\Lambda_l$ and displacement constants $c_l$:"
            + "\n\n\\smallskip\n" + lev + "\n")


def _rates_tex(rates: Any) -> str:
    r"""``per-group learning rates $\eta_a = 0$, …`` (``[training] lr_scale``)."""
    return ("per-group learning rates " + ", ".join(rf"$\eta_{k} = {_num(v)}$" for k, v in rates.as_dict().items())
            + r" (\texttt{lr\_scale})")


def _spectrum_text(cfg: Any) -> str:
    """The covariance of ``[data]`` in words and math (its values are in the Constants section)."""
    d = cfg.data
    if d.covariance is not None:
        return (r"a full covariance $\Sigma$, diagonalised: $g_i$ are its eigenvalues and $z$ the whitened "
                r"coordinates of its eigenbasis")
    if d.eigenvalues is not None:
        return r"explicit eigenvalues $g_0 \ge \dots \ge g_{d-1}$"
    return (rf"power-law spectrum $g_i \propto (i + {_num(d.offset)})^{{-{_num(d.exponent)}}}$, "
            r"$i = 0, \dots, d-1$, normalised to $\sum_i g_i = 1$")


def derive_document(cfg: Config, theory: KernelTheory | None = None, labels: bool = True) -> str:
    """A standalone LaTeX document for the config's ODE family (``theory``: a ``KernelTheory``; computed with
    ``featureode.kernel.theory.kernel_theory`` when ``None``; ``labels=False``: equations without the term
    names under braces)."""
    from featureode.config import require_config

    o = require_config(cfg, "derive_document").ode
    if theory is None:
        from featureode.kernel import theory as kernel
        theory = kernel.kernel_theory(cfg, with_gram=o.basis == "extended")
    variants = variants_from_config(o, allow_replay=True)  # replay is measured, not an ODE: not typeset
    n = cfg.network
    setup = (rf"Target \texttt{{{tex_text(cfg.target.expr)}}} in $d = {cfg.data.dim}$ dimensions, "
             rf"{_spectrum_text(cfg)}; activation \texttt{{{tex_text(n.activation)}}}, "
             rf"richness $\gamma = {_num(n.richness)}$, bias scale $\sigma_b = {_num(n.bias_std)}$; "
             rf"mode set: {tex_text(o.basis)} basis with $M = {len(theory.modes)}$ modes "
             rf"$\mathcal{{B}}$; initial eigenvalues: {tex_text(o.eigenvalues)}; "
             rf"$t_{{\max}} = {_num(cfg.training.t_max)}$.")
    from featureode.ode.solve import theory_parametrization

    rates = theory_parametrization(theory).rates
    if not rates.is_default:
        setup = setup[:-1] + "; " + _rates_tex(rates) + ", 0 freezing a group."
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
    # each term's body on its own displayed line: an inline formula cannot break and overflowed the margin
    items = "\n".join(rf"\item[\texttt{{{tex_text(t.name)}}}] {doc_latex(t.doc)}:"
                      rf"\[ {expr_latex(_shown(t))} \qquad \text{{(removed: ${expr_latex(t.neutral)}$)}} \]"
                      + ("" if not t.where else "with\n\\begin{align*}\n" + " \\\\\n".join(definition_rows(t))
                         + "\n\\end{align*}")
                      for t in terms)
    parts = [r"\documentclass[11pt]{article}", r"\usepackage[margin=2cm]{geometry}",
             r"\usepackage{amsmath,amssymb,booktabs}",
             r"\allowdisplaybreaks", r"\begin{document}",
             rf"\section*{{Feature ODE for \texttt{{{tex_text(cfg.target.expr)}}}}}", setup, "",
             notation, r"\section*{Terms}", r"\begin{description}", items, r"\end{description}",
             r"\section*{System}", "Every variant integrates", equations_latex(variants, o.basis, labels),
             r"\section*{Variants}"]
    parts += [_variant_section(v, o.basis, theory) for v in variants]
    mean_field = meanfield_latex(o.variants)
    if mean_field:
        parts += [r"\subsection*{Mean-field variants: " + ", ".join(rf"\texttt{{{tex_text(n)}}}" for n in o.variants
                                                                   if n in MEANFIELD_NAMES) + "}", mean_field]
    parts += [_constants(theory), r"\end{document}", ""]
    return "\n".join(parts)


def derive_fragment(cfg: Config, labels: bool = True) -> str:
    """``derive --fragment``: the equations of the config's ODE family alone (:func:`equations_latex`: a shared
    block and each variant's differences), to ``\\input`` into a paper; it needs ``\\usepackage{amsmath}`` only.
    No kernel quantity is computed (the constants are in the standalone document)."""
    from featureode.config import require_config

    o = require_config(cfg, "derive_fragment").ode
    variants = variants_from_config(o, allow_replay=True)  # replay is measured, not an ODE: not typeset
    names = ", ".join(v.label for v in variants)
    head = [f"% featureode derive --fragment: the feature ODE of target {cfg.target.expr} (d = {cfg.data.dim}, "
            f"{cfg.network.activation}, gamma = {cfg.network.richness:g}) on the {o.basis} basis",
            f"% variants: {names}. Needs \\usepackage{{amsmath}}. State per mode beta: f_beta(t), D_beta(t), 0 at t = 0.",
            ""]
    return "\n".join(head) + equations_latex(variants, o.basis, labels) + "\n" + meanfield_latex(o.variants)
