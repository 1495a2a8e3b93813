"""Hermite algebra (theory §1).

Orthonormal probabilists' Hermite polynomials ``h_n(z) = He_n(z)/sqrt(n!)`` under ``N(0, 1)``, multi-indices
``α ∈ N^d`` (class :class:`Mode`, sparse ``{dim: order}``, 0-based dimensions), exact product linearisation,
derivatives, and exact changes of basis between monomials and Hermite polynomials.

Everything symbolic is exact SymPy; numeric evaluation uses the stable three-term recurrence
``h_{n+1}(z) = (z h_n(z) - sqrt(n) h_{n-1}(z)) / sqrt(n+1)`` and works on NumPy arrays and torch tensors alike.
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping

import sympy as sp

from featureode.core.errors import FeatureODEError

Z = sp.Symbol("z", real=True)


class ModeError(FeatureODEError, ValueError):
    """A multi-index or mode text that is not valid."""


# ----------------------------------------------------------------------------------------------------------------
# univariate
# ----------------------------------------------------------------------------------------------------------------
def check_order(n: Any, what: str = "Hermite order", error: type[Exception] = ModeError) -> int:
    """``n`` as an ``int`` if it is a non-negative integer (Python, NumPy or SymPy; not a bool or a float), else
    ``error`` naming ``what`` and the value."""
    try:
        value = operator.index(n)
    except TypeError:
        value = -1
    if isinstance(n, bool) or value < 0:
        raise error(f"{what} must be a non-negative integer, got {n!r}")
    return value


@lru_cache(maxsize=None)
def hermite_expr(n: int, z: sp.Symbol = Z) -> sp.Expr:
    """Exact ``h_n(z) = He_n(z)/sqrt(n!)`` as a SymPy polynomial in ``z``."""
    n = check_order(n)
    return sp.expand(sp.hermite_prob(n, z) / sp.sqrt(sp.factorial(n)))


def hermite_values(z: Any, n_max: int) -> list:
    """``[h_0(z), …, h_{n_max}(z)]`` for a NumPy array or torch tensor ``z`` (three-term recurrence)."""
    n_max = check_order(n_max, "Hermite degree")
    out = [z * 0 + 1]
    if n_max >= 1:
        out.append(z * 1)
    for n in range(1, n_max):
        out.append((z * out[n] - math.sqrt(n) * out[n - 1]) / math.sqrt(n + 1))
    return out


def hermite_eval(n: int, z: Any) -> Any:
    """``h_n(z)`` for a NumPy array or torch tensor ``z``."""
    return hermite_values(z, n)[-1]


@lru_cache(maxsize=None)
def product_coefficients(m: int, n: int) -> dict[int, sp.Expr]:
    """Exact linearisation ``h_m h_n = Σ_k C(m, n, k) h_k`` as ``{k: C}``.

    From ``He_m He_n = Σ_j j! binom(m, j) binom(n, j) He_{m+n-2j}``, so
    ``C(m, n, m+n-2j) = j! binom(m,j) binom(n,j) sqrt((m+n-2j)!/(m! n!))``.
    """
    m, n = check_order(m), check_order(n)
    out: dict[int, sp.Expr] = {}
    for j in range(min(m, n) + 1):
        k = m + n - 2 * j
        out[k] = sp.factorial(j) * sp.binomial(m, j) * sp.binomial(n, j) * sp.sqrt(
            sp.factorial(k) / (sp.factorial(m) * sp.factorial(n)))
    return out


@lru_cache(maxsize=None)
def monomial_to_hermite(p: int) -> dict[int, sp.Expr]:
    """Exact ``z^p = Σ_k a_k h_k(z)`` as ``{k: a_k}``: ``a_{p-2j} = p!/(j! (p-2j)! 2^j) · sqrt((p-2j)!)``."""
    p = check_order(p, "power")
    return {p - 2 * j: sp.factorial(p) / (sp.factorial(j) * sp.factorial(p - 2 * j) * 2**j)
            * sp.sqrt(sp.factorial(p - 2 * j)) for j in range(p // 2 + 1)}


def hermite_derivative(n: int) -> tuple[sp.Expr, int]:
    """``h_n' = sqrt(n) h_{n-1}``: returns ``(sqrt(n), n-1)`` (coefficient 0 for ``n = 0``)."""
    n = check_order(n)
    return (sp.sqrt(n), n - 1) if n > 0 else (sp.Integer(0), 0)


