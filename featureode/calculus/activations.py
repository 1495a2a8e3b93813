"""Activation calculus (theory §2): Gaussian derivative means and Hermite coefficients.

For ``u ~ N(b, s²)`` the derivative means are ``m_k(b, s) = E[σ^{(k)}(u)] = ∂_b^k m_0(b, s)`` and the Hermite
coefficients are ``μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)] = s^n m_n(b, s) / sqrt(n!)``, ``ξ ~ N(0, 1)`` (Gaussian
integration by parts). Each activation is one SymPy expression ``σ(u)``; from it come

* ``m_0(b, s)`` in closed form where one exists (relu, abs, erf, gelu, step, and any polynomial), and hence every
  ``m_k`` and ``μ_n`` exactly: symbolically by differentiation in ``b``, at a point by the Taylor recurrences of
  :mod:`featureode.calculus.mean_series` (fast at high degree);
* otherwise (tanh, sigmoid, softplus, silu, user expressions) mpmath quadrature at a stated precision (≥ 30 digits,
  :mod:`featureode.calculus.quadrature`);
* vectorised NumPy evaluation of ``m_k`` over arrays of ``(b, s)`` (lambdified closed form, or composite
  Gauss–Legendre quadrature of the lambdified ``σ^{(j)}``) for averages over neurons;
* the torch function used by the MLP simulator, lambdified from the same expression.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Callable

import mpmath
import numpy as np
import sympy as sp
from sympy.printing.numpy import SciPyPrinter

from featureode.core.cache import cached_text
from featureode.calculus import expfamily
from featureode.core.errors import FeatureODEError
from featureode.core.registry import Registry
from featureode.calculus.hermite import check_order
from featureode.calculus.mean_series import point_means
from featureode.calculus.quadrature import composite_mean, hermite_quad, hermite_quad_all

U = sp.Symbol("u", real=True)
B = sp.Symbol("b", real=True)
S = sp.Symbol("s", positive=True)


class ActivationError(FeatureODEError, ValueError):
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


@dataclass
class _Derived:
    """What an :class:`Activation` derives from its expression, computed lazily: one table per kind."""

    means: dict[int, sp.Expr] = field(default_factory=dict)                       # m_k(b, s), symbolic
    derivatives: dict[int, sp.Expr] = field(default_factory=dict)                 # σ^{(k)}(u)
    vanishing: dict[int, bool] = field(default_factory=dict)                      # m_k(0, s) ≡ 0
    numpy_means: dict[tuple[int, int], Callable] = field(default_factory=dict)    # (k, quad_nodes) -> (b, s) ↦ m_k
    point_means: dict[tuple[float, float], list] = field(default_factory=dict)    # (b, s) -> [m_0 … m_N] exact
    quad: dict[tuple[int, float, float], tuple] = field(default_factory=dict)     # (n, b, s) -> (μ_n, error)


@dataclass(frozen=True)
class Activation:
    """An activation ``σ(u)`` and its Gaussian calculus.

    ``mean0`` is the closed form of ``m_0(b, s)`` (``None`` → quadrature). ``classical_order`` is the highest
    derivative order that exists pointwise (``None`` for smooth functions): at ``s = 0`` the means
    ``m_k(b, 0) = σ^{(k)}(b)`` exist only up to it. Derived expressions and compiled functions are computed on first
    use and kept (``_derived``, and cached properties for the kinks and the NumPy/torch/mpmath functions).
    """

    name: str
    expr: sp.Expr
    mean0: sp.Expr | None = None
    classical_order: int | None = None
    description: str = ""
    precision: int = 30
    #: ``((c, p, a), …)`` with ``σ(u) = Σ c u^p e^{a u}`` (:mod:`featureode.calculus.expfamily`) when σ is
    #: exponential-polynomial and not a polynomial: its kernel averages are then closed-form in ``b``
    exp_terms: tuple | None = field(default=None, compare=False, repr=False)
    _derived: _Derived = field(default_factory=_Derived, compare=False, repr=False)

    # growth -------------------------------------------------------------------------------------------------------
    @cached_property
    def q_growth(self) -> float:
        """``κ`` with ``E_b[m_j m_k](Q) = O(poly(Q) e^{κQ})`` for exponential-polynomial σ (``κ = max Re(a²)``, may
        be negative: ``sin``), 0 otherwise (σ growing slower than every exponential)."""
        return expfamily.q_growth(self.exp_terms) if self.exp_terms else 0.0

    @cached_property
    def exp_rate(self) -> tuple[float, float]:
        """``(c_−, c_+)``: ``|σ(u)| ≲ e^{c_± |u|}`` as ``u → ±∞`` (0 for growth slower than every exponential):
        exact for exponential-polynomial σ, else measured from ``log(1 + σ²)/(2|u|)`` at ``|u| = 100, 200, 400``
        (exponential growth when it no longer decreases, the rate then taken 10% above the value at 400)."""
        if self.exp_terms:
            re = [float(sp.re(a)) for _, _, a in self.exp_terms]
            return (max(0.0, -min(re)), max(0.0, max(re)))
        if self.mean0 is not None:   # closed forms of the registry: relu, erf, … (no exponential growth)
            return (0.0, 0.0)
        f = self.mpmath_function
        out = []
        for sign in (-1, 1):
            try:
                with mpmath.workdps(30):
                    r = [float(mpmath.log(1 + mpmath.re(f(mpmath.mpf(sign * u))) ** 2) / (2 * u))
                         for u in (100, 200, 400)]
            except (ValueError, TypeError, ZeroDivisionError, OverflowError, ArithmeticError):
                r = [0.0, 0.0, 0.0]
            out.append(1.1 * r[2] if r[2] > 1e-3 and r[2] >= 0.9 * r[1] else 0.0)
        return (out[0], out[1])

    def bias_average(self, j: int, k: int, bias_std: float, tilt: float = 0.0) -> Callable[[Any], np.ndarray]:
        """``Q ↦ E_b[m_j(b, √Q) m_k(b, √Q)] e^{−tilt·Q}``, ``b ~ N(0, σ_b²)``, in closed form (exponential-polynomial
        σ only: :func:`featureode.calculus.expfamily.bias_average`)."""
        if not self.exp_terms:
            raise ActivationError(f"activation {self.name!r} has no closed-form bias average")
        return expfamily.bias_average(self.exp_terms, int(j), int(k), float(bias_std), float(tilt))

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
        means = self._derived.means
        if k not in means:  # m_k = ∂_b m_{k-1}
            means[k] = sp.simplify(sp.diff(self.mean_expr(k - 1), B)) if k else self.mean0
        return means[k]

    def hermite_expr(self, n: int) -> sp.Expr | None:
        """Exact ``μ_n(b, s) = s^n m_n(b, s)/sqrt(n!)`` (``None`` when no closed form)."""
        m = self.mean_expr(n)
        return None if m is None else S**n * m / sp.sqrt(sp.factorial(n))  # m_n is simplified; powers of s combine

    def vanishes_at_zero_bias(self, k: int) -> bool:
        """``m_k(0, s) ≡ 0`` exactly (from the closed form; ``False`` without one)."""
        table = self._derived.vanishing
        if k not in table:
            ex = self.mean_expr(k)
            table[k] = ex is not None and sp.simplify(ex.subs(B, 0)) == 0
        return table[k]

    def derivative_expr(self, k: int) -> sp.Expr:
        """``σ^{(k)}(u)`` (classical derivative; Heaviside/Dirac terms for non-smooth activations)."""
        table = self._derived.derivatives
        if k not in table:
            table[k] = sp.diff(self.expr, U, k)
        return table[k]

    def point_mean_exprs(self, b: float, s: float, n_max: int) -> list[sp.Expr] | None:
        """Exact ``[m_0(b, s) … m_{n_max}(b, s)]`` at the point ``(b, s)`` (rationals as written), by the Taylor
        recurrences of :mod:`featureode.calculus.mean_series` (``None`` without a closed form). Cached per point."""
        if self.mean0 is None:
            return None
        table = self._derived.point_means
        have = table.get((b, s))
        if have is None or len(have) <= n_max:
            size = max(n_max, 2 * len(have) if have else 8)
            if self.exp_terms:   # the complex exponentials are the recurrences' supported form
                have = point_means(expfamily.mean0_complex(self.exp_terms, B, S), B, S, _rational(b),
                                   _rational(s), size)
                have = None if have is None else [_real_part(v) for v in have]
            else:
                have = point_means(self.mean0, B, S, _rational(b), _rational(s), size)
            if have is None:  # a closed form outside the supported terms: differentiate symbolically
                have = [self.mean_expr(k).subs({B: _rational(b), S: _rational(s)}) for k in range(size + 1)]  # type: ignore[union-attr]  # mean0 is known here, so every mean_expr exists
            table[(b, s)] = have
        return have[: n_max + 1]

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
            ex = self.point_mean_exprs(b, s, k)[k]  # type: ignore[index]  # mean0 is known here
            return Coefficient(float(sp.N(ex, 20)), ex)
        mu = self._hermite_quad(k, b, s)
        scale = mpmath.sqrt(mpmath.factorial(k)) / mpmath.mpf(s) ** k
        return Coefficient(float(mu[0] * scale), None, float(mu[1] * scale))

    def _hermite_point(self, n: int, b: float, s: float) -> sp.Expr:
        """Exact ``μ_n(b, s) = s^n m_n(b, s)/sqrt(n!)`` at a point (closed-form activations)."""
        return _rational(s) ** n * self.point_mean_exprs(b, s, n)[n] / sp.sqrt(sp.factorial(n))  # type: ignore[index]  # closed-form activations only

    def hermite(self, n: int, b: float = 0.0, s: float = 1.0) -> Coefficient:
        """``μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)]`` as exact expression (when it exists) and float."""
        n = check_order(n, "degree", ActivationError)
        b, s = float(b), float(s)
        self._check_scale(0, b, s)
        if self.mean0 is not None and s > 0:
            ex = self._hermite_point(n, b, s)
            return Coefficient(float(sp.N(ex, 20)), ex)
        if s == 0:  # σ(b) h_n(ξ) has mean σ(b) δ_{n0}
            val = self.expr.subs(U, _rational(b)) if n == 0 else sp.Integer(0)
            return Coefficient(float(val), val)
        val, err = self._hermite_quad(n, b, s)
        return Coefficient(float(val), None, float(err))

    def hermite_all(self, n_max: int, b: float = 0.0, s: float = 1.0) -> list[Coefficient]:
        """``[μ_0 … μ_{n_max}]`` at ``(b, s)``: exact (Taylor recurrences) or one quadrature pass for all degrees
        (:func:`featureode.calculus.quadrature.hermite_quad_all`), much cheaper than ``n_max`` separate quadratures."""
        n_max = check_order(n_max, "degree", ActivationError)
        b, s = float(b), float(s)
        self._check_scale(0, b, s)
        if self.mean0 is not None or s == 0:
            return [self.hermite(n, b, s) for n in range(n_max + 1)]
        vals = hermite_quad_all(self.mpmath_function, [float(c) for c in self.kinks], n_max, b, s,
                                self.precision, self.name, ActivationError, self.exp_rate)
        return [Coefficient(float(v), None, float(e)) for v, e in vals]

    def hermite_mp(self, n: int, b: float = 0.0, s: float = 1.0) -> mpmath.mpf:
        """``μ_n`` at the activation's working precision (exact forms evaluated, else quadrature)."""
        if self.mean0 is not None:
            return mpmath.mpf(sp.N(self._hermite_point(n, float(b), float(s)), self.precision))
        return self._hermite_quad(n, b, s)[0]

    @cached_property
    def kinks(self) -> tuple[sp.Expr, ...]:
        """Real points ``u`` where ``σ`` may fail to be smooth (used as quadrature breakpoints): the real zeros of
        the arguments of ``Abs``, ``sign``, ``Heaviside``, of differences of ``Max``/``Min`` arguments and of the
        two sides of every ``Piecewise`` condition."""
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
        return tuple(sorted(points, key=float))

    @cached_property
    def mpmath_function(self) -> Callable[[Any], Any]:
        """``σ`` as an mpmath function."""
        return sp.lambdify(U, self.expr, modules="mpmath")

    def _hermite_quad(self, n: int, b: float, s: float) -> tuple[mpmath.mpf, mpmath.mpf]:
        key = (n, b, s)
        table = self._derived.quad
        if key not in table:
            table[key] = hermite_quad(self.mpmath_function, [float(c) for c in self.kinks], n, b, s,
                                      self.precision, self.name, ActivationError, self.exp_rate)
        return table[key]

    # vectorised ---------------------------------------------------------------------------------------------------
    def mean_numpy(self, k: int, quad_nodes: int = 16) -> Callable[[Any, Any], np.ndarray]:
        """Vectorised ``(b, s) ↦ m_k(b, s)`` over NumPy arrays (``s > 0``).

        Closed form: the lambdified ``m_k``. Otherwise :func:`featureode.calculus.quadrature.composite_mean` of
        ``σ^{(j)}(b + s ξ) He_{k-j}(ξ) φ(ξ) / s^{k-j}`` (integration by parts), ``σ^{(j)}`` the last derivative
        without a Dirac mass, split at the kinks of σ.
        """
        k = check_order(k, "degree", ActivationError)
        key = (k, quad_nodes)
        table = self._derived.numpy_means
        if key in table:
            return table[key]
        if self.mean0 is not None:
            f = self._closed_mean_numpy(k)

            def fn(b: Any, s: Any, _f=f) -> np.ndarray:
                b, s = np.broadcast_arrays(np.asarray(b, float), np.asarray(s, float))
                return np.asarray(_f(b, s), dtype=float) * np.ones_like(b)
        else:
            nodes = check_order(quad_nodes, "quad_nodes", ActivationError)
            kinks = np.array([float(c) for c in self.kinks])
            # SymPy drops the Dirac masses of Piecewise derivatives, so j = 0 there
            j = 0 if kinks.size and self.expr.has(sp.Piecewise) else k
            while j > 0 and self.derivative_expr(j).has(sp.DiracDelta):
                j -= 1
            dj = sp.lambdify(U, _stable(self.derivative_expr(j)), modules=[_numpy_namespace(), "scipy", "numpy"])
            fn = composite_mean(dj, k - j, kinks, nodes, self.exp_rate)  # type: ignore[assignment]  # both take (b, s); the table holds either kind
        table[key] = fn
        return fn

    def _closed_mean_numpy(self, k: int) -> Callable[[Any, Any], Any]:
        """The closed form ``m_k(b, s)`` printed as NumPy/SciPy source, from the disk cache (:mod:`featureode.core.cache`)
        when present: its name hashes ``m_0``, ``k``, the SymPy version and this module, so a hit skips the
        symbolic differentiation and simplification, and the function is the one ``sympy.lambdify`` would build."""
        key = hashlib.sha256(f"{_SOURCE_VERSION}|{sp.__version__}|{sp.srepr(self.mean0)}|{k}".encode()).hexdigest()
        path, _ = cached_text(f"mean_{key[:24]}.py", lambda: _mean_source(self.mean_expr(k)))
        namespace: dict[str, Any] = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        return namespace["m"]

    def numpy(self) -> Callable[[Any], np.ndarray]:
        """``σ`` as a NumPy function (overflow-safe forms of logistic and softplus sub-expressions)."""
        return sp.lambdify(U, _stable(self.expr), modules=[_numpy_namespace(), "scipy", "numpy"])

    def torch(self) -> Callable[[Any], Any]:
        """``σ`` as a torch function generated from the same SymPy expression (autograd-compatible).

        Logistic and softplus sub-expressions map to ``torch.sigmoid``/``torch.logaddexp``, which neither overflow
        nor give NaN gradients in float32; a piecewise-constant σ (step) stays attached to the autograd graph with
        gradient 0.
        """
        return self._torch_function

    @cached_property
    def _torch_function(self) -> Callable[[Any], Any]:
        raw = sp.lambdify(U, _stable(self.expr), modules=[_torch_namespace(), "numpy"])

        def fn(x: Any, _raw=raw) -> Any:
            y = _raw(x)
            y = y.to(x.dtype).expand_as(x) if hasattr(y, "to") else x * 0 + float(y)
            if x.requires_grad and not y.requires_grad:
                y = y + 0 * x.clamp(-1, 1)
            return y
        return fn


