"""The feature ODE family of theory §4 as named SymPy terms, in indexed and expanded renderings.

State per mode ``β ∈ B`` (``M = |B|`` modes, ``d`` directions): ``f_β`` and ``D_β``, stacked as ``y = (f, D)``.
The system is a fixed sequence of assignments; each right-hand side is written with *term placeholders* that a
variant fills with a body, removes (the term's neutral value) or replaces (a user expression)::

    r_i        = <closure term>_i                      (lazy: r_i = 1)
    s          = <scale>                               (off: s = 1)
    ρ_β        = <eigen_growth>_β · s                  eigen_growth = Π_i r_i^{β_i}
    λ_β        = λ_β(0) ρ_β
    df_β/dt    = <kernel_flow>_β [+ <mode_coupling>_β]  kernel_flow = λ_β (v_β − f_β)
    dD_β/dt    = <residual_integral>_β                  residual_integral = v_β − f_β

Built-in closure terms. Direction laws (``r_i``): ``agop_growth`` ``1 + κ Σ_β β_i f_β² / g_i``;
``displacement_growth`` ``1 + q_w Σ_β β_i c_{|β|} g^β D_β²``. Eigenvalue laws (``ρ_β`` in place of
``eigen_growth``, ``r_i = 1``): ``second_order_growth`` and ``resummed_growth`` (:data:`SECOND_ORDER_GROWTH`).
``q`` is the closure prefactor of the parametrization (``featureode.kernel.parametrization``; ``q = γ²`` for meanfield);
with per-group learning rates ``η_a, η_w, η_b`` (``[training] lr_scale``) each law's constant is derived again from
its derivation below: ``q_w = q η_w²`` (first-layer displacement, :data:`DISPLACEMENT_GROWTH`; also the derived
``κ = q_w c_1/Λ_1²``), ``q_a = q η_a²/E[a²]²`` (readout growth, :data:`SCALE`), and the second-order constants
``S_{βα}`` are averaged with the weighted metric ``P = diag(η_a, η_w g, η_b)`` under the plain ``q``; at plain SGD
``q_a = q_w = q``. See :data:`SCALE` for the scale factor and :data:`MODE_COUPLING` for the extended basis.

Symbols (also the names a user expression may use, :data:`NAMESPACE`): indices ``b``/``beta`` and ``a``/``alpha``
(modes), ``i`` (directions); states ``f[b]``, ``D[b]``; inputs ``v[b]`` (target), ``lam0[b]`` (λ_β(0)), ``B[b,i]``
(``β_i``), ``g[i]``, ``gpow[b]`` (``g^β``), ``c[b]`` (``c_{|β|}``), ``K[a,b]`` (off-diagonal Gram ``K_{αβ}(0)``,
extended basis), ``S[b,a]`` (second-order growth constants ``S_{βα}``), ``Sd[a]`` (``max(S_{αα}, 1e-30)``),
``U[b,a,delta]`` and ``V[b,a]`` (the two parts of ``S``: ``S_{βα} = U_{βαα} + V_{βα}``,
:mod:`featureode.kernel.second_order`; ``U`` with its cross terms ``α ≠ δ`` set to 0), ``Ud[b,a]`` (its diagonal
``U_{βαα} ≥ 0``, what the built-in laws use), ``sv[b]`` (spread shift ``s_β``, :data:`SPREAD`), ``gamma``, ``kappa``, ``q``, ``q_a``, ``q_w``; a second driving-mode index ``delta``
(``sum_delta``); intermediates ``r[i]``, ``s``, ``rho[b]``, ``lam[b]``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping, Sequence

import sympy as sp

from featureode.core.basis import check_basis
from featureode.core.errors import FeatureODEError
from featureode.calculus.hermite import Mode
from featureode.ode.indexed import DerivativeContext, IndexSpace, differentiate, expand, free_indices, rename_shadowed


class AssemblyError(FeatureODEError, ValueError):
    """A system that cannot be assembled (a term used out of order, with the wrong indices, …)."""


# ----------------------------------------------------------------------------------------------------------------
# symbols
# ----------------------------------------------------------------------------------------------------------------
M = sp.Symbol("M", integer=True, positive=True)
d = sp.Symbol("d", integer=True, positive=True)
beta = sp.Symbol("beta", integer=True)
alpha = sp.Symbol("alpha", integer=True)
i = sp.Symbol("i", integer=True)
j = sp.Symbol("j", integer=True)      # Jacobian column (a mode index); not available to user expressions
delta = sp.Symbol("delta", integer=True)   # a second driving-mode index (double sums over drivers)

f, D = sp.IndexedBase("f"), sp.IndexedBase("D")
v, lam0, B, g, gpow, c, K, S, Sd = (sp.IndexedBase(n) for n in ("v", "lam0", "B", "g", "gpow", "c", "K", "S", "Sd"))
U, V = sp.IndexedBase("U"), sp.IndexedBase("V")
Ud = sp.IndexedBase("Ud")   # U_{βαα}: the driving-diagonal part of U that the built-in second-order laws use
sv = sp.IndexedBase("sv")   # the spread shift s_β of the spread-aware flow (featureode.kernel.spread)
gamma, kappa, q = sp.Symbol("gamma"), sp.Symbol("kappa"), sp.Symbol("q")
qa, qw = sp.Symbol("q_a"), sp.Symbol("q_w")   # readout-growth and first-layer-displacement prefactors
r, rho, lam = sp.IndexedBase("r"), sp.IndexedBase("rho"), sp.IndexedBase("lam")
s = sp.Symbol("s")
dfdt, dDdt = sp.IndexedBase("dfdt"), sp.IndexedBase("dDdt")

STATES = (f, D)
#: Inputs of every compiled system, in argument order (user parameters follow, sorted by name).
INPUTS = ("B", "v", "lam0", "g", "gpow", "c", "K", "S", "Sd", "U", "V", "Ud", "sv", "gamma", "kappa", "q", "q_a", "q_w")
INTERMEDIATES = {"r": r, "s": s, "rho": rho, "lam": lam}


def index_space() -> IndexSpace:
    """A fresh index space: mode indices β, α, j over ``0…M-1``; the direction index i over ``0…d-1``."""
    return IndexSpace({"mode": M, "direction": d},
                      {beta: "mode", alpha: "mode", delta: "mode", j: "mode", i: "direction"})


def mode_sum(expr: sp.Expr, idx: sp.Symbol = beta) -> sp.Sum:
    """``Σ_{idx ∈ B} expr``."""
    return sp.Sum(expr, (idx, 0, M - 1))


def direction_sum(expr: sp.Expr, idx: sp.Symbol = i) -> sp.Sum:
    """``Σ_{idx=0}^{d-1} expr``."""
    return sp.Sum(expr, (idx, 0, d - 1))


def direction_product(expr: sp.Expr, idx: sp.Symbol = i) -> sp.Product:
    """``Π_{idx=0}^{d-1} expr``."""
    return sp.Product(expr, (idx, 0, d - 1))


#: Names a user expression may use, mapped to the objects above (plus the sum/product helpers).
NAMESPACE: dict[str, object] = {
    "b": beta, "beta": beta, "a": alpha, "alpha": alpha, "delta": delta, "i": i, "M": M, "d": d,
    "f": f, "D": D, "v": v, "lam0": lam0, "B": B, "g": g, "gpow": gpow, "c": c, "K": K, "S": S, "Sd": Sd,
    "U": U, "V": V, "Ud": Ud, "sv": sv,
    "gamma": gamma, "kappa": kappa, "q": q, "q_a": qa, "q_w": qw, "r": r, "s": s, "rho": rho, "lam": lam,
    "sum_b": mode_sum, "sum_a": lambda e: mode_sum(e, alpha), "sum_delta": lambda e: mode_sum(e, delta),
    "sum_i": direction_sum, "prod_i": direction_product,
}


# ----------------------------------------------------------------------------------------------------------------
# terms
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Definition:
    """A named sub-expression of a term's printed form, ``name[index] = expr`` (``ξ_α = sinh(ω_α √q D_α)/ω_α``): the
    printer shows it on its own line; the term's ``body`` has it put in (:meth:`put_in`)."""

    name: sp.IndexedBase
    index: sp.Symbol
    expr: sp.Expr

    def put_in(self, expr: sp.Expr) -> sp.Expr:
        """``expr`` with every ``name[k]`` replaced by this definition at index ``k``."""
        return expr.replace(lambda e: isinstance(e, sp.Indexed) and e.base == self.name,
                            lambda e: self.expr.xreplace({self.index: e.indices[0]}))


