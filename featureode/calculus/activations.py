"""Named activations (theory §2): the registry :data:`ACTIVATIONS` of the built-in σ (relu, abs, erf, gelu, step,
linear and quadratic with closed-form means; tanh, sigmoid, softplus and silu by quadrature), :func:`from_expression`
for an expression in ``u`` (refused by :func:`check_gaussian_means` when its Gaussian means do not exist),
:func:`get_activation` and :func:`register_activation`.

One activation and its Gaussian calculus (derivative means ``m_k(b, s)``, Hermite coefficients ``μ_n(b, s)``, NumPy
and torch functions) is :class:`~featureode.calculus.activation_calculus.Activation`; the names of that module
(``Activation``, ``ActivationError``, ``Coefficient``, the symbols ``U``, ``B``, ``S``) are re-exported here.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import mpmath
import sympy as sp

from featureode.calculus import expfamily
from featureode.calculus.activation_calculus import (  # noqa: F401  (re-exported)
    B,
    S,
    U,
    Activation,
    ActivationError,
    Coefficient,
    _Phi,
    _phi,
    _polynomial_mean,
)
from featureode.calculus.numerics import _numpy_namespace, _stable  # noqa: F401  (re-exported)
from featureode.core.registry import Registry


# ---------------------------------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------------------------------
def _relu_mean0() -> sp.Expr:
    return B * _Phi(B / S) + S * _phi(B / S)


def _builtin() -> list[Activation]:
    relu = sp.Piecewise((U, U > 0), (0, True))
    q1 = sp.sqrt(1 + S**2)
    acts = [
        Activation("relu", relu, _relu_mean0(), 1, "max(u, 0)"),
        Activation("abs", sp.Abs(U), 2 * _relu_mean0() - B, 1, "|u|"),
        Activation("erf", sp.erf(U), sp.erf(B / sp.sqrt(1 + 2 * S**2)), None, "erf(u)"),
        Activation("gelu", U * _Phi(U), B * _Phi(B / q1) + S**2 * _phi(B / q1) / q1, None, "u Φ(u) (exact GELU)"),
        Activation("step", sp.Piecewise((1, U > 0), (0, True)), _Phi(B / S), 0, "Heaviside step 1[u > 0]"),
        Activation("linear", U, B, None, "u"),
        Activation("quadratic", U**2, B**2 + S**2, None, "u²"),
        Activation("tanh", sp.tanh(U), None, None, "tanh(u) (quadrature)"),
        Activation("sigmoid", 1 / (1 + sp.exp(-U)), None, None, "1/(1 + e^{-u}) (quadrature)"),
        Activation("softplus", sp.log(1 + sp.exp(U)), None, None, "log(1 + e^u) (quadrature)"),
        Activation("silu", U / (1 + sp.exp(-U)), None, None, "u/(1 + e^{-u}) (quadrature)"),
    ]
    return acts


def _check_activation(name: str, act: Activation) -> None:
    if not isinstance(act, Activation):
        raise ActivationError(f"activation {name!r} must be an Activation (e.g. from_expression('u**3', "
                              f"name={name!r})), got {type(act).__name__}")


#: The named activations (a :class:`~featureode.core.registry.Registry`: case-sensitive names, a lookup also finds
#: a unique case-insensitive match). Add one with :func:`register_activation` (or ``ACTIVATIONS[name] = act``).
ACTIVATIONS: Registry[Activation] = Registry("activation", ActivationError,
                                             hint="(or an expression in u such as 'u*tanh(u)')",
                                             check=_check_activation)
for _act in _builtin():
    ACTIVATIONS.register(_act.name, _act)
del _act


# ---------------------------------------------------------------------------------------------------------------
# existence of the Gaussian means
# ---------------------------------------------------------------------------------------------------------------
# numeric check points (off the simple numbers where removable singularities such as sin(u)/u sit)
_PROBE = [k / 4 + 0.0137 for k in range(-120, 121)] + [-200.0137, -100.0137, -50.0137, 50.0137, 100.0137, 200.0137]
_GROWTH_AT = (100, 200, 400)  # |u| where log σ² / u² is compared (Gaussian growth: constant; slower: decreasing)


def _refuse(name: str, why: str) -> ActivationError:
    return ActivationError(f"activation {name!r}: {why}, so its Gaussian means E[σ^(k)(b + s ξ)] do not exist "
                           "(or cannot be computed); use an activation that is finite and real on the whole real "
                           "line and grows slower than exp(c u²)")


def _excluded_points(domain: sp.Set) -> "list[sp.Expr] | None":
    """Points of ``R − domain`` when they are isolated (at most 41 of them in [−20, 20]); ``None`` when the
    complement contains an interval."""
    if isinstance(domain, sp.Complement) and domain.args[0] == sp.S.Reals:
        rest = domain.args[1]
    else:
        rest = sp.Complement(sp.S.Reals, domain)
    if rest.is_empty:
        return []
    points: list[sp.Expr] = []
    for part in (rest.args if isinstance(rest, sp.Union) else (rest,)):
        if isinstance(part, sp.FiniteSet):
            points += list(part)
        elif isinstance(part, sp.ImageSet) and part.base_sets == (sp.S.Integers,):
            points += [part.lamda(n) for n in range(-3, 4)]   # a few members of a periodic set
        else:
            return None
    return sorted(set(points), key=lambda p: abs(float(p)))[:41]


def _domain_form(expr: sp.Expr) -> sp.Expr:
    """An expression with the same real domain and the same unbounded points, in functions SymPy's
    ``continuous_domain`` knows: bounded entire or piecewise-continuous wrappers (erf, sign, Heaviside, floor, …)
    become ``tanh`` of (or just) their argument; a ``Piecewise`` becomes the sum of its pieces (conservative)."""
    smooth = (sp.erf, sp.erfc, sp.sign, sp.Heaviside, sp.atan)
    out = expr.replace(lambda e: isinstance(e, smooth), lambda e: sp.tanh(e.args[0]))
    out = out.replace(lambda e: isinstance(e, (sp.floor, sp.ceiling)), lambda e: e.args[0])
    return out.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: sp.Add(*[p for p, _ in e.args]))


def _symbolic_check(expr: sp.Expr, name: str) -> None:
    """SymPy: where σ is continuous and real (isolated exclusions must have finite one-sided limits). Raises
    :class:`ActivationError`; says nothing when SymPy cannot decide (the numeric check then has the last word)."""
    from sympy.calculus.util import continuous_domain

    try:
        domain = continuous_domain(_domain_form(expr), U, sp.S.Reals)
    except (NotImplementedError, TypeError, ValueError):
        domain = None
    if domain is not None:
        points = _excluded_points(domain)
        if points is None:
            bad = sp.Complement(sp.S.Reals, domain)
            raise _refuse(name, f"σ(u) = {expr} is not real (or not defined) for u in {bad}")
        for p in points:
            for side in ("+", "-"):
                try:
                    lim = sp.limit(expr, U, p, side)
                except (NotImplementedError, TypeError, ValueError):
                    continue
                if lim.has(sp.oo, -sp.oo, sp.zoo, sp.nan) or not lim.is_finite:
                    raise _refuse(name, f"σ(u) = {expr} has a singularity at u = {p} (σ → {lim} as u → {p}{side})")



def _symbolic_growth(expr: sp.Expr, name: str, inf: sp.Expr) -> bool:
    """SymPy's ``lim log(1 + σ²)/u²`` at ``inf``: raise when positive; ``True`` when it decided."""
    try:
        rate = sp.limit(sp.log(1 + expr**2) / U**2, U, inf)
    except (NotImplementedError, TypeError, ValueError):
        return False
    if rate.is_positive or rate.has(sp.oo):
        raise _refuse(name, f"σ(u) = {expr} grows like exp(c u²) or faster as u → {inf}")
    return rate == 0


