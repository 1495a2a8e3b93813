"""Symbolic derivation of the init kernel formulas of ``featureode.kernel.theory`` (issue 3), checked with SymPy, as LaTeX.

Run ``python derivations/kernel_derivation.py [--out FILE.tex] [--compile]``. Every identity below is verified
exactly (``assert``) before it is written:

1. Per-neuron projections (theory §2): for ``u = ŵ·z + b``, ``z ~ N(0, I)``, and polynomial ``F``,
   ``E_z[h_β(z) F(u)] = ŵ^β/sqrt(β!) · E[F^{(|β|)}(u)]`` and
   ``E_z[h_β(z) z_i F(u)] = (ŵ^β ŵ_i E[F^{(|β|+1)}] + β_i ŵ^{β−e_i} E[F^{(|β|−1)}]) / sqrt(β!)``
   (so ``G_{βi} = sqrt(g_i) E_z[h_β z_i σ'(u)]``), in two dimensions with symbolic ``ŵ_0, ŵ_1, b``.
2. HEA level coefficients: for a generic polynomial activation with symbolic coefficients and a symbolic bias
   variance, the NTK on the unit sphere ``Θ(ρ) = E[σ(u)σ(u') + σ'(u)σ'(u')(ρ + 1)]`` (``u, u'`` unit-variance
   Gaussians with correlation ρ around a common ``b ~ N(0, σ_b²)``) has ``l! [ρ^l] Θ = (l+1) E_b[m_l(b,1)²] +
   E_b[m_{l+1}(b,1)²]``.
3. ReLU: the closed forms of ``Λ_l`` (symbolic σ_b) from ``featureode.kernel.theory.level_coefficient_exprs`` equal the
   Taylor coefficients of the closed-form arc-cosine NTK, exactly at σ_b = 1/2.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

import sympy as sp

from featureode.calculus.hermite import Mode
from featureode.kernel.theory import level_coefficient_exprs

XI, ETA, RHO = sp.symbols("xi eta rho", real=True)
SB = sp.Symbol("sigma_b", positive=True)
BB = sp.Symbol("b", real=True)


def gaussian_mean(poly: sp.Poly) -> sp.Expr:
    """Exact ``E[poly]`` for independent standard normal generators of ``poly`` (``E[x^{2j}] = (2j−1)!!``)."""
    return sp.expand(sum((c * sp.prod([sp.factorial2(k - 1) if k % 2 == 0 else 0 for k in powers])
                          for powers, c in poly.terms()), sp.Integer(0)))


def power_mean(n: int, mean: sp.Expr, var: sp.Expr) -> sp.Expr:
    """``E[v^n]``, ``v ~ N(mean, var)``: ``Σ_j binom(n, 2j) mean^{n−2j} var^j (2j−1)!!``."""
    return sum((sp.binomial(n, 2 * j) * mean ** (n - 2 * j) * var**j * sp.factorial2(2 * j - 1)
                for j in range(n // 2 + 1)), sp.Integer(0))


def derivative_mean(coeffs: list[sp.Expr], k: int, mean: sp.Expr, var: sp.Expr) -> sp.Expr:
    """``E[F^{(k)}(v)]``, ``v ~ N(mean, var)``, for ``F(u) = Σ_n coeffs[n] u^n``."""
    return sum((c * sp.ff(n, k) * power_mean(n - k, mean, var) for n, c in enumerate(coeffs) if n >= k),
               sp.Integer(0))


def check_projection_identities(max_poly: int = 6) -> list[tuple[str, str]]:
    """Item 1 of the module docstring on a generic polynomial F and several modes in d = 2 (exact polynomial
    arithmetic; with ``He_β = sqrt(β!) h_β`` the identities read without square roots)."""
    cs = list(sp.symbols(f"c0:{max_poly + 1}"))
    z = sp.symbols("z0 z1", real=True)
    w = sp.symbols("what0 what1", real=True)
    pre = sp.Poly(w[0] * z[0] + w[1] * z[1] + BB, *z)
    F_pre = sum((c * pre**n for n, c in enumerate(cs)), sp.Poly(0, *z))
    norm2 = w[0] ** 2 + w[1] ** 2
    rows = []
    for text in ("z0", "h2(z0)", "z0*z1", "h2(z0)*z1", "h3(z1)"):
        mode = Mode.parse(text)
        he = sp.Poly(sp.expand(mode.sympy(z) * sp.sqrt(mode.factorial)), *z)
        p, wb = mode.degree, sp.Mul(*[w[i] ** n for i, n in mode.items])
        lhs = gaussian_mean(he * F_pre)
        assert sp.expand(lhs - wb * derivative_mean(cs, p, BB, norm2)) == 0, text
        for i in (0, 1):
            lhs_i = gaussian_mean(he * sp.Poly(z[i], *z) * F_pre)
            lower = mode.order(i) * sp.cancel(wb / w[i]) * derivative_mean(cs, p - 1, BB, norm2) if mode.order(i) else 0
            assert sp.expand(lhs_i - wb * w[i] * derivative_mean(cs, p + 1, BB, norm2) - lower) == 0, (text, i)
        rows.append((text, sp.latex(wb / sp.sqrt(mode.factorial))))
    return rows


def check_level_coefficients(degree: int = 4) -> None:
    """Item 2 of the module docstring for ``σ(u) = Σ_{k ≤ degree} c_k u^k``, all levels ``l ≤ 2 degree``."""
    cs = list(sp.symbols(f"c0:{degree + 1}"))
    dcs = [n * c for n, c in enumerate(cs)][1:]
    gens = (XI, ETA)
    v = sp.Poly(BB + XI, *gens)
    tau = sp.Symbol("tau", positive=True)                           # τ = sqrt(1 − ρ²)
    v2 = sp.Poly(BB + RHO * XI + tau * ETA, *gens)                   # corr(v − b, v2 − b) = ρ

    def at(coeffs: list[sp.Expr], x: sp.Poly) -> sp.Poly:
        return sum((c * x**n for n, c in enumerate(coeffs)), sp.Poly(0, *gens))

    inner = at(cs, v) * at(cs, v2) + at(dcs, v) * at(dcs, v2) * (RHO + 1)
    theta_b = sp.Poly(gaussian_mean(inner), tau)                    # only even powers of τ survive
    assert all(k % 2 == 0 for (k,) in theta_b.monoms())
    theta_b = sp.expand(theta_b.as_expr().subs(tau, sp.sqrt(1 - RHO**2)))
    theta = gaussian_mean(sp.Poly(theta_b.subs(BB, SB * XI), XI))
    poly = sp.Poly(theta, RHO)

    def eb_m2(level: int) -> sp.Expr:
        m = derivative_mean(cs, level, BB, 1)
        return gaussian_mean(sp.Poly(sp.expand((m**2).subs(BB, SB * XI)), XI))

    for level in range(2 * degree + 1):
        lhs = sp.factorial(level) * poly.coeff_monomial(RHO**level)
        assert sp.expand(lhs - ((level + 1) * eb_m2(level) + eb_m2(level + 1))) == 0, level


def arccos_ntk(rho: sp.Expr, sb: sp.Expr) -> sp.Expr:
    """ReLU NTK on the unit sphere, closed form: ``k_1 + k_0 (ρ + 1)`` (arc-cosine kernels with bias)."""
    v = 1 + sb**2
    th = sp.acos((rho + sb**2) / v)
    return v * (sp.sin(th) + (sp.pi - th) * sp.cos(th)) / (2 * sp.pi) + (sp.pi - th) / (2 * sp.pi) * (rho + 1)


def relu_levels(max_level: int = 4) -> list[sp.Expr]:
    """Item 3: closed forms of Λ_1 … Λ_max (symbolic σ_b), checked against the arc-cosine Taylor series."""
    found = level_coefficient_exprs("relu", SB, max_level)
    exprs: list[sp.Expr] = []
    for level, expr in enumerate(found[1:], start=1):
        assert expr is not None, f"ReLU has a closed form for Λ_{level}"
        exprs.append(expr)
    series = sp.series(arccos_ntk(RHO, sp.Rational(1, 2)), RHO, 0, max_level + 1).removeO()
    for level in range(1, max_level + 1):
        taylor = sp.factorial(level) * series.coeff(RHO, level)
        closed = exprs[level - 1].subs(SB, sp.Rational(1, 2))
        assert abs(sp.N(taylor - closed, 50)) < sp.Float(10) ** -40, level
    return exprs


def document(projections: list[tuple[str, str]], relu: list[sp.Expr]) -> str:
    """The standalone LaTeX document."""
    dot = r"$\cdot$"
    mode_rows = "\n".join(rf"\texttt{{{t.replace('*', dot)}}} & ${w}$ \\" for t, w in projections)
    relu_rows = "\n".join(rf"\Lambda_{{{l}}} &= {sp.latex(e)}, & \Lambda_{{{l}}}(\sigma_b = \tfrac12) &\approx "
                          rf"{float(e.subs(SB, sp.Rational(1, 2))):.6f} \\"
                          for l, e in enumerate(relu, start=1))
    return rf"""\documentclass[11pt]{{article}}