#: A hash of this module: an edited printer or activation calculus never reads a stale cached ``m_k`` source.
_SOURCE_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def _mean_source(expr: sp.Expr) -> str:
    """Python source of ``m(b, s)`` evaluating ``expr`` with NumPy/SciPy, printed as ``sympy.lambdify`` prints it
    for ``modules=["scipy", "numpy"]``."""
    printer = SciPyPrinter({"fully_qualified_modules": True, "inline": True, "allow_unknown_functions": True,
                            "user_functions": {}})
    body = printer.doprint(expr)
    imports = sorted({mod for mod in printer.module_imports})
    lines = [f"import {mod}" for mod in imports if mod.split(".")[0] in ("numpy", "scipy")]
    return "\n".join([*lines, "", "", "def m(b, s):", f"    return {body}", ""])


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
        lambda e: _LOGISTIC(-_one_plus_exp(e.base)) ** (-e.exp))  # type: ignore[operator]  # the query above ensures it is not None


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
               "heaviside": heaviside})
    ns.update({"pi": math.pi, "e": math.e})  # type: ignore[dict-item]  # constants beside the functions
    return ns


def _real_part(v: sp.Expr) -> sp.Expr:
    """The real part of an exact constant built from complex exponentials (real in value)."""
    v = sp.sympify(v)
    return v if v.is_real else sp.re(sp.expand_complex(v))


def _rational(x: float) -> sp.Rational:
    """The rational number a float was written as (``0.3 → 3/10``); never a guessed surd like ``sqrt(2)``."""
    return sp.nsimplify(x, rational=True)


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
            raise ActivationError(f"cannot parse activation expression {text!r}: {exc}") from None
    else:
        expr = sp.sympify(text).subs({sp.Symbol("u"): U, sp.Symbol("x"): U})
    if not isinstance(expr, sp.Expr):   # "O", "N", "S": SymPy names that are not expressions
        raise ActivationError(ACTIVATIONS.unknown_message(str(text)))
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