def put_in(expr: sp.Expr, where: Sequence[Definition]) -> sp.Expr:
    """``expr`` with the definitions ``where`` put in (a definition may use the ones after it)."""
    for _ in range(len(where) + 1):
        names = {w.name for w in where}
        if not any(x.base in names for x in expr.atoms(sp.Indexed)):
            return expr
        for w in where:
            expr = w.put_in(expr)
    raise AssemblyError("the definitions of a term refer to each other in a cycle; define each from the ones after it")


@dataclass(frozen=True)
class Term:
    """A named piece of the system: ``body`` with free indices ``index``; removing it puts ``neutral`` in its place
    (0 for an additive term, 1 for a factor). ``compact`` and ``where``: the body as printed, in named
    sub-expressions (:class:`Definition`) — ``body`` is ``compact`` with them put in (:func:`defined_term`)."""

    name: str
    body: sp.Expr
    index: tuple[sp.Symbol, ...]
    neutral: sp.Expr
    doc: str
    compact: sp.Expr | None = None
    where: tuple[Definition, ...] = ()

    def __post_init__(self) -> None:
        if self.compact is not None and put_in(self.compact, self.where) != self.body:
            raise AssemblyError(f"term {self.name}: its body is not its compact form with the definitions put in; "
                                "build it with defined_term")

    @property
    def placeholder(self) -> sp.Expr:
        """The undefined function ``name(index…)`` standing for the term in templates."""
        return sp.Function(self.name)(*self.index)

    def with_body(self, body: sp.Expr) -> "Term":
        """The same term with another body (a user replacement)."""
        return Term(self.name, sp.sympify(body), self.index, self.neutral, self.doc)