def _numeric_check(expr: sp.Expr, name: str) -> None:
    """mpmath at many points: σ finite and real on [−30, 30] and at |u| ≤ 200; growth from
    ``r(u) = log(1 + σ²)/u²`` at ``|u| = 100, 200, 400``: constant or increasing (``r(400) ≥ 0.97 r(200)``) is
    Gaussian or faster growth (refused), halving or faster (exponential, polynomial) is slower; in between, or when
    ``r`` is not monotone, SymPy's limit of ``r`` at ±∞ decides (:func:`_symbolic_growth`)."""
    f = sp.lambdify(U, expr, modules="mpmath")

    def value(u: float) -> Any:
        try:
            with mpmath.workdps(30):
                return f(mpmath.mpf(u))
        except (ValueError, TypeError, ZeroDivisionError, OverflowError, ArithmeticError) as exc:
            raise _refuse(name, f"σ(u) = {expr} cannot be evaluated at u = {u:g} ({exc})") from None

    for u in _PROBE:
        v = value(u)
        if isinstance(v, mpmath.mpc) and v.imag != 0 or not mpmath.isfinite(v):
            raise _refuse(name, f"σ({u:g}) = {v} is not a finite real number")
    for sign in (1, -1):
        rates = []
        for u in _GROWTH_AT:
            v = value(sign * u)
            if isinstance(v, mpmath.mpc) and v.imag != 0 or not mpmath.isfinite(v):
                raise _refuse(name, f"σ({sign * u:g}) = {v} is not a finite real number")
            rates.append(float(mpmath.log(1 + mpmath.re(v) ** 2) / u**2))
        if rates[-1] <= 1e-8 or (rates[-1] <= 0.6 * rates[-2] and rates[-2] <= 0.6 * rates[-3]):
            continue
        if not (rates[-1] >= 0.97 * rates[-2] and rates[-2] >= 0.97 * rates[-3]) and sp.count_ops(expr) <= 40 \
                and _symbolic_growth(expr, name, sign * sp.oo):
            continue
        raise _refuse(name, f"σ(u) = {expr} grows like exp(c u²) or faster as u → {'+' if sign > 0 else '-'}∞ "
                          f"(log(1 + σ²)/u² ≈ {rates[-1]:.3g} at |u| = {_GROWTH_AT[-1]})")


