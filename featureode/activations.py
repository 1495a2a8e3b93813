"""Activation calculus (DESIGN §2): Gaussian derivative means and Hermite coefficients.

For ``u ~ N(b, s²)`` the derivative means are ``m_k(b, s) = E[σ^{(k)}(u)] = ∂_b^k m_0(b, s)`` and the Hermite
coefficients are ``μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)] = s^n m_n(b, s) / sqrt(n!)``, ``ξ ~ N(0, 1)`` (Gaussian
integration by parts). Each activation is one SymPy expression ``σ(u)``; from it come

* ``m_0(b, s)`` in closed form where one exists (relu, abs, erf, gelu, step, and any polynomial), and hence every
  ``m_k`` and ``μ_n`` exactly by differentiation in ``b``;
* otherwise (tanh, sigmoid, softplus, silu, user expressions) mpmath quadrature at a stated precision (≥ 30 digits);
* vectorised NumPy evaluation of ``m_k`` over arrays of ``(b, s)`` (lambdified closed form, or Gauss–Hermite
  quadrature of the lambdified ``σ^{(k)}``) for averages over neurons;
* the torch function used by the MLP simulator, lambdified from the same expression.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import mpmath
import numpy as np
import sympy as sp

from .hermite import check_order

U = sp.Symbol("u", real=True)
B = sp.Symbol("b", real=True)
S = sp.Symbol("s", positive=True)


class ActivationError(ValueError):
    """Unknown activation, undefined derivative mean, or a coefficient quadrature cannot deliver."""


def _Phi(x: sp.Expr) -> sp.Expr:
    """Standard normal CDF."""
    return (1 + sp.erf(x / sp.sqrt(2))) / 2


def _phi(x: sp.Expr) -> sp.Expr:
    """Standard normal density."""
    return sp.exp(-x**2 / 2) / sp.sqrt(2 * sp.pi)


@dataclass(frozen=True)
class Coefficient:
    """A coefficient as a float, an exact SymPy expression (``None`` when only quadrature exists) and LaTeX."""

    value: float
    exact: sp.Expr | None = None
    error: float = 0.0

    @property
    def latex(self) -> str | None:
        """LaTeX of the exact expression (``None`` when only a float exists)."""
        return sp.latex(self.exact) if self.exact is not None else None


def _polynomial_mean(expr: sp.Expr) -> sp.Expr:
    """``E[p(b + s ξ)]`` for a polynomial ``p`` using ``E[ξ^{2j}] = (2j-1)!!``, odd moments 0."""
    xi = sp.Symbol("xi")
    poly = sp.Poly(sp.expand(expr.subs(U, B + S * xi)), xi)
    return sp.expand(sum(c * (sp.factorial2(p - 1) if p % 2 == 0 else 0) for (p,), c in poly.terms()))


@dataclass(frozen=True)
class Activation:
    """An activation ``σ(u)`` and its Gaussian calculus.

    ``mean0`` is the closed form of ``m_0(b, s)`` (``None`` → quadrature). ``classical_order`` is the highest
    derivative order that exists pointwise (``None`` for smooth functions): at ``s = 0`` the means
    ``m_k(b, 0) = σ^{(k)}(b)`` exist only up to it.
    """

    name: str
    expr: sp.Expr
    mean0: sp.Expr | None = None
    classical_order: int | None = None
    description: str = ""
    precision: int = 30
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    # exact --------------------------------------------------------------------------------------------------------
    @property
    def is_exact(self) -> bool:
        """Whether ``m_0(b, s)`` has a closed form (else every coefficient comes from quadrature)."""
        return self.mean0 is not None

    def mean_expr(self, k: int) -> sp.Expr | None:
        """Exact ``m_k(b, s) = ∂_b^k m_0(b, s)`` in the symbols ``b``, ``s`` (``None`` when no closed form)."""
        k = check_order(k, "degree", ActivationError)
        if self.mean0 is None:
            return None
        key = ("mean", k)
        if key not in self._cache:  # m_k = ∂_b m_{k-1}
            self._cache[key] = sp.simplify(sp.diff(self.mean_expr(k - 1), B)) if k else self.mean0
        return self._cache[key]

    def hermite_expr(self, n: int) -> sp.Expr | None:
        """Exact ``μ_n(b, s) = s^n m_n(b, s)/sqrt(n!)`` (``None`` when no closed form)."""
        m = self.mean_expr(n)
        if m is None:
            return None
        key = ("hermite", n)
        if key not in self._cache:
            self._cache[key] = S**n * m / sp.sqrt(sp.factorial(n))  # m_n is simplified; powers of s combine
        return self._cache[key]

    def vanishes_at_zero_bias(self, k: int) -> bool:
        """``m_k(0, s) ≡ 0`` exactly (from the closed form; ``False`` without one)."""
        key = ("vanish", k)
        if key not in self._cache:
            ex = self.mean_expr(k)
            self._cache[key] = ex is not None and sp.simplify(ex.subs(B, 0)) == 0
        return self._cache[key]

    def derivative_expr(self, k: int) -> sp.Expr:
        """``σ^{(k)}(u)`` (classical derivative; Heaviside/Dirac terms for non-smooth activations)."""
        key = ("deriv", k)
        if key not in self._cache:
            self._cache[key] = sp.diff(self.expr, U, k)
        return self._cache[key]

    # floats -------------------------------------------------------------------------------------------------------
    def _check_scale(self, k: int, b: float, s: float) -> None:
        if not (math.isfinite(b) and math.isfinite(s)) or s < 0:
            raise ActivationError(f"need finite bias b and scale s ≥ 0, got b = {b!r}, s = {s!r}")
        if s == 0 and self.classical_order is not None and k > self.classical_order:
            raise ActivationError(
                f"activation {self.name!r}: the derivative mean m_{k}(b, s) at s = 0 is σ^({k})(b), which does not "
                f"exist for {self.name} beyond order {self.classical_order}; use a scale s > 0")

    def mean(self, k: int, b: float = 0.0, s: float = 1.0) -> Coefficient:
        """``m_k(b, s) = E[σ^{(k)}(u)]``, ``u ~ N(b, s²)``, as exact expression (when it exists) and float."""
        k = check_order(k, "degree", ActivationError)
        b, s = float(b), float(s)
        self._check_scale(k, b, s)
        if s == 0:
            val = self.derivative_expr(k).subs(U, _rational(b))
            return Coefficient(float(val), val)
        if self.mean0 is not None:
            ex = self.mean_expr(k).subs({B: _rational(b), S: _rational(s)})
            return Coefficient(float(sp.N(ex, 20)), ex)
        mu = self._hermite_quad(k, b, s)
        scale = mpmath.sqrt(mpmath.factorial(k)) / mpmath.mpf(s) ** k
        return Coefficient(float(mu[0] * scale), None, float(mu[1] * scale))

    def hermite(self, n: int, b: float = 0.0, s: float = 1.0) -> Coefficient:
        """``μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)]`` as exact expression (when it exists) and float."""
        n = check_order(n, "degree", ActivationError)
        b, s = float(b), float(s)
        self._check_scale(0, b, s)
        if self.mean0 is not None and s > 0:
            ex = self.hermite_expr(n).subs({B: _rational(b), S: _rational(s)})
            return Coefficient(float(sp.N(ex, 20)), ex)
        if s == 0:  # σ(b) h_n(ξ) has mean σ(b) δ_{n0}
            val = self.expr.subs(U, _rational(b)) if n == 0 else sp.Integer(0)
            return Coefficient(float(val), val)
        val, err = self._hermite_quad(n, b, s)
        return Coefficient(float(val), None, float(err))

    def hermite_mp(self, n: int, b: float = 0.0, s: float = 1.0) -> mpmath.mpf:
        """``μ_n`` at the activation's working precision (exact forms evaluated, else quadrature)."""
        if self.mean0 is not None:
            return mpmath.mpf(sp.N(self.hermite_expr(n).subs({B: _rational(b), S: _rational(s)}),
                                   self.precision))
        return self._hermite_quad(n, b, s)[0]

    def _kinks(self) -> tuple[sp.Expr, ...]:
        """Real points ``u`` where ``σ`` may fail to be smooth (used as quadrature breakpoints): the real zeros of
        the arguments of ``Abs``, ``sign``, ``Heaviside``, of differences of ``Max``/``Min`` arguments and of the
        two sides of every ``Piecewise`` condition."""
        if "kinks" not in self._cache:
            args = [e.args[0] for e in self.expr.atoms(sp.Abs, sp.sign, sp.Heaviside)]
            for e in self.expr.atoms(sp.Max, sp.Min):
                args += [p - q for i, p in enumerate(e.args) for q in e.args[i + 1:]]
            for e in self.expr.atoms(sp.Piecewise):
                args += [rel.lhs - rel.rhs for _, cond in e.args for rel in cond.atoms(sp.core.relational.Relational)]
            points: set[sp.Expr] = set()
            for a in args:
                sol = sp.solveset(a, U, sp.S.Reals)
                if isinstance(sol, sp.FiniteSet):
                    points |= set(sol)
            self._cache["kinks"] = tuple(sorted(points, key=float))
        return self._cache["kinks"]

    def _hermite_quad(self, n: int, b: float, s: float) -> tuple[mpmath.mpf, mpmath.mpf]:
        key = ("quad", n, b, s)
        if key in self._cache:
            return self._cache[key]
        f = sp.lambdify(U, self.expr, modules="mpmath")
        he = sp.lambdify(U, sp.hermite_prob(n, U), modules="mpmath")
        with mpmath.workdps(self.precision + 10):
            norm = 1 / (mpmath.sqrt(2 * mpmath.pi) * mpmath.sqrt(mpmath.factorial(n)))
            # split at ξ = 0 and wherever σ(s ξ + b) may be non-smooth
            kinks = {(mpmath.mpf(c) - mpmath.mpf(b)) / s for c in self._kinks()}
            pts = [-mpmath.inf, *sorted(kinks | {mpmath.mpf(0)}), mpmath.inf]
            val, err = mpmath.quad(lambda x: f(s * x + b) * he(x) * mpmath.exp(-x * x / 2), pts,
                                   error=True, maxdegree=10)
            val, err = val * norm, err * norm
            tol = mpmath.mpf(10) ** (-self.precision)
            if err > tol * max(1, abs(val)):
                raise ActivationError(
                    f"activation {self.name!r}: μ_{n}(b={b}, s={s}) by quadrature has estimated error "
                    f"{float(err):.2g}, above the requested precision 1e-{self.precision}; "
                    "lower the degree or the precision")
            self._cache[key] = (+val, +err)  # inside the context: unary + rounds to the working precision
        return self._cache[key]

    # vectorised ---------------------------------------------------------------------------------------------------
    def mean_numpy(self, k: int, quad_nodes: int = 16) -> Callable[[Any, Any], np.ndarray]:
        """Vectorised ``(b, s) ↦ m_k(b, s)`` over NumPy arrays (``s > 0``).

        Closed form: the lambdified ``m_k``. Otherwise composite Gauss–Legendre quadrature of
        ``σ^{(k)}(b + s ξ) φ(ξ)`` over ``|ξ| ≤ 12`` (the Gaussian mass beyond is below 1e-31), split at the kinks
        of ``σ`` (see ``_kinks``), each piece on panels of width at most ``1/max(s, 1)`` in ξ, i.e. at most 1 in
        ``u``, with ``quad_nodes`` nodes each: the features of ``σ`` (width O(1) in ``u``) stay resolved for every
        scale ``s`` (Gauss–Hermite would need O(s²) nodes). For a non-smooth σ the integrand is
        ``σ^{(j)}(b + s ξ) He_{k-j}(ξ) φ(ξ) / s^{k-j}`` (integration by parts), ``σ^{(j)}`` the last derivative
        without a Dirac mass.
        """
        k = check_order(k, "degree", ActivationError)
        key = ("numpy", k, quad_nodes)
        if key in self._cache:
            return self._cache[key]
        if self.mean0 is not None:
            f = sp.lambdify((B, S), self.mean_expr(k), modules=["scipy", "numpy"])

            def fn(b: Any, s: Any, _f=f) -> np.ndarray:
                b, s = np.broadcast_arrays(np.asarray(b, float), np.asarray(s, float))
                return np.asarray(_f(b, s), dtype=float) * np.ones_like(b)
        else:
            nodes, weights = np.polynomial.legendre.leggauss(check_order(quad_nodes, "quad_nodes", ActivationError))
            kinks = np.array([float(c) for c in self._kinks()])
            # m_k = s^{-(k-j)} E[σ^{(j)}(b + s ξ) He_{k-j}(ξ)] (integration by parts), with j the highest order whose
            # classical derivative carries no Dirac mass; SymPy drops those masses for Piecewise, so j = 0 there
            j = 0 if kinks.size and self.expr.has(sp.Piecewise) else k
            while j > 0 and self.derivative_expr(j).has(sp.DiracDelta):
                j -= 1
            dj = sp.lambdify(U, _stable(self.derivative_expr(j)), modules=[_numpy_namespace(), "scipy", "numpy"])
            he = np.polynomial.hermite_e.HermiteE.basis(k - j)

            def fn(b: Any, s: Any, _d=dj, _he=he, _p=k - j) -> np.ndarray:
                b, s = np.broadcast_arrays(np.asarray(b, float), np.asarray(s, float))
                shape = b.shape
                b, s = b.ravel(), s.ravel()
                out = np.empty(b.shape)
                level = np.ceil(np.log2(np.maximum(s, 1.0))).astype(int)  # panels double with s
                for lv in np.unique(level):
                    sel = np.flatnonzero(level == lv)
                    panels = _PANELS * 2**lv
                    # nodes and weights of the composite rule on [0, 1]
                    t = ((np.arange(panels)[:, None] + (nodes + 1) / 2) / panels).ravel()
                    wt = np.tile(weights / (2 * panels), panels)
                    step = max(1, _QUAD_CHUNK // ((kinks.size + 1) * t.size))
                    for c in range(0, sel.size, step):
                        rows = sel[c:c + step]
                        # windows of |ξ| ≤ 12 between the kinks ξ_c = (c - b)/s of σ, each with the composite rule
                        with np.errstate(divide="ignore", invalid="ignore"):
                            inner = (kinks - b[rows, None]) / s[rows, None]
                        inner = np.clip(np.nan_to_num(inner, nan=0.0), -_XI_MAX, _XI_MAX)
                        ends = np.full((rows.size, 1), _XI_MAX)
                        edges = np.sort(np.concatenate([-ends, inner, ends], axis=1), axis=1)
                        width = np.diff(edges, axis=1)[..., None]
                        xi = edges[:, :-1, None] + width * t
                        u = b[rows, None, None] + s[rows, None, None] * xi
                        w = width * wt * np.exp(-xi**2 / 2) / math.sqrt(2 * math.pi) * _he(xi)
                        out[rows] = np.sum(np.broadcast_to(_d(u), u.shape) * w, axis=(1, 2)) / s[rows] ** _p
                return out.reshape(shape)
        self._cache[key] = fn
        return fn

    def numpy(self) -> Callable[[Any], np.ndarray]:
        """``σ`` as a NumPy function (overflow-safe forms of logistic and softplus sub-expressions)."""
        return sp.lambdify(U, _stable(self.expr), modules=[_numpy_namespace(), "scipy", "numpy"])

    def torch(self) -> Callable[[Any], Any]:
        """``σ`` as a torch function generated from the same SymPy expression (autograd-compatible).

        Logistic and softplus sub-expressions map to ``torch.sigmoid``/``torch.logaddexp``, which neither overflow
        nor give NaN gradients in float32; a piecewise-constant σ (step) stays attached to the autograd graph with
        gradient 0.
        """
        if "torch" not in self._cache:
            raw = sp.lambdify(U, _stable(self.expr), modules=[_torch_namespace(), "numpy"])

            def fn(x: Any, _raw=raw) -> Any:
                y = _raw(x)
                y = y.to(x.dtype).expand_as(x) if hasattr(y, "to") else x * 0 + float(y)
                if x.requires_grad and not y.requires_grad:
                    y = y + 0 * x.clamp(-1, 1)
                return y
            self._cache["torch"] = fn
        return self._cache["torch"]


_XI_MAX = 12.0  # quadrature window |ξ| ≤ 12 of mean_numpy
_PANELS = 24  # panels over the window at s ≤ 1 (width 1 in ξ)
_QUAD_CHUNK = 1 << 21  # evaluation points per block in mean_numpy
_LOGISTIC = sp.Function("_logistic")  # 1/(1 + e^{-v})
_SOFTPLUS = sp.Function("_softplus")  # log(1 + e^{v})


def _one_plus_exp(e: sp.Expr) -> sp.Expr | None:
    """``v`` when ``e = 1 + exp(v)``, else ``None``."""
    if e.is_Add and len(e.args) == 2 and sp.S.One in e.args:
        other = e.args[1] if e.args[0] == 1 else e.args[0]
        if isinstance(other, sp.exp):
            return other.args[0]
    return None


def _stable(expr: sp.Expr) -> sp.Expr:
    """The same function with ``(1 + e^v)^{-n} → logistic(-v)^n`` and ``log(1 + e^v) → softplus(v)``, for
    overflow-free floating-point evaluation (the symbols ``_logistic``/``_softplus`` map to stable numerics)."""
    expr = expr.replace(lambda e: isinstance(e, sp.log) and _one_plus_exp(e.args[0]) is not None,
                        lambda e: _SOFTPLUS(_one_plus_exp(e.args[0])))
    return expr.replace(
        lambda e: e.is_Pow and e.exp.is_Integer and e.exp < 0 and _one_plus_exp(e.base) is not None,
        lambda e: _LOGISTIC(-_one_plus_exp(e.base)) ** (-e.exp))


@lru_cache(maxsize=1)
def _numpy_namespace() -> dict[str, Any]:
    from scipy.special import expit

    return {"_logistic": expit, "_softplus": lambda v: np.logaddexp(v, 0.0)}


@lru_cache(maxsize=1)
def _torch_namespace() -> dict[str, Any]:
    import torch

    def select(conds: list, vals: list, default: Any = float("nan")) -> Any:
        tensors = [t for t in (*conds, *vals) if isinstance(t, torch.Tensor)]
        shape = torch.broadcast_shapes(*(t.shape for t in tensors))
        floats = [v for v in vals if isinstance(v, torch.Tensor) and v.is_floating_point()]
        dtype = floats[0].dtype if floats else torch.get_default_dtype()
        device = tensors[0].device

        def full(v: Any) -> Any:
            return v if isinstance(v, torch.Tensor) else torch.full(shape, float(v), dtype=dtype, device=device)

        out = full(float(default))
        for c, v in reversed(list(zip(conds, vals))):
            out = full(v).expand(shape) if c is True else torch.where(c, full(v), out)
        return out

    def maximum_reduce(fn: Any, args: list) -> Any:
        out = args[0]
        for a in args[1:]:
            out = fn(out, a)
        return out

    def maximum(a: Any, b: Any) -> Any:
        a = a if isinstance(a, torch.Tensor) else torch.as_tensor(a)
        b = b if isinstance(b, torch.Tensor) else torch.as_tensor(b)
        return torch.maximum(a, b)

    def minimum(a: Any, b: Any) -> Any:
        a = a if isinstance(a, torch.Tensor) else torch.as_tensor(a)
        b = b if isinstance(b, torch.Tensor) else torch.as_tensor(b)
        return torch.minimum(a, b)

    def heaviside(x: Any, h0: float = 0.5) -> Any:
        return torch.heaviside(x, torch.as_tensor(float(h0), dtype=x.dtype, device=x.device))

    def tensor_args(fn: Callable) -> Callable:
        def wrapped(*args: Any) -> Any:
            return fn(*[a if isinstance(a, torch.Tensor) else torch.as_tensor(float(a), dtype=torch.float64)
                        for a in args])
        return wrapped

    unary = {"exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "sqrt": torch.sqrt, "tanh": torch.tanh,
             "sinh": torch.sinh, "cosh": torch.cosh, "sin": torch.sin, "cos": torch.cos, "abs": torch.abs,
             "erf": torch.special.erf, "erfc": torch.special.erfc, "sign": torch.sign, "power": torch.pow,
             "greater": torch.gt, "greater_equal": torch.ge, "less": torch.lt, "less_equal": torch.le,
             "equal": torch.eq}
    ns = {k: tensor_args(v) for k, v in unary.items()}
    ns["_logistic"] = tensor_args(torch.sigmoid)
    ns["_softplus"] = tensor_args(lambda v: torch.logaddexp(v, torch.zeros_like(v)))
    ns.update({"select": select, "reduce": maximum_reduce, "maximum": maximum, "minimum": minimum,
               "heaviside": heaviside, "pi": math.pi, "e": math.e})
    return ns


def _rational(x: float) -> sp.Rational:
    """The rational number a float was written as (``0.3 → 3/10``); never a guessed surd like ``sqrt(2)``."""
    return sp.nsimplify(x, rational=True)


# ---------------------------------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------------------------------
def _relu_mean0() -> sp.Expr:
    return B * _Phi(B / S) + S * _phi(B / S)


def _builtin() -> dict[str, Activation]:
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
    return {a.name: a for a in acts}


ACTIVATIONS: dict[str, Activation] = _builtin()


def from_expression(text: "str | sp.Expr", name: str | None = None, precision: int = 30) -> Activation:
    """An activation from a SymPy expression in ``u`` (or ``x``); polynomials get exact means, others quadrature."""
    if isinstance(text, str):
        try:
            expr = sp.sympify(text, locals={"u": U, "x": U, "Phi": lambda t: _Phi(t)})
        except (sp.SympifyError, SyntaxError, TypeError) as exc:
            raise ActivationError(f"cannot parse activation expression {text!r}: {exc}") from None
    else:
        expr = sp.sympify(text).subs({sp.Symbol("u"): U, sp.Symbol("x"): U})
    extra = expr.free_symbols - {U}
    if extra or not expr.has(U):
        raise ActivationError(
            f"unknown activation {str(text)!r}; known: {', '.join(sorted(ACTIVATIONS))}, or an expression in u "
            f"such as 'u*tanh(u)'" + (f" (undefined symbols: {', '.join(sorted(map(str, extra)))})" if extra else ""))
    mean0 = _polynomial_mean(expr) if expr.is_polynomial(U) else None
    return Activation(name or str(expr), expr, mean0, None, f"user expression {expr}", precision)


def get_activation(spec: "str | Activation | sp.Expr") -> Activation:
    """Look up a registered activation by name, or build one from an expression in ``u``."""
    if isinstance(spec, Activation):
        return spec
    if isinstance(spec, str) and spec.strip().lower() in ACTIVATIONS:
        return ACTIVATIONS[spec.strip().lower()]
    return from_expression(spec)