\usepackage{{amsmath,amssymb}}
\usepackage[margin=2.2cm]{{geometry}}
\title{{Kernel theory at initialization: derivation (featureode)}}
\date{{}}
\begin{{document}}
\maketitle
Notation (theory §1): data $x_i = \sqrt{{g_i}}\, z_i$, $z \sim N(0, I_d)$; neuron $u = w\cdot x + b = \hat w \cdot z + b$ with
$\hat w_i = \sqrt{{g_i}}\, w_i \sim N(0, g_i)$, $b \sim N(0, \sigma_b^2)$, $a \sim N(0,1)$; derivative means
$m_k(b, s) = \mathbb E[\sigma^{{(k)}}(u)]$, $u \sim N(b, s^2)$; infinite-width NTK
$\Theta(x, x') = \mathbb E_k[\sigma(u)\sigma(u') + a^2 \sigma'(u)\sigma'(u')(x\cdot x' + 1)]$.

\section{{Per-neuron projections}}
Gaussian integration by parts gives, for every polynomial (hence, by density, every tempered) $F$,
\begin{{align}}
\mathbb E_z[h_\beta(z) F(u)] &= \frac{{\hat w^\beta}}{{\sqrt{{\beta!}}}}\, \mathbb E[F^{{(|\beta|)}}(u)], \\
\mathbb E_z[h_\beta(z)\, z_i\, F(u)] &= \frac{{\hat w^\beta \hat w_i\, \mathbb E[F^{{(|\beta|+1)}}(u)]
  + \beta_i\, \hat w^{{\beta - e_i}}\, \mathbb E[F^{{(|\beta|-1)}}(u)]}}{{\sqrt{{\beta!}}}}