@lru_cache(maxsize=256)
def check_gaussian_means(expr: sp.Expr, name: str) -> None:
    """Refuse (``ActivationError``, one line saying why) an activation whose Gaussian means do not exist: poles or
    other unbounded points on the real line, arguments where σ is not real (``log``, ``sqrt`` of negatives), growth
    like ``exp(c u²)`` or faster. SymPy decides where it can; a numeric check is the backstop."""
    _symbolic_check(expr, name)
    _numeric_check(expr, name)


def from_expression(text: "str | sp.Expr", name: str | None = None, precision: int = 30) -> Activation:
    """An activation from a SymPy expression in ``u`` (or ``x``); polynomials get exact means, others quadrature."""
    if isinstance(text, str):
        try:
            expr = sp.sympify(text, locals={"u": U, "x": U, "Phi": lambda t: _Phi(t)})
        except (sp.SympifyError, SyntaxError, TypeError, ValueError, AttributeError, NameError) as exc:
            why = "empty" if not text.strip() else \
                "invalid syntax" if "SyntaxError" in str(exc) or isinstance(exc, SyntaxError) else \
                " ".join(str(exc).split())   # one line
            raise ActivationError(f"cannot parse activation expression {text!r}: {why}; give a name "
                                  f"({', '.join(ACTIVATIONS.names())}) or an expression in u such as "
                                  "'u*tanh(u)'") from None
    else:
        expr = sp.sympify(text).subs({sp.Symbol("u"): U, sp.Symbol("x"): U})
    if not isinstance(expr, sp.Expr):   # "O", "N", "S": SymPy names that are not expressions
        raise ActivationError(ACTIVATIONS.unknown_message(str(text)))
    undefined = sorted({str(f.func) for f in expr.atoms(sp.core.function.AppliedUndef)})
    if undefined:   # foo(u): SymPy keeps an undefined function, which nothing can evaluate
        raise ActivationError(f"activation {str(text)!r}: unknown function{'s' if len(undefined) > 1 else ''} "
                              f"{', '.join(undefined)}; use SymPy's (exp, log, tanh, erf, sin, Abs, Max, …) or "
                              "Phi (the Gaussian CDF)")
    extra = expr.free_symbols - {U}
    if extra or not expr.has(U):
        raise ActivationError(ACTIVATIONS.unknown_message(str(text))
                              + (f" (undefined symbols: {', '.join(sorted(map(str, extra)))})" if extra else ""))
    check_gaussian_means(expr, name or str(expr))
    terms = None
    if expr.is_polynomial(U):
        mean0 = _polynomial_mean(expr)
    else:
        terms = expfamily.exp_terms(expr, U)
        mean0 = expfamily.mean0_real(terms, B, S) if terms else None
    return Activation(name or str(expr), expr, mean0, None, f"user expression {expr}", precision, terms)


def get_activation(spec: "str | Activation | sp.Expr") -> Activation:
    """Look up a registered activation by name, or build one from an expression in ``u``."""
    if isinstance(spec, Activation):
        return spec
    if not isinstance(spec, (str, sp.Expr)):
        raise ActivationError(f"activation must be a name ({', '.join(sorted(ACTIVATIONS))}) or an expression in u, "
                              f"got {type(spec).__name__} {spec!r:.60}")
    if isinstance(spec, str) and spec in ACTIVATIONS:
        return ACTIVATIONS.get(spec)
    return from_expression(spec)


def register_activation(activation: "Activation | str", expr: "str | sp.Expr | None" = None,
                        replace: bool = False) -> Activation:
    """Add an activation to :data:`ACTIVATIONS` so configs can name it: an :class:`Activation`, or a name and an
    expression in ``u`` (built with :func:`from_expression`, which refuses one whose Gaussian means do not exist)."""
    if isinstance(activation, str):
        if expr is None:
            raise ActivationError(f"register_activation({activation!r}) needs an expression in u, e.g. 'u**3 - u'")
        activation = from_expression(expr, name=activation)
    return ACTIVATIONS.register(activation.name, activation, replace=replace)
