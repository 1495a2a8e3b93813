#!/usr/bin/env python
"""Step-by-step SymPy derivation of the ReLU and erf Gaussian derivative means and Hermite coefficients (theory §2).

    python derivations/activation_coefficients.py --out activation_coefficients.tex [--max-order K]

For a neuron ``u = w·x + b`` on Gaussian data, ``u ~ N(b, s²)``; write ``u = b + s ξ``, ``ξ ~ N(0, 1)``. The
derivation establishes, with SymPy checking every step,

* Gaussian integration by parts: ``E[F(b + s ξ) He_n(ξ)] = s^n E[F^{(n)}(u)]``, hence
  ``μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)] = s^n m_n(b, s)/sqrt(n!)`` with ``m_k(b, s) = E[σ^{(k)}(u)]``;
* the ``∂_b`` recursion ``m_{k+1} = ∂_b m_k``;
* closed forms of ``m_k`` and ``μ_n`` for ReLU and erf.

Every displayed formula for ``m_k`` and ``μ_n`` is the package's own SymPy expression (``featureode.calculus.activations``),
checked against an independent SymPy integral or identity; a failed check stops the script with exit status 1.
Each step is printed; the whole derivation is written as a standalone LaTeX document.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mpmath
import sympy as sp

from featureode.calculus.activations import ACTIVATIONS, B, S, U
from featureode.calculus.hermite import Z, hermite_expr

XI = sp.Symbol("xi", real=True)
BP = sp.Symbol("beta", real=True)  # integration variable for b


def phi(x: sp.Expr) -> sp.Expr:
    """Standard normal density."""
    return sp.exp(-x**2 / 2) / sp.sqrt(2 * sp.pi)


def density(u: sp.Expr) -> sp.Expr:
    """Density of ``u ~ N(b, s²)``."""
    return phi((u - B) / S) / S


def he(n: int, x: sp.Expr) -> sp.Expr:
    """Probabilists' ``He_n(x) = sqrt(n!) h_n(x)`` from the package's orthonormal ``h_n``."""
    return sp.expand(sp.sqrt(sp.factorial(n)) * hermite_expr(n).subs(Z, x))


def mu_expr(name: str, n: int) -> sp.Expr:
    """The package's closed form of ``μ_n(b, s)`` for activation ``name`` (these derivations need one)."""
    expr = ACTIVATIONS[name].hermite_expr(n)
    if expr is None:
        raise SystemExit(f"error: {name} has no closed form for mu_{n}; this derivation covers relu and erf only")
    return expr


def is_zero(expr: sp.Expr) -> bool:
    """Exact zero test: erfc rewritten through erf, then simplified."""
    return sp.simplify(sp.expand(sp.sympify(expr).rewrite(sp.erf))) == 0


class DerivationError(RuntimeError):
    """A SymPy check of the derivation failed."""


class Derivation:
    """Collects the steps: prints each one and accumulates the LaTeX body."""

    def __init__(self) -> None:
        self.body: list[str] = []
        self.checks = 0

    def section(self, title: str) -> None:
        print(f"\n== {title} ==")
        self.body.append(f"\\section{{{title}}}")

    def text(self, latex: str, plain: str | None = None) -> None:
        print(plain if plain is not None else latex)
        self.body.append(latex + "\n")

    def equation(self, lhs: str, rhs: "sp.Expr | str", plain_lhs: str | None = None) -> None:
        rhs_latex = rhs if isinstance(rhs, str) else sp.latex(rhs)
        print(f"  {plain_lhs or lhs} = {rhs if isinstance(rhs, str) else sp.sstr(rhs)}")
        self.body.append(f"\\begin{{equation*}}\n{lhs} = {rhs_latex}\n\\end{{equation*}}")

    def check(self, claim: str, difference: sp.Expr, plain: str | None = None) -> None:
        """Assert ``difference == 0`` exactly (SymPy)."""
        if not is_zero(difference):
            raise DerivationError(f"check failed: {plain or claim}; difference {difference}")
        self.checks += 1
        print(f"  [checked] {plain or claim}")
        self.body.append(f"\\noindent\\textit{{Checked by SymPy:}} {claim}.\n")

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        for r in rows:
            print("  " + " | ".join(r))
        spec = "l" * len(header)
        lines = [" & ".join(header) + r" \\ \hline"] + [" & ".join(r) + r" \\" for r in rows]
        self.body.append(f"\\begin{{center}}\\small\n\\begin{{tabular}}{{{spec}}}\n\\hline\n"
                         + "\n".join(lines) + "\n\\hline\n\\end{tabular}\n\\end{center}")

    def document(self) -> str:
        return ("\\documentclass[11pt]{article}\n\\usepackage[margin=2cm]{geometry}\n"
                "\\usepackage{amsmath,amssymb}\n\\allowdisplaybreaks\n"
                "\\title{Gaussian derivative means and Hermite coefficients of ReLU and erf}\n"
                "\\author{featureode: \\texttt{derivations/activation\\_coefficients.py}}\n\\date{}\n"
                "\\begin{document}\n\\maketitle\n" + "\n".join(self.body) + "\n\\end{document}\n")