def defined_term(name: str, compact: sp.Expr, where: Sequence[Definition], index: tuple[sp.Symbol, ...],
                 neutral: sp.Expr, doc: str) -> Term:
    """A term printed as ``compact`` with the named sub-expressions ``where`` on their own lines (a formula too wide
    for a column otherwise); its body is ``compact`` with them put in."""
    return Term(name, put_in(compact, where), index, neutral, doc, compact, tuple(where))


KERNEL_FLOW = Term("kernel_flow", lam[beta] * (v[beta] - f[beta]), (beta,), sp.Integer(0),
                   "kernel flow: the residual of each mode relaxes at its current eigenvalue")
RESIDUAL_INTEGRAL = Term("residual_integral", v[beta] - f[beta], (beta,), sp.Integer(0),
                         "integrated residual: D accumulates the residual of each mode")
EIGEN_GROWTH = Term("eigen_growth", direction_product(r[i] ** B[beta, i]), (beta,), sp.Integer(1),
                    "eigenvalue growth: each eigenvalue follows the variance growth of the directions of its mode")
SCALE = Term("scale", 1 + qa * mode_sum(c[beta] * gpow[beta] * D[beta] ** 2), (), sp.Integer(1),
             "scale factor: predicted growth of the second-layer second moment, multiplying every eigenvalue")
"""``s = 1 + q_a Σ_β c_{|β|} g^β D_β²`` (``q_a = q η_a²/E[a²]²``; ``γ²`` in the meanfield parametrization at plain
SGD), the predicted growth of the second-layer second moment ``⟨a²⟩``.

Derivation. The readout weights follow ``da_k/dt = γ η_a E_x[(y − f) σ(u_k)]`` (``η_a``: the readout's learning-rate
multiplier, 1 at plain SGD). With ``y − f = Σ_β (v_β − f_β) h_β`` and
Gaussian integration by parts (theory §2) ``E_x[h_β σ(u_k)] = ŵ_k^β m_{|β|}(b_k, |ŵ_k|)/sqrt(β!)``; to first order
the first-layer weights are frozen, so integrating in time gives
``a_k(t) − a_k(0) = γ η_a Σ_β D_β ŵ_k^β m_{|β|}/sqrt(β!)``. Averaging the square over init neurons, the cross term
``2 a_k(0)(a_k(t) − a_k(0))`` vanishes (``a_k(0)`` is independent of ``(w_k, b_k)`` with mean 0); in the square of the
sum the terms ``β ≠ β'`` vanish by the sign symmetry ``w_i → −w_i`` whenever β and β' differ in parity along some
direction, and ``E[(ŵ^β)² m_{|β|}²]/β! ≈ g^β E[m_{|β|}²] = g^β c_{|β|}/E[a²]`` (exact for multilinear β when
``|ŵ|`` is treated as independent of one coordinate; ``c_l = E[a² m_l²] = E[a²] E[m_l²]``). Hence
``⟨a²⟩(t)/⟨a²⟩(0) = 1 + γ² η_a² Σ_β c_{|β|} g^β D_β² / E[a²]²``, i.e. ``q_a = q η_a²/E[a²]²``; the NTK's first-layer
part is proportional to ``a_k²``, so every eigenvalue is multiplied by ``s``. A frozen readout (``η_a = 0``) has
``s = 1``. Off by default.
"""
MODE_COUPLING = Term("mode_coupling",
                     sp.sqrt(rho[beta]) * mode_sum(K[beta, alpha] * sp.sqrt(rho[alpha]) * (v[alpha] - f[alpha]),
                                                   alpha),
                     (beta,), sp.Integer(0),
                     "off-diagonal kernel coupling between the modes of the extended basis")
"""Extended basis: ``df/dt = K(t)(v − f)`` with ``K_{αβ}(t) = K_{αβ}(0) sqrt(ρ_α ρ_β)``.

Choice: the closures rescale the effective data variance along direction i by ``r_i`` (and the readout scale by
``s``), so the feature component carried by ``h_β`` is multiplied by ``sqrt(ρ_β)``, ``ρ_β = s Π_i r_i^{β_i}``. The
kernel between two modes is an inner product of their feature components and scales with ``sqrt(ρ_α ρ_β)``; on the
diagonal this is exactly the target-basis law ``λ_β(t) = λ_β(0) ρ_β``. The diagonal part stays in ``kernel_flow``
and the off-diagonal part (``K`` = Gram with zero diagonal) is this term, so ablating it leaves the diagonal flow.
"""
AGOP_GROWTH = Term("agop_growth", 1 + kappa * mode_sum(B[beta, i] * f[beta] ** 2 / g[i]), (i,), sp.Integer(1),
                   "AGOP closure: features follow the gradient outer product of the learned function")