# ----------------------------------------------------------------------------------------------------------------
# multi-indices
# ----------------------------------------------------------------------------------------------------------------
_FACTOR = re.compile(r"^(?:z(\d+)|h(\d+)\(z(\d+)\))$")


@dataclass(frozen=True, order=False)
class Mode:
    """Multi-index ``α`` stored sparsely as sorted ``((dim, order), …)`` with all orders ≥ 1.

    ``h_α(z) = Π_i h_{α_i}(z_i)``, ``|α| = Σ α_i``, ``α! = Π α_i!``, ``g^α = Π g_i^{α_i}``.
    Text form (theory §1): ``1``, ``z0``, ``z0*z1``, ``h2(z0)*z3``.
    """

    items: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        dims = [i for i, _ in self.items]
        if dims != sorted(set(dims)):
            raise ModeError(f"mode dimensions must be distinct and sorted, got {self.items}")
        for i, n in self.items:
            if not isinstance(i, int) or i < 0:
                raise ModeError(f"dimension index must be a non-negative integer, got {i!r}")
            if not isinstance(n, int) or n < 1:
                raise ModeError(f"order of dimension {i} must be a positive integer, got {n!r}")

    # construction -----------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, index: Mapping[int, int]) -> "Mode":
        """From ``{dim: order}`` (zero orders dropped)."""
        items = []
        for i, n in index.items():
            i, n = int(i), check_order(n)
            if n:
                items.append((i, n))
        return cls(tuple(sorted(items)))

    @classmethod
    def from_dense(cls, alpha: Iterable[int]) -> "Mode":
        """From a dense tuple ``(α_0, …, α_{d-1})``."""
        return cls.from_dict({i: n for i, n in enumerate(alpha)})

    @classmethod
    def parse(cls, text: str) -> "Mode":
        """Parse the text form; a dimension may appear once (write ``h2(z0)``, not ``z0*z0``)."""
        s = text.replace(" ", "")
        if s == "1":
            return cls()
        index: dict[int, int] = {}
        pos = 0
        for part in s.split("*"):
            m = _FACTOR.match(part)
            if not m:
                raise ModeError(f"cannot parse mode {text!r}: factor {part!r} at character {pos} is not "
                                "of the form z<i> or h<n>(z<i>)")
            i, n = (int(m.group(1)), 1) if m.group(1) is not None else (int(m.group(3)), int(m.group(2)))
            if i in index:
                raise ModeError(f"mode {text!r} repeats dimension z{i}; write h<n>(z{i}) for order n")
            if n == 0:
                raise ModeError(f"mode {text!r}: order 0 factor h0(z{i}) is the constant; omit it")
            index[i] = n
            pos += len(part) + 1
        return cls.from_dict(index)

    # properties -------------------------------------------------------------------------------------------------
    @property
    def degree(self) -> int:
        """``|α|``."""
        return sum(n for _, n in self.items)

    @property
    def support(self) -> tuple[int, ...]:
        """``supp α = {i : α_i > 0}``, ascending."""
        return tuple(i for i, _ in self.items)

    def order(self, i: int) -> int:
        """``α_i``."""
        return dict(self.items).get(i, 0)

    def as_dict(self) -> dict[int, int]:
        """``{i: α_i}`` over the support."""
        return dict(self.items)

    def dense(self, d: int) -> tuple[int, ...]:
        """Dense tuple of length ``d``; raises if a dimension is ``≥ d``."""
        self.check_dim(d)
        out = [0] * d
        for i, n in self.items:
            out[i] = n
        return tuple(out)

    def check_dim(self, d: int) -> None:
        """Raise :class:`ModeError` when a dimension of ``α`` is ``≥ d``."""
        if self.items and self.items[-1][0] >= d:
            raise ModeError(f"mode {self} uses dimension z{self.items[-1][0]} but the data has d = {d} "
                            f"(dimensions are 0-based, so the largest is z{d - 1})")

    @property
    def factorial(self) -> int:
        """``α!``."""
        return math.prod(math.factorial(n) for _, n in self.items)

    @property
    def parity(self) -> int:
        """``|α| mod 2``."""
        return self.degree % 2

    def sort_key(self) -> tuple:
        """Order by degree ``|α|``, then by the sparse items (higher orders first)."""
        return (self.degree, tuple((i, -n) for i, n in self.items))

    def __lt__(self, other: "Mode") -> bool:
        return self.sort_key() < other.sort_key()

    def __str__(self) -> str:
        if not self.items:
            return "1"
        return "*".join(f"z{i}" if n == 1 else f"h{n}(z{i})" for i, n in self.items)

    def __repr__(self) -> str:
        return f"Mode({str(self)!r})"

    # algebra ----------------------------------------------------------------------------------------------------
    def g_power(self, g: Any) -> Any:
        """``g^α = Π_i g_i^{α_i}`` for a sequence ``g`` (floats or SymPy numbers)."""
        out = 1
        for i, n in self.items:
            out = out * g[i] ** n
        return out

    def sympy(self, zs: "Iterable[sp.Symbol] | Mapping[int, sp.Symbol]") -> sp.Expr:
        """``h_α`` as a SymPy polynomial in the symbols ``zs[i]``."""
        zs = zs if isinstance(zs, Mapping) else dict(enumerate(zs))
        return sp.Mul(*[hermite_expr(n, Z).subs(Z, zs[i]) for i, n in self.items])

    def evaluate(self, z: Any) -> Any:
        """``h_α(z)`` for samples ``z`` of shape ``(..., d)`` (NumPy or torch)."""
        out = z[..., 0] * 0 + 1
        for i, n in self.items:
            out = out * hermite_eval(n, z[..., i])
        return out

    def shift(self, i: int, delta: int) -> "Mode | None":
        """``α + delta·e_i`` or ``None`` when an order would become negative."""
        index = self.as_dict()
        n = index.get(i, 0) + delta
        if n < 0:
            return None
        index[i] = n
        return Mode.from_dict(index)