# ------------------------------------------------------------------------------------------------------------------
# steps
# ------------------------------------------------------------------------------------------------------------------
def integration_by_parts(d: Derivation, kmax: int) -> None:
    d.section("Gaussian integration by parts")
    d.text(r"A neuron $u = w\cdot x + b$ on data $x\sim N(0,\Sigma)$ is Gaussian, $u\sim N(b, s^2)$ with "
           r"$s = |\hat w|$, $\hat w_i = \sqrt{g_i}\,w_i$. Write $u = b + s\xi$, $\xi\sim N(0,1)$, "
           r"$\varphi(\xi) = e^{-\xi^2/2}/\sqrt{2\pi}$, and define the Gaussian derivative means "
           r"$m_k(b,s) = \mathbb{E}[\sigma^{(k)}(u)]$ and the Hermite coefficients "
           r"$\mu_n(b,s) = \mathbb{E}[\sigma(s\xi + b)\,h_n(\xi)]$ with $h_n = He_n/\sqrt{n!}$.",
           "u = b + s xi; m_k = E[sigma^(k)(u)], mu_n = E[sigma(s xi + b) h_n(xi)], h_n = He_n/sqrt(n!)")
    for n in range(min(kmax, 4) + 1):
        d.equation(f"h_{{{n}}}(\\xi)", hermite_expr(n).subs(Z, XI), f"h_{n}(xi)")
    d.text(r"\paragraph{Step 1.} The Gaussian density satisfies $\varphi'(\xi) = -\xi\varphi(\xi)$ and, for every $n$, "
           r"$\frac{d}{d\xi}\bigl[He_n(\xi)\varphi(\xi)\bigr] = -He_{n+1}(\xi)\varphi(\xi)$.",
           "Step 1: phi' = -xi phi and d/dxi [He_n phi] = -He_{n+1} phi")
    d.check(r"$\varphi'(\xi) + \xi\varphi(\xi) = 0$", sp.diff(phi(XI), XI) + XI * phi(XI), "phi' + xi phi = 0")
    for n in range(kmax):
        d.check(f"$\\frac{{d}}{{d\\xi}}[He_{{{n}}}\\varphi] + He_{{{n + 1}}}\\varphi = 0$ "
                "(with the package's $h_n$)",
                sp.diff(he(n, XI) * phi(XI), XI) + he(n + 1, XI) * phi(XI),
                f"d/dxi[He_{n} phi] + He_{n + 1} phi = 0")
    d.text(r"\paragraph{Step 2.} Integrating by parts (the boundary terms vanish for $F$ of polynomial growth), "
           r"$\mathbb{E}[F(b+s\xi)He_{n+1}(\xi)] = -\int F(b+s\xi)\,d[He_n\varphi] "
           r"= s\,\mathbb{E}[F'(b+s\xi)He_n(\xi)]$, and by induction "
           r"$\mathbb{E}[F(b+s\xi)He_n(\xi)] = s^n\,\mathbb{E}[F^{(n)}(u)]$. With $F = \sigma$:",
           "Step 2: E[F(b+s xi) He_n(xi)] = s^n E[F^(n)(u)], so")
    d.equation(r"\mu_n(b,s)", r"\frac{s^n\, m_n(b,s)}{\sqrt{n!}}", "mu_n(b, s)")
    d.text(r"\paragraph{Step 3 ($\partial_b$ recursion).} Since $\partial_b F(b+s\xi) = F'(b+s\xi)$, "
           r"$m_{k+1}(b,s) = \partial_b m_k(b,s)$, so every $m_k$ follows from $m_0$ by differentiation in $b$.",
           "Step 3: m_{k+1} = d/db m_k")