DISPLACEMENT_GROWTH = Term("displacement_growth",
                           1 + qw * mode_sum(B[beta, i] * c[beta] * gpow[beta] * D[beta] ** 2), (i,),
                           sp.Integer(1),
                           "displacement closure: first-order weight displacement driven by integrated residuals")
"""``r_i = 1 + q_w Σ_β β_i c_{|β|} g^β D_β²`` (``q_w = q η_w²``; ``γ²`` in the meanfield parametrization at plain
SGD), the predicted growth of the whitened first-layer second moment ``r_i = ⟨ŵ_{ki}²⟩/g_i``.

Derivation. The first-layer weights follow ``dw_k/dt = γ η_w a_k E_x[(y − f) σ'(u_k) x]`` (``η_w``: the first
layer's learning-rate multiplier). With ``y − f = Σ_β (v_β − f_β) h_β``, the readout and the features frozen to first
order, ``w_{ki}(t) − w_{ki}(0) = γ η_w a_k Σ_β D_β E_x[h_β σ'(u_k) x_i]``, whose leading (multilinear) part is
``sqrt(g_i) β_i ŵ_k^{β−e_i} m_{|β|}/sqrt(β!)`` (Gaussian integration by parts, theory §2). The cross term with
``w_{ki}(0)`` averages to 0 (``a_k`` has mean 0 and is independent), and in the square the terms ``β ≠ β'`` vanish by
sign symmetry, so ``⟨w_{ki}²⟩(t) − 1 = γ² η_w² Σ_β β_i g^β E[a_k² m_{|β|}²] D_β² = q_w Σ_β β_i c_{|β|} g^β D_β²``
(``E[ŵ^{2(β−e_i)}] = g^β/g_i`` for multilinear β). ``c_l = E[a² m_l²]`` is the init moment: the ``a_k`` comes from
``∂f/∂w_k ∝ a_k``, at its initial value to first order, so ``η_a`` does not enter; a frozen first layer
(``η_w = 0``) has ``r_i = 1`` (the lazy law).
"""

def _positive_law(first: "sp.Expr | None" = None, second: "sp.Expr | None" = None) -> sp.Expr:
    """``(1 + Σ_α V_{βα} c_α)² + Σ_α U_{βαα} s_α²`` with the driving-mode functions ``s_α`` (first order) and ``c_α``
    (second order) as given; default ``s_α = γ D_α``, ``c_α = γ² D_α²/2`` (``γ² = q``). The quadratic form
    ``Σ_{α,δ} U_{βαδ} s_α s_δ`` of the derivation is applied without its cross terms ``α ≠ δ``
    (:func:`featureode.ode.solve._diagonal_drivers` says why), so it is written on the diagonal ``Ud[β, α] = U_{βαα}``:
    ``M²`` operations per evaluation instead of ``M³`` on a tensor that is zero off its diagonal."""
    s_a = sp.sqrt(q) * D[alpha] if first is None else first
    c_a = q * D[alpha] ** 2 / 2 if second is None else second
    return (1 + mode_sum(V[beta, alpha] * c_a, alpha)) ** 2 + mode_sum(Ud[beta, alpha] * s_a ** 2, alpha)


SECOND_ORDER_GROWTH = Term("second_order_growth", _positive_law(), (beta,), sp.Integer(1),
                           "second-order closure: each eigenvalue as the average of the squared per-neuron "
                           "gradient expanded to second order in the weight displacement (readout, first-layer "
                           "and bias parts and their cross terms averaged jointly over init); positive by "
                           "construction")
