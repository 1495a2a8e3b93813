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

The registry of named activations, and the refusal of expressions whose Gaussian means do not exist, are in
:mod:`featureode.calculus.activations`; the overflow-safe NumPy and torch forms in :mod:`featureode.calculus.numerics`.
"""
from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import mpmath
import numpy as np
import sympy as sp
from sympy.printing.numpy import SciPyPrinter

from featureode.core.cache import cached_text
from featureode.calculus import expfamily
from featureode.core.errors import FeatureODEError
from featureode.calculus.hermite import check_order
from featureode.calculus.mean_series import point_means
from featureode.calculus.numerics import _numpy_namespace, _stable, _torch_namespace, out_array
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
    numpy_fused: dict[tuple[tuple[int, ...], bool], Callable] = field(default_factory=dict)  # (ks, compiled) -> (b, s) ↦ m_ks
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

    def means_numpy(self, ks: tuple[int, ...]) -> Callable[..., np.ndarray]:
        """``(b, s) ↦ [m_k(b, s) for k in ks]`` (shape ``len(ks) × shape``) from the closed form, the orders
        evaluated together with their common sub-expressions computed once (``sympy.cse``: ReLU's ``Φ(b/s)`` and
        ``φ(b/s)`` serve ``m_0``, ``m_1`` and ``m_2``). ``b`` and ``s`` broadcast; ``s`` of shape ``(n, 1)`` beside
        ``b`` of ``(n, q)`` (one value per row) is read once per row. ``out=``: a C-contiguous float64 array of
        the result's shape to write into, so that a caller evaluating large grids again and again (the mean-field
        flow's whole drive: 3 × 2¹² × 2¹⁵ values per velocity) does not fault in fresh pages each time.

        Where every function of the closed form has a ``math`` counterpart (erf, exp, …), the expressions are
        printed as one loop over the points and compiled by numba (7× NumPy's elementwise passes on ReLU's
        ``m_0, m_1, m_2`` at 4096 × 2744 points); otherwise, or with ``FEATUREODE_KERNEL_LOOPS=numpy``, as NumPy
        statements. Both are checked against an mpmath oracle (``theory_tests/test_activations.py``).
        Both sources are cached on disk as :meth:`mean_numpy`'s are."""
        ks = tuple(check_order(k, "degree", ActivationError) for k in ks)
        if self.mean0 is None:
            raise ActivationError(f"{self.name} has no closed-form mean m_0(b, s); use mean_numpy(k), which "
                                  "integrates it by quadrature")
        import os

        compiled = os.environ.get("FEATUREODE_KERNEL_LOOPS", "").strip().lower() != "numpy"
        table = self._derived.numpy_fused
        if (ks, compiled) not in table:
            exprs = [self.mean_expr(k) for k in ks]
            key = hashlib.sha256(f"{_SOURCE_VERSION}|{sp.__version__}|{sp.srepr(self.mean0)}|{ks}".encode()
                                 ).hexdigest()[:24]
            loop = _fused_loop(f"means_loop_{key}.py", exprs) if compiled else None
            if loop is not None:
                fn: Callable[..., np.ndarray] = functools.partial(_run_fused_loop, loop, len(ks))
            else:
                path, _ = cached_text(f"means_{key}.py", lambda: _means_source(exprs))
                namespace: dict[str, Any] = {}
                exec(compile(path.read_text(), str(path), "exec"), namespace)
                fn = functools.partial(_run_fused_numpy, namespace["m"])
            table[(ks, compiled)] = fn
        return table[(ks, compiled)]

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


def _scipy_source(body: Callable[[SciPyPrinter], list[str]]) -> str:
    """Python source of ``m(b, s)`` whose statements ``body`` prints with NumPy/SciPy, as ``sympy.lambdify``
    prints for ``modules=["scipy", "numpy"]``, with the imports the printer used."""
    printer = SciPyPrinter({"fully_qualified_modules": True, "inline": True, "allow_unknown_functions": True,
                            "user_functions": {}})
    lines = body(printer)
    imports = sorted({mod for mod in printer.module_imports})
    head = [f"import {mod}" for mod in imports if mod.split(".")[0] in ("numpy", "scipy")]
    return "\n".join([*head, "", "", "def m(b, s):", *lines, ""])


def _mean_source(expr: sp.Expr) -> str:
    """Python source of ``m(b, s)`` evaluating ``expr`` (:func:`_scipy_source`)."""
    return _scipy_source(lambda printer: [f"    return {printer.doprint(expr)}"])