\end{{align}}
(the second from $z_i h_n(z_i) = \sqrt{{n+1}}\,h_{{n+1}} + \sqrt n\, h_{{n-1}}$). Both were verified exactly with SymPy in
$d = 2$ for a generic polynomial $F$ of degree 6 and symbolic $\hat w_0, \hat w_1, b$; prefactors
$\hat w^\beta/\sqrt{{\beta!}}$:
\begin{{center}}\begin{{tabular}}{{ll}}
mode & $\hat w^\beta/\sqrt{{\beta!}}$ \\ \hline
{mode_rows}
\end{{tabular}}\end{{center}}
Hence, with $p = |\beta|$ and $m_k = m_k(b, |\hat w|)$,
\begin{{equation}}
A_\beta = \frac{{\hat w^\beta m_p}}{{\sqrt{{\beta!}}}},\quad H_\beta = \frac{{\hat w^\beta m_{{p+1}}}}{{\sqrt{{\beta!}}}},\quad
G_{{\beta i}} = \sqrt{{g_i}}\,\frac{{\hat w^\beta \hat w_i m_{{p+2}} + \beta_i \hat w^{{\beta-e_i}} m_p}}{{\sqrt{{\beta!}}}},
\end{{equation}}
and the Gram matrix $K_{{\alpha\beta}} = \mathbb E[h_\alpha \Theta h_\beta]
= \mathbb E_k[A_\alpha A_\beta + a^2(\sum_i G_{{\alpha i}} G_{{\beta i}} + H_\alpha H_\beta)]$ (readout, weights, bias parts),
where, with $P = \sum_i g_i \hat w_i^2$, $q = |\alpha|$ and $\alpha\cdot g = \sum_i \alpha_i g_i$,
\begin{{equation}}
\sqrt{{\alpha!\beta!}}\sum_i G_{{\alpha i}}G_{{\beta i}} = \hat w^{{\alpha+\beta}}\big[P\, m_{{q+2}} m_{{p+2}}
 + (\beta\cdot g)\, m_{{q+2}} m_p + (\alpha\cdot g)\, m_q m_{{p+2}}\big] + \sum_i g_i \alpha_i\beta_i\, \hat w^{{\alpha+\beta-2e_i}} m_q m_p .