"""``ρ_β = (1 + (q/2) Σ_α V_{βα} D_α²)² + q Σ_α U_{βαα} D_α²`` (an eigenvalue law: it takes the place of
``eigen_growth``; ``r_i = 1``; the derivation's ``q DᵀU_β D`` without its cross terms, :func:`_positive_law`).

Derivation (:mod:`featureode.kernel.second_order`, ``derivations/closure_second_order.py``). ``λ_β = E|u|²`` with
``u = P^{1/2}∇φ_β(θ)`` the per-neuron gradient; along the flow ``dθ/dD_α = γ P∇φ_α`` it is
``u = u_0 + Σ_α γ D_α u_1^α + ½ Σ_α γ² D_α² u_2^α + O(D³)``. Keeping of ``u_2^α`` its component along ``u_0`` in
``L²(init)``, ``V_{βα} u_0`` with ``V_{βα} = E[u_0·u_2^α]/λ_β`` (the orthogonal rest enters ``|u|²`` only at order
``D⁴``, with a positive sign), and with ``U_{βαδ} = E[u_1^α·u_1^δ]/λ_β`` and ``E[u_0·u_1^α] = 0`` (``a → −a``)::

    λ_β(D)/λ_β(0) = E|(1 + ½ Σ_α γ² D_α² V_{βα}) u_0 + Σ_α γ D_α u_1^α|² / λ_β = (1 + ½ q Σ_α V_{βα} D_α²)² + q DᵀU_β D.

To order ``D²`` this is ``1 + q Σ_α S_{βα} D_α²`` with ``S_{βα} = U_{βαα} + V_{βα}``, the exact second-order
growth. It is the average of a square (``U_β`` is a Gram matrix), so ``ρ_β ≥ 0`` for every ``D``, and
``K(t) = diag(√ρ) K(0) diag(√ρ)`` stays positive semi-definite (``docs/theory/well_posedness.md``). The previous law
``1 + q Σ_α S_{βα} D_α²`` — negative once ``S_{βα} < 0`` and ``D`` is large — is its truncation at order ``D²``.
For a linear activation ``S_{αα} = 2 g_α`` (``U = V = g_α``), where first-order ``displacement`` has
``c_1 g_α = g_α``.
"""
#: the named sub-expressions of the resummed law (printing only): first- and second-order driving functions ξ_α, ζ_α
#: and the rapidity ω_α (``xi``, ``zeta``, ``omega``: not inputs, put in before compiling)
xi, zeta, omega = sp.IndexedBase("xi"), sp.IndexedBase("zeta"), sp.IndexedBase("omega")
RESUMMED_GROWTH = defined_term(
    "resummed_growth", _positive_law(xi[alpha], zeta[alpha]),
    (Definition(xi, alpha, sp.sinh(omega[alpha] * sp.sqrt(q) * D[alpha]) / omega[alpha]),
     Definition(zeta, alpha, 2 * sp.sinh(omega[alpha] * sp.sqrt(q) * D[alpha] / 2) ** 2 / omega[alpha] ** 2),
     Definition(omega, alpha, sp.sqrt(Sd[alpha] / 2))),
    (beta,), sp.Integer(1),
    "resummed second-order closure: the positive second-order law resummed along the "
    "hyperbolic per-neuron flow of each driving mode")
"""``ρ_β = (1 + Σ_α V_{βα} ζ_α)² + Σ_α U_{βαα} ξ_α²`` with ``ξ_α = sinh(ω_α x_α)/ω_α``,
``ζ_α = (cosh(ω_α x_α) − 1)/ω_α² = 2 sinh²(ω_α x_α/2)/ω_α²``, ``x_α = sqrt(q) D_α``,
``ω_α² = Sd_α/2 = max(S_{αα}, 10⁻³⁰)/2`` (printed so, ξ, ζ, ω on their own lines: :func:`defined_term`).

Resummation. The second-order law keeps ``u = u_0 + x u_1 + ½ x² u_2``; if the per-neuron gradient obeys
``u‴ = ω² u′`` along the flow (true for a linear activation, where ``(a, ŵ_α/sqrt(g_α))`` rotates hyperbolically
with rapidity ``sqrt(g_α)``), the whole series is ``u = u_0 + (sinh ωx/ω) u_1 + ((cosh ωx − 1)/ω²) u_2``; with
``u_2`` projected on ``u_0`` as in :data:`SECOND_ORDER_GROWTH` the average of its square is the law above. The
rapidity is fixed by the driving mode's own second-order growth, ``ω_α² = S_{αα}/2`` (for ``S_{αα} ≤ 0`` it
falls back to ``ω → 0``, the second-order law). It agrees with ``second_order_growth`` to order ``D²``, is an
average of squares (``ρ_β ≥ 0``), and is exact for the driving mode of a linear network
(``λ_α(D)/λ_α(0) = cosh(2 γ sqrt(g_α) D_α)``; for a non-driving mode ``z_1`` it gives
``((1 + cosh x)/2)² + sinh² x/2`` against the exact ``cosh² x``, ``x = γ sqrt(g_0) D_0``: the projection drops
the part of ``u_2`` orthogonal to ``u_0``).
"""

RATIONAL_GROWTH = Term("rational_growth",
                       (1 + q * mode_sum(sp.Max(S[beta, alpha], 0) * D[alpha] ** 2, alpha))
                       / (1 + q * mode_sum(sp.Max(-S[beta, alpha], 0) * D[alpha] ** 2, alpha)),
                       (beta,), sp.Integer(1),
                       "rational second-order closure: the exact second-order growth, continued without sign "
                       "change (growing parts in the numerator, shrinking parts in the denominator)")