def _means_source(exprs: list[sp.Expr]) -> str:
    """Python source of ``m(b, s)`` returning the tuple of ``exprs`` with their common sub-expressions assigned
    once (``sympy.cse``), printed as :func:`_mean_source` prints one."""
    shared, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("_x"), optimizations="basic")

    def body(printer: SciPyPrinter) -> list[str]:
        return ([f"    {sym} = {printer.doprint(ex)}" for sym, ex in shared]
                + ["    return (" + ", ".join(printer.doprint(ex) for ex in reduced) + ",)"])
    return _scipy_source(body)


def _run_fused_loop(loop: Callable[..., None], n: int, b: Any, s: Any, out: np.ndarray | None = None) -> np.ndarray:
    """``n`` orders at ``(b, s)`` by a compiled loop of :func:`_fused_loop` (``s`` a column: once per row), written
    into ``out`` when given (shape ``n × shape``, reused by a caller that evaluates large grids again and again)."""
    b, s = np.asarray(b, float), np.asarray(s, float)
    if b.ndim == 2 and s.shape == (b.shape[0], 1):   # a value of s per row
        full = out_array(out, (n, *b.shape))
        loop(np.ascontiguousarray(b), np.ascontiguousarray(s[:, 0]), full)
        return full
    b, s = np.broadcast_arrays(b, s)
    full = out_array(out, (n, *b.shape))
    # a view of full (C-contiguous), so the loop writes into it
    loop(np.ascontiguousarray(b).reshape(-1, 1), np.ascontiguousarray(s).reshape(-1), full.reshape((n, b.size, 1)))
    return full


def _run_fused_numpy(raw: Callable[[Any, Any], tuple], b: Any, s: Any, out: np.ndarray | None = None) -> np.ndarray:
    """The orders at ``(b, s)`` by the NumPy statements of :func:`_means_source` (into ``out`` when given)."""
    b, s = np.asarray(b, float), np.asarray(s, float)
    shape = np.broadcast_shapes(b.shape, s.shape)
    vals = [np.broadcast_to(np.asarray(v, dtype=float), shape) for v in raw(b, s)]
    full = out_array(out, (len(vals), *shape))
    for j, v in enumerate(vals):
        full[j] = v
    return full


def _fused_loop(name: str, exprs: list[Any]) -> Callable[..., None] | None:
    """``m(b (n, q), s (n,), out (len(exprs), n, q))`` filling ``out`` with ``exprs`` at every point, printed
    with ``math`` functions after ``sympy.cse`` and compiled by numba (its machine code cached beside the source);
    ``None`` when an expression has no ``math`` counterpart or numba is absent (the caller prints NumPy then)."""
    from sympy.printing.codeprinter import PrintMethodNotImplementedError
    from sympy.printing.pycode import PythonCodePrinter

    try:
        import numba
    except ImportError:   # pragma: no cover - numba is a dependency
        return None

    def make() -> str:
        printer = PythonCodePrinter({"fully_qualified_modules": True, "strict": True})
        shared, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("_x"), optimizations="basic")
        body = [f"            {sym} = {printer.doprint(ex)}" for sym, ex in shared]
        body += [f"            out[{j}, i, p] = {printer.doprint(ex)}" for j, ex in enumerate(reduced)]
        return "\n".join(["import math", "", "", "def m(bs, ss, out):", "    for i in range(bs.shape[0]):",
                          "        s = ss[i]", "        for p in range(bs.shape[1]):", "            b = bs[i, p]",
                          *body, ""])

    try:
        path, _ = cached_text(name, make)
    except PrintMethodNotImplementedError:
        return None
    import importlib.util
    import sys

    # a module of its own (in sys.modules), so that numba's cache of its machine code can be read back
    modname = f"featureode_cache_{path.stem}"
    module = sys.modules.get(modname)
    if module is None:
        spec = importlib.util.spec_from_file_location(modname, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[modname] = module
    # NumPy's error model: a division by 0 gives inf/nan as the NumPy path does, not an exception
    loop = numba.njit(cache=True, nogil=True, error_model="numpy")(module.m)
    try:   # compile now: a printed form numba cannot type (a user expression's) falls back to NumPy
        loop(np.full((1, 1), 0.3), np.ones(1), np.empty((len(exprs), 1, 1)))
    except Exception:   # numba's typing and lowering errors have no common base class
        return None
    return loop


def _real_part(v: sp.Expr) -> sp.Expr:
    """The real part of an exact constant built from complex exponentials (real in value)."""
    v = sp.sympify(v)
    return v if v.is_real else sp.re(sp.expand_complex(v))


def _rational(x: float) -> sp.Rational:
    """The rational number a float was written as (``0.3 → 3/10``); never a guessed surd like ``sqrt(2)``."""
    return sp.nsimplify(x, rational=True)
