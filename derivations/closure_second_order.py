"""Derivation of the ``second_order``, ``resummed`` and ``rational`` closures
(``featureode.ode.terms.SECOND_ORDER_GROWTH``, ``RESUMMED_GROWTH``, ``RATIONAL_GROWTH``; constants in
``featureode.kernel.second_order``), step by step with SymPy, written as LaTeX.

Run ``python derivations/closure_second_order.py --out FILE.tex``. Steps (each printed, each checked):

1. Per-neuron projections by exact Gaussian integration over ``z`` (d = 2, a polynomial activation with symbolic
   coefficients ``σ(u) = s_1 u + s_2 u²/2``): ``A_β(ŵ, b) = E_z[h_β σ(ŵ·z + b)]``; checked against the Stein
   form ``ŵ^β m_{|β|}/sqrt(β!)``.
2. The per-neuron kernel ``k_β = A_β² + a²(Σ_i g_i (∂_{ŵ_i} A_β)² + (∂_b A_β)²)`` (readout, weights, bias).
3. The mean-field flow driven by mode α, in the integrated residual ``D``: ``dθ/dD = γ P ∇φ_α``, ``φ_α = a A_α``,
   ``P = diag(1, g, 1)``; its second-order expansion ``θ = θ_0 + γD v_1 + ½(γD)² v_2`` checked against two Picard
   iterations of the flow.
4. ``λ_β(D) = E[k_β(θ(D))]`` averaged exactly over ``a ~ N(0,1)``, ``ŵ_i ~ N(0, g_i)``, ``b ~ N(0, σ_b²)``: the
   order ``γD`` vanishes, and ``S_{βα} = [γ²D²] λ_β / λ_β(0)`` in closed form; for a linear activation
   ``S_{αα} = 2 g_α`` (first-order ``displacement``: ``c_1 g_α = g_α``) and ``S_{z0,z1} = g_1``.
5. The package's Monte Carlo ``S`` (``featureode.kernel.second_order``, Stein forms + central differences) agrees with the
   closed form of step 4 for a quadratic activation within its error bar.
6. Resummation: for a linear activation the flow is a hyperbolic rotation, solved exactly (``dsolve``);
   ``RESUMMED_GROWTH`` with the linear constants equals it for the driving mode, and for the other mode gives the
   stated ``((1 + cosh x)/2)² + sinh²x/2`` (3/4 of the exact ``cosh²x`` as ``D → ∞``).
7. Every eigenvalue law (``SECOND_ORDER_GROWTH``, ``RESUMMED_GROWTH``, ``RATIONAL_GROWTH``) agrees with the exact
   second order ``1 + γ²SD²`` to ``O(D²)``; the rational law is that truncation where ``S ≥ 0`` and
   ``1/(1 + γ²|S|D²)`` where ``S < 0``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import sympy as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's package, also when run as a script
from _checks import CHECKS, check  # noqa: E402  (derivations/_checks.py: this script's folder is on sys.path)
from featureode.ode import terms as ode  # noqa: E402
from featureode.export.latex import expr_latex  # noqa: E402

a, w0, w1, b = sp.symbols("a w0 w1 b", real=True)
z0, z1, u = sp.symbols("z0 z1 u", real=True)
g0, g1, sb, gam, D, eps = sp.symbols("g0 g1 sigma_b gamma D epsilon", positive=True)
s1, s2 = sp.symbols("s1 s2", real=True)
W = (w0, w1)
G = (g0, g1)


def gauss(expr: sp.Expr, variables: dict[sp.Symbol, sp.Expr]) -> sp.Expr:
    """Exact ``E[expr]`` for independent centred Gaussians ``variables = {x: variance}`` (expr polynomial in them)."""
    poly = sp.Poly(sp.expand(expr), *variables)
    out = sp.Integer(0)
    for powers, coeff in poly.terms():
        term = coeff
        for (x, var), k in zip(variables.items(), powers):
            term *= 0 if k % 2 else sp.factorial2(k - 1) * var ** (k // 2)
        out += term
    return sp.expand(out)


def hermite(n: int, x: sp.Symbol) -> sp.Expr:
    return sp.hermite_prob(n, x) / sp.sqrt(sp.factorial(n))


def projection(mode: dict[int, int], sigma: sp.Expr) -> sp.Expr:
    """``A_β(ŵ, b) = E_z[h_β(z) σ(ŵ·z + b)]`` by exact Gaussian integration over ``z``."""
    hb = sp.Mul(*[hermite(n, (z0, z1)[i]) for i, n in mode.items()])
    return gauss(hb * sigma.subs(u, w0 * z0 + w1 * z1 + b), {z0: 1, z1: 1})


def kernel(A: sp.Expr) -> sp.Expr:
    """Per-neuron ``k = A² + a²(Σ_i g_i (∂_i A)² + (∂_b A)²)``."""
    return sp.expand(A**2 + a**2 * (sum(gi * sp.diff(A, wi) ** 2 for gi, wi in zip(G, W)) + sp.diff(A, b) ** 2))


def flow(A_alpha: sp.Expr) -> list[sp.Expr]:
    """``P ∇φ_α`` in coordinates ``(a, ŵ_0, ŵ_1, b)``, ``φ_α = a A_α``."""
    phi = a * A_alpha
    return [sp.diff(phi, a), g0 * sp.diff(phi, w0), g1 * sp.diff(phi, w1), sp.diff(phi, b)]


THETA = (a, w0, w1, b)
INIT = {a: 1, w0: g0, w1: g1, b: sb**2}


def second_order_coefficient(k_beta: sp.Expr, A_alpha: sp.Expr, verify_picard: bool = False) -> sp.Expr:
    """``[ε²] E[k_β(θ(ε))]`` with ``θ(ε) = θ_0 + ε v_1 + ½ ε² v_2`` (``ε = γD``)."""
    v1 = flow(A_alpha)
    jac = sp.Matrix(v1).jacobian(sp.Matrix(THETA))
    v2 = list(jac * sp.Matrix(v1))
    if verify_picard:
        # two Picard iterations of dθ/dε = P∇φ_α(θ): θ ≈ θ_0 + ∫ v(θ_0 + s v_1) ds, to order ε²
        s = sp.Symbol("s")
        shifted = {x: x + s * vx for x, vx in zip(THETA, v1)}
        picard = [sp.integrate(sp.series(vx.xreplace(shifted), s, 0, 2).removeO(), (s, 0, eps)) for vx in v1]
        mine = [eps * x1 + eps**2 / 2 * x2 for x1, x2 in zip(v1, v2)]
        check(all(sp.expand(p - q) == 0 for p, q in zip(picard, mine)),
              "θ(ε) = θ_0 + ε v_1 + ½ ε² v_2 equals two Picard iterations of the flow to order ε²")
    path = {x: x + eps * x1 + eps**2 / 2 * x2 for x, x1, x2 in zip(THETA, v1, v2)}
    series = sp.expand(k_beta.xreplace(path))
    first = gauss(series.coeff(eps, 1), INIT)
    check(sp.simplify(first) == 0, "the order γD of λ_β vanishes (a → −a symmetry)")
    return gauss(series.coeff(eps, 2), INIT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="LaTeX file to write")
    ap.add_argument("--mc-neurons", type=int, default=400_000, help="Monte Carlo neurons of step 5")
    args = ap.parse_args(argv)
    if args.mc_neurons < 1000:
        print(f"--mc-neurons must be ≥ 1000, got {args.mc_neurons}", file=sys.stderr)
        return 2
    tex: list[str] = []

    print("Step 1: per-neuron projections by Gaussian integration over z (quadratic σ, symbolic coefficients)")
    sigma = s1 * u + s2 * u**2 / 2
    modes = {"z0": {0: 1}, "z1": {1: 1}}
    A = {name: projection(m, sigma) for name, m in modes.items()}
    Q = w0**2 + w1**2
    m_k = [gauss(sp.diff(sigma, u, k).subs(u, b + sp.sqrt(Q) * z0), {z0: 1}) for k in range(3)]
    check(sp.expand(A["z0"] - w0 * m_k[1]) == 0 and sp.expand(A["z1"] - w1 * m_k[1]) == 0,
          "A_{z_i} = ŵ_i m_1(b, |ŵ|) (Stein form, theory §2)")
    print("  A_z0 =", A["z0"])
    tex.append(r"\section*{1. Projections}" "\n" rf"$A_{{z_0}} = {sp.latex(sp.factor(A['z0']))}$" "\n")

    print("Step 2: per-neuron kernel (readout + weights + bias)")
    k = {name: kernel(Ab) for name, Ab in A.items()}
    lam0 = {name: gauss(kb, INIT) for name, kb in k.items()}
    print("  λ_z0(0) =", sp.factor(lam0["z0"]))
    tex.append(r"\section*{2. Kernel}" "\n" r"$k_\beta = A_\beta^2 + a^2\big(\sum_i g_i (\partial_{\hat w_i} A_\beta)^2"
               r" + (\partial_b A_\beta)^2\big)$, " rf"$\lambda_{{z_0}}(0) = {sp.latex(sp.factor(lam0['z0']))}$" "\n")

    print("Step 3–4: second-order expansion of the flow driven by z0, averaged over the init law")
    coef = {(beta, "z0"): second_order_coefficient(k[beta], A["z0"], verify_picard=(beta == "z0"))
            for beta in ("z0", "z1")}
    S = {key: sp.simplify(val / lam0[key[0]]) for key, val in coef.items()}
    for key, val in S.items():
        print(f"  S[{key[0]},{key[1]}] =", val)
    linear = {s1: 1, s2: 0}
    check(sp.simplify(S[("z0", "z0")].subs(linear) - 2 * g0) == 0, "linear σ: S_{z0,z0} = 2 g_0")
    check(sp.simplify(S[("z1", "z0")].subs(linear) - g0) == 0, "linear σ: S_{z1,z0} = g_0 (growth of ⟨a²⟩)")
    tex.append(r"\section*{3--4. Second order}" "\n"
               r"$\theta = \theta_0 + \gamma D_\alpha v_1 + \tfrac12 \gamma^2 D_\alpha^2 v_2$, "
               r"$v_1 = P\nabla\phi_\alpha$, $v_2 = P\nabla^2\phi_\alpha v_1$; "
               r"$S_{\beta\alpha} = \frac{E[v_1^\top \nabla^2 k_\beta v_1 + \nabla k_\beta\cdot v_2]}"
               r"{2\lambda_\beta(0)}$." "\n\n"
               rf"Quadratic activation $\sigma = s_1 u + s_2 u^2/2$: $S_{{z_0 z_0}} = "
               rf"{sp.latex(sp.factor(S[('z0', 'z0')]))}$." "\n\n"
               r"Linear activation: $S_{z_0 z_0} = 2 g_0$, $S_{z_1 z_0} = g_0$ (first-order displacement: "
               r"$c_1 g_0 = g_0$)." "\n")

    print("Step 5: the package's constants against the closed form (quadratic σ = u + u²/2): the deterministic "
          "quadrature (featureode.kernel.second_order) to 1e-8, the Monte Carlo oracle (second_order_mc) within 4 s.e.")
    from featureode.kernel.second_order import second_order_constants
    from featureode.kernel.second_order_mc import second_order_constants as mc_constants
    gv, sbv = (0.6, 0.4), 0.5
    vals = {g0: gv[0], g1: gv[1], sb: sbv, s1: 1, s2: 1}
    det = second_order_constants(["z0", "z1"], gv, "u + u**2/2", sbv, drivers=[0])
    so = mc_constants(["z0", "z1"], gv, "u + u**2/2", sbv, drivers=[0], n_neurons=args.mc_neurons)
    for row, beta in enumerate(("z0", "z1")):
        exact = float(S[(beta, "z0")].subs(vals))
        mc, err = so.S[row, 0], so.S_stderr[row, 0]
        print(f"  S[{beta},z0]: closed form {exact:.8f}, quadrature {det.S[row, 0]:.8f}, "
              f"Monte Carlo {mc:.5f} ± {err:.5f}")
        check(abs(det.S[row, 0] - exact) <= 1e-8 * max(1.0, abs(exact)),
              f"deterministic S[{beta},z0] equals the closed form to 1e-8")
        check(abs(mc - exact) < 4 * err + 1e-6, f"Monte Carlo S[{beta},z0] within 4 standard errors of the "
                                                 "closed form")

    print("Step 6: resummation — the linear network's flow solved exactly, against the package's resummed law")
    aa, ww = sp.Function("a"), sp.Function("w")
    Dv = sp.Symbol("D", real=True)
    sol = sp.dsolve([sp.Eq(aa(Dv).diff(Dv), gam * ww(Dv)), sp.Eq(ww(Dv).diff(Dv), gam * g0 * aa(Dv))],
                    [aa(Dv), ww(Dv)], ics={aa(0): a, ww(0): w0})
    a_D, w_D = (sp.simplify(s.rhs.rewrite(sp.cosh)) for s in sol)
    # linear σ: k_z0 = ŵ_0² + a² g_0, k_z1 = ŵ_1² + a² g_1 (ŵ_1 is not driven by z0)
    lam_z0 = gauss(sp.expand(w_D**2 + a_D**2 * g0), INIT)
    lam_z1 = gauss(sp.expand(w1**2 + a_D**2 * g1), INIT)
    growth = {"z0": sp.simplify(lam_z0 / (2 * g0)), "z1": sp.simplify(lam_z1 / (2 * g1))}
    x = gam * sp.sqrt(g0) * Dv
    check(sp.simplify((growth["z0"] - sp.cosh(2 * x)).rewrite(sp.exp)) == 0,
          "linear σ: λ_z0(D)/λ_z0(0) = cosh(2γ sqrt(g_0) D)")
    check(sp.simplify((growth["z1"] - sp.cosh(x) ** 2).rewrite(sp.exp)) == 0,
          "linear σ: λ_z1(D)/λ_z1(0) = cosh²(γ sqrt(g_0) D)")
    # the package's laws with one driver (M = 1) and the linear constants U, V (test_second_order checks them):
    # driving mode U = V = g_0 (S = 2 g_0); mode z1 driven by z0: U = V = g_0/2 (S = g_0)
    UV = {"z0": (g0, g0), "z1": (g0 / 2, g0 / 2)}

    def law(term: object, beta: str) -> sp.Expr:
        Ub, Vb = UV[beta]
        e = term.body.subs(ode.M, 1).doit()  # type: ignore[attr-defined]
        e = e.subs({ode.Ud[ode.beta, 0]: Ub, ode.V[ode.beta, 0]: Vb, ode.S[ode.beta, 0]: Ub + Vb,
                    ode.Sd[0]: 2 * g0, ode.D[0]: Dv, ode.q: gam**2})
        return sp.simplify(e.rewrite(sp.exp))

    resummed = {beta: law(ode.RESUMMED_GROWTH, beta) for beta in ("z0", "z1")}
    check(sp.simplify(resummed["z0"] - growth["z0"].rewrite(sp.exp)) == 0,
          "linear σ: RESUMMED_GROWTH equals the exact flow for the driving mode z0")
    stated = ((1 + sp.cosh(x)) / 2) ** 2 + sp.sinh(x) ** 2 / 2
    check(sp.simplify(resummed["z1"] - stated.rewrite(sp.exp)) == 0,
          "linear σ: RESUMMED_GROWTH gives ((1 + cosh x)/2)² + sinh²x/2 for z1 (exact: cosh²x; the projection of "
          "u_2 on u_0 drops its orthogonal part)")
    ratio_inf = sp.limit((stated / sp.cosh(x) ** 2).subs(Dv, sp.Symbol("y", positive=True) / (gam * sp.sqrt(g0))),
                         sp.Symbol("y", positive=True), sp.oo)
    check(ratio_inf == sp.Rational(3, 4), "… 3/4 of the exact growth as D → ∞")
    tex.append(r"\section*{6. Resummation}" "\n"
               r"Linear activation, driven by $z_0$, $x = \gamma\sqrt{g_0}D$: $\lambda_{z_0}(D)/\lambda_{z_0}(0) = "
               r"\cosh 2x$ and $\lambda_{z_1}(D)/\lambda_{z_1}(0) = \cosh^2 x$. The resummed law with the linear "
               r"constants ($U = V = g_0$ for $z_0$, $U = V = g_0/2$ for $z_1$) is exact for $z_0$ and gives "
               r"$((1+\cosh x)/2)^2 + \sinh^2 x/2$ for $z_1$: $3/4$ of the exact growth as $D\to\infty$." "\n")

    print("Step 7: every eigenvalue law agrees with the exact second order 1 + γ²S D² to O(D²); the rational law is "
          "that truncation wherever S ≥ 0, and positive for any D")
    for term in (ode.SECOND_ORDER_GROWTH, ode.RESUMMED_GROWTH, ode.RATIONAL_GROWTH):
        for beta in ("z0", "z1"):
            series = sp.series(law(term, beta), Dv, 0, 3).removeO()
            check(sp.simplify(series - (1 + gam**2 * sum(UV[beta]) * Dv**2)) == 0,
                  f"{term.name}: λ_{beta} = 1 + γ² S D² + O(D⁴) (linear constants)")
    rational = ode.RATIONAL_GROWTH.body.subs(ode.M, 1).doit().subs({ode.D[0]: Dv, ode.q: gam**2})
    grow = rational.subs(ode.S[ode.beta, 0], sp.Symbol("S", positive=True))
    check(sp.simplify(grow - (1 + gam**2 * sp.Symbol("S", positive=True) * Dv**2)) == 0,
          "rational law = 1 + γ²S D² for S ≥ 0")
    shrink = rational.subs(ode.S[ode.beta, 0], -sp.Symbol("s", positive=True))
    check(sp.simplify(shrink - 1 / (1 + gam**2 * sp.Symbol("s", positive=True) * Dv**2)) == 0,
          "rational law = 1/(1 + γ²|S| D²) for S < 0: in (0, 1], never a sign change")
    tex.append(r"\section*{7. The rational law}" "\n"
               r"$\rho_\beta = (1 + q\sum_\alpha S^+_{\beta\alpha}D_\alpha^2)/(1 + q\sum_\alpha "
               r"S^-_{\beta\alpha}D_\alpha^2)$, $S^\pm = \max(\pm S, 0)$: the exact second order where "
               r"$S \ge 0$, $1/(1 + q|S|D^2)$ where $S < 0$; like the other laws it agrees with "
               r"$1 + qSD^2$ to $O(D^2)$." "\n")

    tex.append(r"\section*{The closure terms (featureode.ode.terms)}" "\n"
               r"\texttt{second\_order\_growth}: $\rho_\beta = " + expr_latex(ode.SECOND_ORDER_GROWTH.body)
               + "$\n\n" r"\texttt{resummed\_growth}: $\rho_\beta = " + expr_latex(ode.RESUMMED_GROWTH.body)
               + "$\n\n" r"\texttt{rational\_growth}: $\rho_\beta = " + expr_latex(ode.RATIONAL_GROWTH.body)
               + r"$ with $q = \gamma^2$ (meanfield), $\bar S_\alpha = \max(S_{\alpha\alpha}, 10^{-30})$, "
               r"$S_{\beta\alpha} = U_{\beta\alpha\alpha} + V_{\beta\alpha}$ (the positive laws: "
               r"docs/theory/well\_posedness.md)." "\n")
    doc = "\n".join([r"\documentclass[11pt]{article}", r"\usepackage[margin=2cm]{geometry}",
                     r"\usepackage{amsmath,amssymb}", r"\begin{document}",
                     r"\section*{Second-order closures: derivation}", *tex, r"\end{document}", ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(doc, encoding="utf-8")
    print(f"SymPy checks passed ({len(CHECKS)}); LaTeX written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