"""``ρ_β = (1 + q Σ_α S⁺_{βα} D_α²) / (1 + q Σ_α S⁻_{βα} D_α²)``, ``S^± = max(±S, 0)`` (an eigenvalue law).

It equals ``1 + q Σ_α S_{βα} D_α²`` — the exact second-order growth (:data:`SECOND_ORDER_GROWTH`) — to ``O(D²)``, is
positive and finite for every ``D`` (the denominator is ≥ 1), and where every ``S_{βα} ≥ 0`` it *is* the truncated
law. A mode whose eigenvalue shrinks tends to 0 like ``1/D²`` instead of crossing 0 (the truncated law's failure).

Why not the square. :data:`SECOND_ORDER_GROWTH` is the average of the square of the truncated per-neuron gradient;
its ``D⁴`` term ``¼ q² V²D⁴`` is only one of the ``D⁴`` contributions (``E[u_1·u_3]``, ``E[u_0·u_4]`` and the
orthogonal part of ``u_2`` are the others) and where ``V_{βα}`` is large and negative — a mode of higher degree
driven by a level-1 mode, e.g. ``h3(z0)`` driven by ``z0``, ``V ≈ −1.6``, ``U ≈ 1.9`` for ReLU — the square dips
through 0 and rebounds, 5× above the exact per-neuron flow at ``γD = 2``, where the truncated law is within 8%.
``docs/validation/law_fidelity.md`` sets every law beside an RK4 integration of the per-neuron mean-field flow
(one driving mode; ReLU, erf, tanh): this law is the truncated law wherever ``S ≥ 0``, the most accurate of them on
average. The continuation of a shrinking mode (``S < 0``) is a choice, stated, not derived, and the oracle does not
support it at large ``γD``: self-driven degree-3 modes (ReLU, d = 3) dip to about 0.8 of their initial eigenvalue and
recover by ``γD = 10``, where this law gives 0.12–0.39.
"""

SPREAD = Term("spread", 1 - sv[beta], (beta,), sp.Integer(1),
              "spectral spread: each eigenvalue lowered to the slow atom of the two-point spectral measure with the "
              "mode's init mean, variance and the top of the spectrum")
"""``λ_β(t) = λ_β(0) ρ_β (1 − s_β)`` with ``s_β = var_β/(λ_β(L − λ_β))`` (:func:`featureode.kernel.spread.two_point_shift`).

A Rayleigh quotient ``λ_β = ⟨φ_β, Kφ_β⟩`` is the mean of the mode's spectral measure ``ν_β``; the residual of the
mode relaxes as ``∫ e^{−λ Λ} dν_β`` (``Λ = ∫ρ``, when the kernel grows by a common factor), not ``e^{−λ_β Λ}``.
With the variance ``var_β = ‖Kφ_β‖² − λ_β²`` of the init kernel at the network's width (infinite-width couplings
and the 1/N part, :mod:`featureode.kernel.spread`) and the spectrum's top ``L``, the measure that decays fastest is
two-point with an atom at ``L`` (Chebyshev–Markov–Krein); its slow atom ``ℓ = λ_β(1 − s_β)`` is what this term
keeps: the least slowdown the spread implies. Off unless the variant asks for it (``+spread``).
"""

#: Terms present in every system (the closure term and mode_coupling depend on the variant and basis).
CORE_TERMS = (KERNEL_FLOW, RESIDUAL_INTEGRAL, EIGEN_GROWTH, SCALE, MODE_COUPLING)


# ----------------------------------------------------------------------------------------------------------------
# systems
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Assignment:
    """``target[index] = expr`` (``template`` is the same right-hand side with term placeholders)."""

    name: str
    target: sp.Basic
    index: tuple[sp.Symbol, ...]
    expr: sp.Expr
    template: sp.Expr = sp.Integer(0)


@dataclass(frozen=True)
class ExpandedSystem:
    """One SymPy expression per state variable for a concrete mode set (``states = f_β…, D_β…``)."""

    states: tuple[sp.Symbol, ...]
    rhs: tuple[sp.Expr, ...]
    observables: Mapping[str, tuple[sp.Expr, ...]]

    def jacobian(self) -> sp.Matrix:
        """``∂ rhs / ∂ states`` by SymPy (for checking the indexed Jacobian)."""
        return sp.Matrix(self.rhs).jacobian(sp.Matrix(self.states))