\end{{equation}}
$K_{{\alpha\beta}} = 0$ unless $\alpha_i + \beta_i$ is even for every $i$. The exact eigenvalue is
$\lambda_\beta(0) = K_{{\beta\beta}}$; the closure constants are $c_l = \mathbb E_k[a^2 m_l(b, |\hat w|)^2]$.

\section{{Average over the initialization}}
Every term is $\mathbb E[\hat w^{{2\gamma}} (P)\, F(b, |\hat w|^2)]$. Since $\hat w_i^{{2\gamma_i}}$ size-biases
$\hat w_i^2 \sim g_i\chi^2_1$ into $g_i\chi^2_{{1+2\gamma_i}}$,
\begin{{equation}}
\mathbb E\big[\hat w^{{2\gamma}} e^{{-tQ}}\big] = \prod_i (2\gamma_i - 1)!!\, g_i^{{\gamma_i}}\,(1 + 2 t g_i)^{{-(1/2+\gamma_i)}},
\qquad Q = |\hat w|^2,
\end{{equation}}
and the factor $P$ multiplies it by $\sum_i (2\gamma_i+1) g_i^2/(1 + 2 t g_i)$. The density of $Q$ under each measure
is obtained from this exact Laplace transform, so each average is a two-dimensional integral over $(b, Q)$.

\section{{HEA level coefficients}}
On the unit sphere $\Theta$ is a dot-product kernel in $\rho = x\cdot x'$. Mehler's formula
$\mathbb E[F(b+\xi)G(b+\xi')] = \sum_n \frac{{\rho^n}}{{n!}}\,\mathbb E[F^{{(n)}}]\,\mathbb E[G^{{(n)}}]$
($\xi, \xi'$ unit normals with correlation $\rho$) gives
\begin{{equation}}
\Theta(\rho) = \sum_{{l\ge0}} \frac{{\Lambda_l}}{{l!}}\,\rho^l,\qquad
\Lambda_l = (l+1)\,\mathbb E_b[m_l(b,1)^2] + \mathbb E_b[m_{{l+1}}(b,1)^2],
\end{{equation}}
verified exactly with SymPy for $\sigma(u) = \sum_{{k\le 4}} c_k u^k$ with symbolic $c_k$ and $\sigma_b$, all
$l \le 8$. The HEA eigenvalue is $\lambda^{{\mathrm{{HEA}}}}_\beta = \Lambda_{{|\beta|}}\, g^\beta$.

\paragraph{{ReLU.}} With $m_1 = \Phi(b)$, $m_l = (-1)^l \mathrm{{He}}_{{l-2}}(b)\varphi(b)$ ($l \ge 2$) and
$\mathbb E[\Phi(b)^2] = \tfrac14 + \tfrac1{{2\pi}}\arcsin\frac{{\sigma_b^2}}{{1+\sigma_b^2}}$:
\begin{{align*}}
{relu_rows}
\end{{align*}}
These equal $l!$ times the Taylor coefficients of the closed-form arc-cosine NTK
$\Theta(\rho) = \frac{{v}}{{2\pi}}(\sin\theta + (\pi-\theta)\cos\theta) + \frac{{\pi-\theta}}{{2\pi}}(\rho+1)$,
$v = 1 + \sigma_b^2$, $\cos\theta = (\rho + \sigma_b^2)/v$ (checked at $\sigma_b = 1/2$ to 40 digits).
\end{{document}}
"""


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "kernel_derivation.tex"))
    ap.add_argument("--compile", action="store_true", help="run pdflatex on the result (in a temporary folder)")
    args = ap.parse_args(argv)
    projections = check_projection_identities()
    check_level_coefficients()
    relu = relu_levels()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(document(projections, relu))
    if args.compile:
        exe = shutil.which("pdflatex")
        if exe is None:
            raise SystemExit("pdflatex not found")
        with tempfile.TemporaryDirectory() as tmp:
            res = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", "-output-directory", tmp,
                                  str(out)], capture_output=True, text=True)
            if res.returncode:
                raise SystemExit(f"pdflatex failed:\n{res.stdout[-3000:]}")
            shutil.copy(Path(tmp) / (out.stem + ".pdf"), out.with_suffix(".pdf"))
    print(f"verified; wrote {out}")
    return out


if __name__ == "__main__":
    main()
