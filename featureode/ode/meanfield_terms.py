"""The mean-field variants' flow (:mod:`featureode.ode.meanfield`) as SymPy expressions.

Not an ODE on the modes: each init neuron ``θ = (a, ŵ_T, b, C)`` moves. These expressions are what ``derive``
typesets for ``meanfield``, ``meanfield+tail`` and ``meanfield+whole`` (:func:`featureode.export.latex.meanfield_latex`),
and ``theory_tests/test_meanfield_terms.py`` evaluates them at a state, with each ``E_z`` by a Gauss–Hermite rule,
against :class:`featureode.ode.meanfield.ReducedFlow`'s velocity and loss:

* :data:`VELOCITY`: ``dθ/dt = γ P E_z[r(z) ∇_θ (a m_0(u, s_⊥))]`` written out per coordinate, with ``∂m_k/∂u =
  m_{k+1}`` and ``∂m_0/∂C = η_w Σ_{i∉T} g_i ŵ_i² m_2`` (the heat equation of the Gaussian smoothing, carried by the
  C coordinate: ``dC/dt = γ a E_z[r m_2]``);
* :data:`DRIVE`: the residual ``r`` that drives, by variant: the basis' modes in ``T`` (``meanfield``,
  ``meanfield+tail``) or the whole residual on ``T`` (``meanfield+whole``);
* :data:`DEFINITIONS`: ``u``, ``s_⊥``, ``m_k``, ``P_T f`` and ``f_α``; :data:`LOSS`: the loss each variant reports.
"""
from __future__ import annotations

import sympy as sp

from featureode.ode.variants import MEANFIELD, MEANFIELD_TAIL, MEANFIELD_WHOLE

a, b, C = sp.symbols("a b C", real=True)
gamma = sp.Symbol("gamma", positive=True)
eta_a, eta_w, eta_b = sp.symbols("eta_a eta_w eta_b", positive=True)
u = sp.Symbol("u", real=True)                      #: the pre-activation on T, ``ŵ_T·z_T + b``
s_perp = sp.Symbol(r"s_{\perp}", nonnegative=True)  #: the smoothing by the coordinates outside T
z_i, w_i, g_i = sp.Symbol("z_i", real=True), sp.Symbol(r"\hat{w}_i", real=True), sp.Symbol("g_i", positive=True)
v_alpha, f_alpha = sp.Symbol(r"v_\alpha", real=True), sp.Symbol(r"f_\alpha", real=True)


class Expect(sp.Function):
    """``E_over[x]``: ``Expect(x, over)``, printed ``\\mathrm{E}_{over}[x]`` (amsmath alone)."""

    nargs = 2

    def _latex(self, printer: sp.printing.latex.LatexPrinter) -> str:
        body, over = self.args
        return rf"\mathrm{{E}}_{{{printer._print(over)}}}\left[{printer._print(body)}\right]"


class SumOver(sp.Function):
    """``Σ_{over} x``: ``SumOver(x, over)`` with ``over`` a symbol naming the set (``α ∈ S``)."""

    nargs = 2

    def _latex(self, printer: sp.printing.latex.LatexPrinter) -> str:
        body, over = self.args
        return rf"\sum_{{{printer._print(over)}}} {printer.parenthesize(body, 50)}"


#: ``m_k(u, s) = E_ζ[σ^{(k)}(u + sζ)]``, the activation's Gaussian-smoothed derivatives
m = [sp.Function(f"m_{k}") for k in range(3)]
z, zeta = sp.Symbol("z"), sp.Symbol("zeta", real=True)
_theta, _theta0 = sp.Symbol("theta"), sp.Symbol("theta_0")


def E_z(x: sp.Expr) -> sp.Expr:
    """The expectation over ``z_T ~ N(0, I)``."""
    return Expect(x, z)


class _PTf(sp.Function):
    """``(P_T f)(z)``: the network's output averaged over the coordinates outside T."""

    nargs = 1

    def _latex(self, printer: sp.printing.latex.LatexPrinter) -> str:
        return rf"(P_T f)({printer._print(self.args[0])})"


PTf = _PTf(z)
r, y, h_alpha = (sp.Function(name)(z) for name in ("r", "y", r"h_\alpha"))

#: ``dθ/dt`` of a neuron, per coordinate (``ŵ_i`` for ``i ∈ T``)
VELOCITY: dict[str, sp.Expr] = {
    "a": eta_a * gamma * E_z(r * m[0](u, s_perp)),
    r"\hat{w}_i": eta_w * g_i * gamma * a * E_z(r * m[1](u, s_perp) * z_i),
    "b": eta_b * gamma * a * E_z(r * m[1](u, s_perp)),
    "C": gamma * a * E_z(r * m[2](u, s_perp)),
}
#: the coordinates' symbols (the left-hand sides of :data:`VELOCITY`)
COORDINATES = {"a": a, r"\hat{w}_i": w_i, "b": b, "C": C}

_S = sp.Symbol(r"\alpha \in S")     # the basis' modes in T (printed under the sum)
_B_OUT = sp.Symbol(r"\alpha \in B,\ \alpha \not\subset T")
#: the residual that drives, by variant
DRIVE: dict[str, sp.Expr] = {
    MEANFIELD: SumOver((v_alpha - f_alpha) * h_alpha, _S),
    MEANFIELD_TAIL: SumOver((v_alpha - f_alpha) * h_alpha, _S),
    MEANFIELD_WHOLE: y - PTf,
}

_s2 = SumOver(sp.Symbol(r"\hat{w}_i(0)") ** 2 * sp.exp(2 * eta_w * g_i * C), sp.Symbol(r"i \notin T"))
#: the definitions every mean-field variant uses, as ``(left, right)`` pairs
DEFINITIONS: list[tuple[sp.Expr, sp.Expr]] = [
    (u, sp.Symbol(r"\hat{w}_T \cdot z_T") + b),
    (s_perp ** 2, _s2),
    (sp.Function("m_k")(u, sp.Symbol("s")), Expect(sp.Function(r"\sigma^{(k)}")(u + sp.Symbol("s") * zeta), zeta)),
    (PTf, (Expect(a * m[0](u, s_perp), _theta) - Expect(a * m[0](u, s_perp), _theta0)) / gamma),
    (f_alpha, E_z(PTf * h_alpha)),   # α ⊂ T; the basis' modes outside T are projected (module docstring)
]

_norm = SumOver(v_alpha ** 2, sp.Symbol(r"\alpha \in B"))
#: ``L/L(0)`` by variant: on the basis' modes; or on every mode in T (Parseval) plus the basis' modes outside T
LOSS: dict[str, sp.Expr] = {
    MEANFIELD: SumOver((v_alpha - f_alpha) ** 2, sp.Symbol(r"\alpha \in B")) / _norm,
    MEANFIELD_TAIL: (E_z((y - PTf) ** 2) + SumOver(f_alpha ** 2, _B_OUT)) / _norm,
    MEANFIELD_WHOLE: (E_z((y - PTf) ** 2) + SumOver(f_alpha ** 2, _B_OUT)) / _norm,
}


def split_expectation(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """``(prefactor, integrand)`` of a :data:`VELOCITY` entry: ``expr = prefactor · E_z(integrand)``."""
    (ez,) = [x for x in expr.atoms(sp.Function) if isinstance(x, Expect)]
    return sp.simplify(expr / ez), ez.args[0]