@dataclass(frozen=True)
class System:
    """A resolved feature-ODE system: assignments in evaluation order plus its terms and options."""

    assignments: tuple[Assignment, ...]
    terms: tuple[Term, ...]            # active terms, bodies as used (replaced ones hold the user body)
    removed: tuple[str, ...]
    replaced: tuple[str, ...]
    basis: str
    params: tuple[str, ...]            # user parameter names (inputs after INPUTS)
    space: IndexSpace = field(default_factory=lambda: index_space(), compare=False)  # incl. renamed indices

    @property
    def inputs(self) -> tuple[str, ...]:
        """Argument names after ``y`` of the compiled functions: :data:`INPUTS` + user params."""
        return INPUTS + self.params

    @cached_property
    def key(self) -> str:
        """Hash of the resolved equations (what the compiled code depends on; printing them takes ~10 ms, so it is
        kept: the system is frozen)."""
        blob = repr([(a.name, a.index, sp.srepr(a.expr)) for a in self.assignments] + list(self.params))
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    @cached_property
    def reads(self) -> frozenset[str]:
        """The names of the :attr:`inputs` its assignments read (an indexed input by its base, a scalar by its
        symbol)."""
        names: set[str] = set()
        for a in self.assignments:
            names |= {x.base.label.name for x in a.expr.atoms(sp.Indexed)}
            names |= {x.name for x in a.expr.atoms(sp.Symbol)}
        return frozenset(x for x in self.inputs if x in names)

    def assignment(self, name: str) -> Assignment:
        """The assignment named ``name`` (``r``, ``s``, ``rho``, ``lam``, ``dfdt``, ``dDdt``)."""
        return next(a for a in self.assignments if a.name == name)

    def term(self, name: str) -> Term:
        """The active term named ``name``."""
        return next(t for t in self.terms if t.name == name)

    # exact Jacobian, indexed -------------------------------------------------------------------------------------
    def jacobian_program(self) -> tuple[tuple[Assignment, ...], dict[tuple[str, str], sp.IndexedBase | None]]:
        """Indexed assignments for ``∂z/∂X[j]`` of every assignment ``z`` and state ``X``, and the four blocks
        ``{(d-state name, X name): J or None}`` (None: identically zero) of ``∂(df/dt, dD/dt)/∂(f, D)``."""
        space = self.space
        out: list[Assignment] = []
        blocks: dict[tuple[str, str], sp.IndexedBase | None] = {}
        for state in STATES:
            known: dict[sp.Basic, sp.IndexedBase | None] = {}
            for a in self.assignments:
                expr = differentiate(a.expr, DerivativeContext(state, j, known, space))
                jac = sp.IndexedBase(f"J_{a.name}_{state}") if expr != 0 else None
                known[a.target] = jac
                if jac is not None:
                    out.append(Assignment(jac.name, jac, a.index + (j,), expr))
                if a.name in ("dfdt", "dDdt"):
                    blocks[(a.name, str(state))] = jac
        return tuple(out), blocks

    # expanded rendering ------------------------------------------------------------------------------------------
    def expanded(self, modes: Sequence[Mode], dim: int,
                 values: Mapping[str, object] | None = None) -> ExpandedSystem:
        """Write the system out for the mode set ``modes`` in ``dim`` directions.

        For inspection and for checking the indexed form: the expressions grow with the mode set (a closure sums
        over every mode), so this is meant for a few dozen modes; the solver never uses it.
        With ``values=None`` the inputs stay symbolic (``v[z0]``, ``lam0[z0]``, ``g_0``, ``c_1``, ``K[z0,z1]``,
        ``gamma``, ``kappa``; ``B`` is always the integer order and ``g^β`` the product of the ``g_i``); otherwise
        ``values`` maps input names to arrays/floats as passed to the compiled code.
        """
        modes = list(modes)
        space = self.space
        sizes = {"mode": len(modes), "direction": dim}
        states = {str(st): [sp.Symbol(f"{st}[{m}]") for m in modes] for st in STATES}
        memo: dict[tuple, sp.Expr] = {}
        by_target = {a.target: a for a in self.assignments}

        def number(name: str, idx: tuple[int, ...]) -> sp.Expr:
            val = values[name]  # type: ignore[index]  # values is given whenever number() is called
            for k in idx:
                val = val[k]  # type: ignore[index]  # nested arrays/lists of floats
            return sp.Float(float(val), 17)  # type: ignore[arg-type]  # a float at the innermost index

        def lookup(base: sp.Basic, idx: tuple[int, ...]) -> sp.Expr:
            name = str(base)
            if name in states:
                return states[name][idx[0]]
            if base in by_target:
                key = (name, idx)
                if key not in memo:
                    a = by_target[base]
                    memo[key] = expand(a.expr, space, sizes, dict(zip(a.index, idx)), lookup)
                return memo[key]
            if name == "B":
                return sp.Integer(modes[idx[0]].order(idx[1]))
            if values is not None and (name in INPUTS or name in self.params):
                return number(name, idx)
            if name == "g":
                return sp.Symbol(f"g_{idx[0]}")
            if name == "gpow":
                return sp.Mul(*[sp.Symbol(f"g_{dd}") ** n for dd, n in modes[idx[0]].items])
            if name == "c":
                return sp.Symbol(f"c_{modes[idx[0]].degree}")
            if name == "K" and idx[0] == idx[1]:
                return sp.Integer(0)
            if idx:     # v, lam0, K: one symbol per mode (pair)
                return sp.Symbol(f"{name}[{','.join(str(modes[k]) for k in idx)}]")
            return base

        def rows(name: str) -> tuple[sp.Expr, ...]:
            a = self.assignment(name)
            n = sizes[space.kinds[a.index[0]]] if a.index else 1
            return tuple(lookup(a.target, (k,) if a.index else ()) for k in range(n))

        return ExpandedSystem(tuple(states["f"] + states["D"]), rows("dfdt") + rows("dDdt"),
                              {name: rows(name) for name in ("r", "s", "rho", "lam")})