def product(a: Mode, b: Mode) -> dict[Mode, sp.Expr]:
    """Exact ``h_a h_b = Σ_c C_c h_c`` (product of the univariate linearisations)."""
    terms: dict[Mode, sp.Expr] = {Mode(): sp.Integer(1)}
    da, db = a.as_dict(), b.as_dict()
    for i in sorted(set(da) | set(db)):
        lin = product_coefficients(da.get(i, 0), db.get(i, 0))
        new: dict[Mode, sp.Expr] = {}
        for mode, c in terms.items():
            for k, ck in lin.items():
                key = mode.shift(i, k)
                assert key is not None  # k ≥ 0: no order becomes negative
                new[key] = new.get(key, 0) + c * ck
        terms = new
    return terms


def polynomial_to_hermite(poly: sp.Expr, zs: "list[sp.Symbol]") -> dict[Mode, sp.Expr]:
    """Exact Hermite expansion ``p(z) = Σ_α c_α h_α(z)`` of a polynomial in the symbols ``zs``.

    Each monomial ``Π z_i^{p_i}`` expands as the product of the univariate expansions of
    :func:`monomial_to_hermite`; coefficients stay exact (rational inputs give rational × sqrt(integer)).
    """
    p = sp.Poly(sp.expand(poly), *zs)
    out: dict[Mode, sp.Expr] = {}
    for powers, coeff in p.terms():
        terms: dict[Mode, sp.Expr] = {Mode(): coeff}
        for i, power in enumerate(powers):
            if power == 0:
                continue
            new: dict[Mode, sp.Expr] = {}
            for mode, c in terms.items():
                for k, ck in monomial_to_hermite(power).items():
                    key = mode.shift(i, k)
                    assert key is not None  # k ≥ 0: no order becomes negative
                    new[key] = new.get(key, 0) + c * ck
            terms = new
        for mode, c in terms.items():
            out[mode] = out.get(mode, 0) + c
    expanded = {m: sp.expand(c) for m, c in out.items()}
    return {m: c for m, c in expanded.items() if not _is_zero(c)}


def _is_zero(c: sp.Expr) -> bool:
    """Exact zero test of an expanded coefficient. Rational multiples of sqrt(integer) are canonical after
    expansion, so ``c != 0`` decides them; ``simplify`` (seconds per coefficient on the nested surds of an exact
    power-law spectrum) runs only for symbolic coefficients and for numbers that are numerically zero."""
    if c == 0:
        return True
    if c.is_number and abs(sp.N(c, 30)) > sp.Float("1e-25", 30):
        return False
    return sp.simplify(c) == 0


def hermite_to_polynomial(coeffs: Mapping[Mode, Any], zs: "list[sp.Symbol]") -> sp.Expr:
    """Inverse of :func:`polynomial_to_hermite`: ``Σ_α c_α h_α(z)`` expanded in monomials."""
    return sp.expand(sum((sp.sympify(c) * m.sympy(zs) for m, c in coeffs.items()), sp.Integer(0)))