def relu(d: Derivation, kmax: int) -> None:
    act = ACTIVATIONS["relu"]
    d.section("ReLU: $\\sigma(u) = \\max(u, 0)$")
    d.text(r"\paragraph{Step 1 ($m_0$).} Direct integration, $m_0 = \int_0^\infty u\,p(u)\,du$ with $p$ the "
           r"density of $N(b,s^2)$, gives the package's closed form ($\Phi$ the standard normal CDF, written "
           r"through erf):", "Step 1: m_0 = int_0^oo u p(u) du")
    direct = sp.integrate(U * density(U), (U, 0, sp.oo))
    d.equation("m_0(b,s)", act.mean_expr(0), "m_0(b, s)")
    d.check(r"$m_0 = \int_0^\infty u\,p(u)\,du$", direct - act.mean_expr(0), "m_0 equals the direct integral")
    d.text(r"\paragraph{Step 2 ($m_1$).} $m_1 = \partial_b m_0$; independently, $\sigma'(u) = 1[u>0]$ so "
           r"$m_1 = P(u > 0) = \Phi(b/s)$:", "Step 2: m_1 = d/db m_0 = P(u > 0)")
    d.equation("m_1(b,s)", act.mean_expr(1), "m_1(b, s)")
    d.check(r"$\partial_b m_0 = m_1$", sp.diff(act.mean_expr(0), B) - act.mean_expr(1), "d/db m_0 = m_1")
    d.check(r"$m_1 = \int_0^\infty p(u)\,du$", sp.integrate(density(U), (U, 0, sp.oo)) - act.mean_expr(1),
            "m_1 = P(u > 0)")
    d.text(r"\paragraph{Step 3 ($m_2$).} $\sigma'' = \delta$, so $m_2 = p(0) = \varphi(b/s)/s$:",
           "Step 3: m_2 = p(0)")
    d.equation("m_2(b,s)", act.mean_expr(2), "m_2(b, s)")
    d.check(r"$m_2 = p(0)$", density(sp.Integer(0)) - act.mean_expr(2), "m_2 = p(0)")
    d.text(r"\paragraph{Step 4 ($m_k$, $k\ge 2$).} Differentiating $\varphi(b/s)/s$ $k-2$ more times with "
           r"$\frac{d^j}{dt^j}\varphi(t) = (-1)^j He_j(t)\varphi(t)$:", "Step 4: general m_k")
    d.equation(r"m_k(b,s)", r"\frac{(-1)^k}{s^{k-1}}\,He_{k-2}\!\left(\frac{b}{s}\right)"
                            r"\varphi\!\left(\frac{b}{s}\right),\quad k\ge 2", "m_k(b, s)")
    for k in range(2, kmax + 1):
        d.check(f"the general form equals the package's $m_{{{k}}}$",
                (-1) ** k * he(k - 2, B / S) * phi(B / S) / S ** (k - 1) - act.mean_expr(k), f"m_{k} general form")
        if k > 2:
            d.equation(f"m_{{{k}}}(b,s)", act.mean_expr(k), f"m_{k}(b, s)")
    d.text(r"\paragraph{Step 5 ($\mu_n$).} From $\mu_n = s^n m_n/\sqrt{n!}$ (package expressions):",
           "Step 5: mu_n")
    for n in range(kmax + 1):
        d.equation(f"\\mu_{{{n}}}(b,s)", mu_expr("relu", n), f"mu_{n}(b, s)")
    d.text(r"\paragraph{Step 6 (check against theory, section 2).} At $b=0$, $s=1$: $\mathbb{E}[\sigma He_n] = "
           r"1/\sqrt{2\pi},\ 1/2$, then $0$ for odd $n\ge3$ and $(-1)^{n/2-1}(n-3)!!/\sqrt{2\pi}$ for even $n\ge2$.",
           "Step 6: b = 0, s = 1 against the theory closed form")
    rows = []
    for n in range(kmax + 1):
        mu = sp.simplify(mu_expr("relu", n).subs({B: 0, S: 1}))
        design = (1 / sp.sqrt(2 * sp.pi) if n == 0 else sp.Rational(1, 2) if n == 1 else sp.Integer(0) if n % 2
                  else (-1) ** (n // 2 - 1) * sp.factorial2(n - 3) / sp.sqrt(2 * sp.pi))
        d.check(f"$\\sqrt{{{n}!}}\\,\\mu_{{{n}}}(0,1) = {sp.latex(design)}$", sp.sqrt(sp.factorial(n)) * mu - design,
                f"sqrt({n}!) mu_{n}(0, 1) = {design}")
        rows.append([f"${n}$", f"${sp.latex(mu)}$", f"${sp.latex(design)}$"])
    d.table([r"$n$", r"$\mu_n(0,1)$", r"$\mathbb{E}[\sigma He_n]$"], rows)


def erf(d: Derivation, kmax: int) -> None:
    act = ACTIVATIONS["erf"]
    q = sp.sqrt(1 + 2 * S**2)
    d.section("erf: $\\sigma(u) = \\operatorname{erf}(u)$")
    d.text(r"\paragraph{Step 1 ($m_1$).} $\sigma'(u) = \frac{2}{\sqrt\pi}e^{-u^2}$ is a Gaussian, so its mean "
           r"under $N(b,s^2)$ is a Gaussian convolution:", "Step 1: m_1 = E[2/sqrt(pi) exp(-u^2)]")
    m1 = sp.simplify(sp.integrate(2 / sp.sqrt(sp.pi) * sp.exp(-U**2) * density(U), (U, -sp.oo, sp.oo)))
    d.equation("m_1(b,s)", act.mean_expr(1), "m_1(b, s)")
    d.check(r"$m_1 = \int \frac{2}{\sqrt\pi}e^{-u^2}p(u)\,du$", m1 - act.mean_expr(1), "m_1 equals the integral")
    d.text(r"\paragraph{Step 2 ($m_0$).} erf is odd, so $m_0(0,s) = 0$ and $m_0(b,s) = \int_0^b m_1(\beta,s)\,d\beta$:",
           "Step 2: m_0 = int_0^b m_1")
    qp = sp.Symbol("q", positive=True)  # q = sqrt(1 + 2 s²) > 0, named so that SymPy integrates in closed form
    m1_q = 2 / (sp.sqrt(sp.pi) * qp) * sp.exp(-BP**2 / qp**2)
    d.check(r"$m_1 = \frac{2}{\sqrt\pi\,q}e^{-b^2/q^2}$, $q = \sqrt{1+2s^2}$",
            m1_q.subs({BP: B, qp: q}) - act.mean_expr(1), "m_1 = 2/(sqrt(pi) q) exp(-b^2/q^2)")
    m0 = sp.integrate(m1_q, (BP, 0, B)).subs(qp, q)
    d.equation("m_0(b,s)", act.mean_expr(0), "m_0(b, s)")
    d.check(r"$m_0 = \int_0^b m_1\,d\beta$", m0 - act.mean_expr(0), "m_0 equals the integral of m_1")
    d.text(r"\paragraph{Step 3 ($m_k$).} With $q = \sqrt{1+2s^2}$, $m_1 = \frac{2}{\sqrt\pi q}e^{-b^2/q^2}$ and "
           r"$\frac{d^j}{dt^j}e^{-t^2} = (-1)^j H_j(t)e^{-t^2}$ (physicists' $H_j$), the $\partial_b$ recursion gives",
           "Step 3: general m_k")
    d.equation("m_k(b,s)", r"\frac{2(-1)^{k-1}}{\sqrt\pi\,q^k}\,H_{k-1}\!\left(\frac{b}{q}\right)e^{-b^2/q^2},"
                           r"\quad k\ge 1", "m_k(b, s)")
    for k in range(1, kmax + 1):
        general = 2 * (-1) ** (k - 1) / (sp.sqrt(sp.pi) * q**k) * sp.hermite(k - 1, B / q) * sp.exp(-B**2 / q**2)
        d.check(f"the general form equals the package's $m_{{{k}}}$", general - act.mean_expr(k),
                f"m_{k} general form")
        d.check(f"$\\partial_b m_{{{k - 1}}} = m_{{{k}}}$", sp.diff(act.mean_expr(k - 1), B) - act.mean_expr(k),
                f"d/db m_{k - 1} = m_{k}")
        if k > 1:
            d.equation(f"m_{{{k}}}(b,s)", act.mean_expr(k), f"m_{k}(b, s)")
    d.text(r"\paragraph{Step 4 ($\mu_n$).} From $\mu_n = s^n m_n/\sqrt{n!}$ (package expressions):", "Step 4: mu_n")
    rows = []
    for n in range(kmax + 1):
        d.equation(f"\\mu_{{{n}}}(b,s)", mu_expr("erf", n), f"mu_{n}(b, s)")
        rows.append([f"${n}$", f"${sp.latex(sp.simplify(mu_expr('erf', n).subs({B: 0, S: 1})))}$"])
    d.text(r"At $b = 0$, $s = 1$ (even coefficients vanish: erf is odd):", "b = 0, s = 1:")
    d.table([r"$n$", r"$\mu_n(0,1)$"], rows)


def numeric_cross_check(d: Derivation, kmax: int) -> None:
    d.section("Numerical cross-check")
    b, s = sp.Rational(3, 10), sp.Rational(6, 5)
    d.text(f"At $b = {sp.latex(b)}$, $s = {sp.latex(s)}$: the closed forms against direct 30-digit quadrature of "
           r"$\int \sigma(s\xi+b)h_n(\xi)\varphi(\xi)\,d\xi$ (split at the kink of ReLU).",
           f"b = {b}, s = {s}: closed form vs quadrature")
    rows = []
    with mpmath.workdps(30):
        sig = {"relu": lambda x: max(x, 0), "erf": mpmath.erf}
        for n in range(kmax + 1):
            row = [f"${n}$"]
            hn = sp.lambdify(XI, hermite_expr(n).subs(Z, XI), "mpmath")
            for name in ("relu", "erf"):
                closed = mpmath.mpf(sp.N(mu_expr(name, n).subs({B: b, S: s}), 30))
                kink = -mpmath.mpf(b) / mpmath.mpf(s)
                quad = mpmath.quad(lambda x: sig[name](s * x + b) * hn(x) * mpmath.npdf(x),
                                   [-mpmath.inf, kink, mpmath.inf])
                if abs(closed - quad) > mpmath.mpf(10) ** -25 * max(1, abs(quad)):
                    raise DerivationError(f"{name} mu_{n}: closed form {closed} vs quadrature {quad}")
                row += [mpmath.nstr(closed, 15), mpmath.nstr(quad, 15)]
            rows.append(row)
    d.table([r"$n$", r"ReLU closed", r"ReLU quadrature", r"erf closed", r"erf quadrature"], rows)
    d.text("All agree to at least 25 digits.", "all agree to 25 digits")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="LaTeX file to write")
    parser.add_argument("--max-order", type=int, default=6, help="highest k of m_k and n of mu_n (default 6)")
    args = parser.parse_args(argv)
    if args.max_order < 2:
        parser.error(f"--max-order must be ≥ 2, got {args.max_order}")
    d = Derivation()
    try:
        integration_by_parts(d, args.max_order)
        relu(d, args.max_order)
        erf(d, args.max_order)
        numeric_cross_check(d, args.max_order)
    except DerivationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(d.document(), encoding="utf-8")
    print(f"\n{d.checks} SymPy checks passed; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