def _check_references(a: Assignment, defined: set, terms: Iterable[Term]) -> None:
    used = {x.base for x in a.expr.atoms(sp.Indexed)} | a.expr.atoms(sp.Symbol)
    later = [str(x) for x in used if x in set(INTERMEDIATES.values()) - defined]
    if later:
        names = ", ".join(t.name for t in terms) or "(none)"
        raise AssemblyError(f"the right-hand side of {a.name} (terms: {names}) uses {', '.join(sorted(later))}, "
                           f"which is computed at or after {a.name}; available here: "
                           f"{', '.join(sorted(str(x) for x in defined)) or 'only states and inputs'}")


def is_eigen_law(closure: Term) -> bool:
    """A closure term indexed by a mode (``(β,)``) is an eigenvalue law: it gives ``ρ_β`` in place of
    ``eigen_growth`` (and ``r_i = 1``); one indexed by a direction (``(i,)``) gives ``r_i``."""
    return closure.index == (beta,)


def build_system(closure: Term | None, *, scale: bool = False, basis: str = "target",
                 removed: Iterable[str] = (), replaced: Mapping[str, sp.Expr] | None = None,
                 params: Iterable[str] = (), spread: bool = False) -> System:
    """Assemble and resolve the system for one closure term (``None``: lazy, ``r_i = 1``; a direction law gives
    ``r_i``, an eigenvalue law (:func:`is_eigen_law`) gives ``ρ_β`` in place of ``eigen_growth``).

    ``removed``: term names replaced by their neutral value; ``replaced``: ``{term name: new body}`` (free indices
    must be among the term's). Both must name terms active in this system (callers validate and report).
    ``spread``: multiply every eigenvalue by the :data:`SPREAD` term.
    """
    check_basis(basis, AssemblyError)
    replaced = dict(replaced or {})
    removed = tuple(removed)
    eigen = None if closure is not None and is_eigen_law(closure) else EIGEN_GROWTH
    active = [t for t in (closure, SCALE if scale else None, eigen, SPREAD if spread else None, KERNEL_FLOW,
                          MODE_COUPLING if basis == "extended" else None, RESIDUAL_INTEGRAL) if t is not None]
    terms = tuple(t.with_body(replaced[t.name]) if t.name in replaced else t for t in active)
    ph = {t.name: t.placeholder for t in terms}
    flow = ph["kernel_flow"] + (ph["mode_coupling"] if basis == "extended" else 0)
    direction_law = closure is not None and not is_eigen_law(closure)
    growth = ph[closure.name] if closure is not None and not direction_law else ph["eigen_growth"]
    templates = [("r", r, (i,), ph[closure.name] if direction_law else sp.Integer(1)),  # type: ignore[union-attr]  # direction_law implies closure is not None
                 ("s", s, (), ph["scale"] if scale else sp.Integer(1)),
                 ("rho", rho, (beta,), growth * s),
                 ("lam", lam, (beta,), lam0[beta] * rho[beta] * (ph["spread"] if spread else 1)),
                 ("dfdt", dfdt, (beta,), flow),
                 ("dDdt", dDdt, (beta,), ph["residual_integral"])]
    space = index_space()
    fill = {t.placeholder: (t.neutral if t.name in removed else t.body) for t in terms}
    assignments = []
    defined: set = set()
    for name, target, index, template in templates:
        used = [t for t in terms if template.has(t.placeholder)]
        expr = rename_shadowed(template.xreplace(fill), space, frozenset(index))
        stray = free_indices(expr, space) - set(index)
        if stray:
            raise AssemblyError(f"{name}{list(index) or ''} (terms: {', '.join(t.name for t in used)}) has free "
                               f"indices {sorted(map(str, stray))} that are not its own; sum them "
                               f"(sum_b/sum_i) or use {[str(x) for x in index] or 'no index'}")
        a = Assignment(name, target, index, expr, template)
        _check_references(a, defined, used)
        assignments.append(a)
        defined.add(target)
    return System(tuple(assignments), tuple(t for t in terms if t.name not in removed), removed,
                  tuple(sorted(replaced)), basis, tuple(sorted(params)), space)
