"""The Hermite decomposition of a target expression without SymPy (the numeric path of
:func:`featureode.calculus.targets.parse_target`).

The expression is read with :mod:`ast` and evaluated directly in the orthonormal Hermite basis: ``z_i`` is
``h_1(z_i)``, ``h<n>(z_i)`` is itself, a product of two basis functions of one coordinate is linearised exactly,
``h_m h_n = Σ_j C(m, n, j) h_{m+n−2j}`` with ``C² = (j! binom(m, j) binom(n, j))² (m+n−2j)!/(m! n!)`` rational, and
``staircase(k) = (1/sqrt(k)) Σ_j z_0⋯z_{j−1}``. Two kinds of coefficients:

* **exact** (z-coordinates, numbers, ``sqrt`` of numbers, ``h<n>``, ``staircase``): each coefficient is an element
  ``Σ_r q_r sqrt(r)`` of the field of square roots of rationals (``q_r`` rational, ``r`` square-free), so the set
  of modes (which coefficients are zero) is decided exactly, as SymPy decides it; the numbers in the text are the
  rationals they spell (``0.1`` is 1/10, as SymPy's ``rational=True`` reads them). A coefficient becomes a float
  through 40-digit integer arithmetic, so it is the exact value rounded once.
* **floating point** (``x<i>`` coordinates, whose ``sqrt(g_i)`` are the spectrum's floats, and ``pi``): each
  coefficient carries the sum of the magnitudes of the terms that made it; one that cancels to within 10⁻¹² of
  them is round-off (a rotated covariance: dropped by the rule of the SymPy path), else the SymPy path decides.

Whatever this path does not cover exactly — any other construct, a non-polynomial, a square root it cannot split, a
coefficient outside double precision, a target without a non-constant part to normalise — raises
:class:`Unsupported`, and :func:`~featureode.calculus.targets.parse_target` hands the text to SymPy, which gives
the exact result or the one-line error. Normalisation: ``v_α / sqrt(Σ_{α≠0} v_α²)`` with the variance summed
exactly (exact path) or by ``math.fsum``; the result equals SymPy's to a few ulps.
"""
from __future__ import annotations

import ast
import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import lru_cache
from typing import Any, Sequence

#: Largest exponent ``p`` of ``expr**p`` and largest Hermite degree the numeric path builds (beyond: SymPy).
MAX_POWER = 64
#: A floating-point coefficient at most this fraction of the magnitude of the terms that made it is round-off.
ROUNDOFF = 1e-12
_DIGITS = 40                      # the precision of an exact coefficient's conversion to a float
_SMALL_PRIMES_UP_TO = 10_000      # square-free parts are found by trial division by these primes


class Unsupported(Exception):
    """The numeric path does not decide this expression; SymPy does (the message says why, for debugging)."""


class _NeedFloat(Exception):
    """The expression has an ``x<i>`` or ``pi``: evaluate it again with floating-point coefficients."""


Key = tuple[tuple[int, int], ...]   # a mode's sorted ((dim, order), …)


# ----------------------------------------------------------------------------------------------------------------
# coefficients
# ----------------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _primes() -> tuple[int, ...]:
    sieve = bytearray([1]) * (_SMALL_PRIMES_UP_TO + 1)
    sieve[0:2] = b"\0\0"
    for p in range(2, math.isqrt(_SMALL_PRIMES_UP_TO) + 1):
        if sieve[p]:
            sieve[p * p::p] = bytearray(len(sieve[p * p::p]))
    return tuple(p for p, ok in enumerate(sieve) if ok)


@lru_cache(maxsize=4096)
def _split_square(n: int) -> tuple[int, int]:
    """``n = s² t`` with ``t`` square-free: ``(s, t)``; :class:`Unsupported` when ``n`` has a cofactor that trial
    division by the small primes cannot split into a square and a square-free part."""
    s, t = 1, 1
    for p in _primes():
        if p * p > n:
            break
        e = 0
        while n % p == 0:
            n //= p
            e += 1
        s *= p ** (e // 2)
        t *= p ** (e % 2)
    if n > 1:   # the cofactor: a prime (no factor ≤ its square root), a square, or beyond our reach
        r = math.isqrt(n)
        if r * r == n:
            s *= r
        elif n < _SMALL_PRIMES_UP_TO ** 2:
            t *= n
        else:
            raise Unsupported(f"square root of an integer with a large cofactor ({n})")
    return s, t


class Surd:
    """An exact ``Σ_r q_r sqrt(r)`` (``q_r`` rational ≠ 0, ``r`` square-free ≥ 1): the coefficients of the exact
    path. Sums and products stay in this form: ``sqrt(a) sqrt(b) = g sqrt((a/g)(b/g))`` with ``g = gcd(a, b)``."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[int, Fraction]) -> None:
        self.terms = {r: q for r, q in terms.items() if q}

    @classmethod
    def rational(cls, q: "Fraction | int") -> "Surd":
        return cls({1: Fraction(q)})

    @classmethod
    def sqrt_of(cls, q: Fraction) -> "Surd":
        """``sqrt(q)`` of a rational ``q ≥ 0``: ``sqrt(n/d) = (s/d) sqrt(t)`` with ``n d = s² t``."""
        if q < 0:
            raise Unsupported("square root of a negative number")
        s, t = _split_square(q.numerator * q.denominator)
        return cls({t: Fraction(s, q.denominator)})

    def __add__(self, other: "Surd") -> "Surd":
        out = dict(self.terms)
        for r, q in other.terms.items():
            out[r] = out.get(r, 0) + q
        return Surd(out)

    def __mul__(self, other: "Surd") -> "Surd":
        out: dict[int, Fraction] = {}
        for r1, q1 in self.terms.items():
            for r2, q2 in other.terms.items():
                g = math.gcd(r1, r2)
                r = (r1 // g) * (r2 // g)
                out[r] = out.get(r, 0) + q1 * q2 * g
        return Surd(out)

    def __neg__(self) -> "Surd":
        return Surd({r: -q for r, q in self.terms.items()})

    def is_zero(self) -> bool:
        return not self.terms

    def as_rational(self) -> Fraction | None:
        """The value when it is rational, else ``None``."""
        if not self.terms:
            return Fraction(0)
        return self.terms[1] if set(self.terms) == {1} else None

    def inverse(self) -> "Surd":
        """``1/(q sqrt(r)) = sqrt(r)/(q r)`` of a single term (a sum of several: :class:`Unsupported`)."""
        if len(self.terms) != 1:
            raise Unsupported("division by a sum of square roots" if self.terms else "division by zero")
        (r, q), = self.terms.items()
        return Surd({r: 1 / (q * r)})

    def sqrt(self) -> "Surd":
        q = self.as_rational()
        if q is None:
            raise Unsupported("square root of an irrational number")
        return Surd.sqrt_of(q)

    def __float__(self) -> float:
        """The value rounded once: each ``sqrt(r)`` to :data:`_DIGITS` digits in integers, the sum as a fraction."""
        scale = 10 ** _DIGITS
        total = Fraction(0)
        for r, q in self.terms.items():
            total += q * (scale if r == 1 else Fraction(math.isqrt(r * scale * scale)))
        try:
            return float(total / scale)
        except OverflowError:
            return math.inf if total > 0 else -math.inf


class Approx:
    """A floating-point coefficient with the sum of the magnitudes of the terms that made it (its round-off
    scale): the coefficients of the floating-point path."""

    __slots__ = ("value", "scale")

    def __init__(self, value: float, scale: float | None = None) -> None:
        self.value = float(value)
        self.scale = abs(self.value) if scale is None else float(scale)

    @classmethod
    def rational(cls, q: "Fraction | int") -> "Approx":
        return cls(float(q))

    @classmethod
    def sqrt_of(cls, q: Fraction) -> "Approx":
        if q < 0:
            raise Unsupported("square root of a negative number")
        return cls(math.sqrt(q))

    def __add__(self, other: "Approx") -> "Approx":
        return Approx(self.value + other.value, self.scale + other.scale)

    def __mul__(self, other: "Approx") -> "Approx":
        return Approx(self.value * other.value, self.scale * other.scale)

    def __neg__(self) -> "Approx":
        return Approx(-self.value, self.scale)

    def is_zero(self) -> bool:
        return self.value == 0.0

    def is_round_off(self) -> bool:
        """Nonzero, but within :data:`ROUNDOFF` of the magnitude of its terms (a cancellation floats cannot decide)."""
        return self.value != 0.0 and abs(self.value) <= ROUNDOFF * self.scale

    def as_rational(self) -> Fraction | None:
        return Fraction(self.value) if math.isfinite(self.value) else None

    def inverse(self) -> "Approx":
        if self.value == 0.0 or self.is_round_off():
            raise Unsupported("division by zero (or by round-off)")
        return Approx(1.0 / self.value, self.scale / self.value**2)

    def sqrt(self) -> "Approx":
        if self.value < 0:
            raise Unsupported("square root of a negative number")
        return Approx(math.sqrt(self.value))

    def __float__(self) -> float:
        return self.value


Coefficient = Any   # Surd | Approx


# ----------------------------------------------------------------------------------------------------------------
# polynomials in the Hermite basis
# ----------------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def linearization_squares(m: int, n: int) -> tuple[tuple[int, Fraction], ...]:
    """``h_m h_n = Σ_j C_j h_{m+n−2j}``: ``((m+n−2j, C_j²), …)``, ``C_j² = (j! binom(m,j) binom(n,j))² k!/(m! n!)``
    exactly (``He_m He_n = Σ_j j! binom(m,j) binom(n,j) He_{m+n−2j}`` and ``h_n = He_n/sqrt(n!)``)."""
    out = []
    for j in range(min(m, n) + 1):
        k = m + n - 2 * j
        a = math.factorial(j) * math.comb(m, j) * math.comb(n, j)
        out.append((k, Fraction(a * a * math.factorial(k), math.factorial(m) * math.factorial(n))))
    return tuple(out)


class _Algebra:
    """Polynomials ``{mode key: coefficient}`` over one kind of coefficient (:class:`Surd` or :class:`Approx`)."""

    def __init__(self, kind: Any) -> None:
        self.kind: Any = kind
        self._sqrt: dict[Fraction, Coefficient] = {}

    def const(self, c: Coefficient) -> dict[Key, Coefficient]:
        return {} if c.is_zero() else {(): c}

    def sqrt_rational(self, q: Fraction) -> Coefficient:
        if q not in self._sqrt:
            self._sqrt[q] = self.kind.sqrt_of(q)
        return self._sqrt[q]

    def add(self, a: dict[Key, Coefficient], b: dict[Key, Coefficient]) -> dict[Key, Coefficient]:
        out = dict(a)
        for k, c in b.items():
            out[k] = out[k] + c if k in out else c
        return out

    def scale(self, a: dict[Key, Coefficient], c: Coefficient) -> dict[Key, Coefficient]:
        return {k: v * c for k, v in a.items()}

    def mode_product(self, ka: Key, kb: Key) -> list[tuple[Key, Coefficient]]:
        """``h_a h_b`` as ``[(key, C), …]``: the univariate linearisations of the shared coordinates, multiplied."""
        da, db = dict(ka), dict(kb)
        terms: list[tuple[dict[int, int], Coefficient | None]] = [({}, None)]
        for i in sorted(set(da) | set(db)):
            m, n = da.get(i, 0), db.get(i, 0)
            if m == 0 or n == 0:
                for index, _ in terms:
                    index[i] = m + n
                continue
            new = []
            for index, c in terms:
                for k, c2 in linearization_squares(m, n):
                    factor = self.sqrt_rational(c2)
                    new.append(({**index, i: k}, factor if c is None else c * factor))
            terms = new
        one = self.kind.rational(1)
        return [(tuple(sorted((i, n) for i, n in index.items() if n)), one if c is None else c) for index, c in terms]

    def mul(self, a: dict[Key, Coefficient], b: dict[Key, Coefficient]) -> dict[Key, Coefficient]:
        out: dict[Key, Coefficient] = {}
        for ka, ca in a.items():
            for kb, cb in b.items():
                cab = ca * cb
                for key, c in self.mode_product(ka, kb):
                    term = cab * c
                    out[key] = out[key] + term if key in out else term
        return out

    def power(self, a: dict[Key, Coefficient], p: int) -> dict[Key, Coefficient]:
        out: dict[Key, Coefficient] = {(): self.kind.rational(1)}
        base = a
        while p:
            if p & 1:
                out = self.mul(out, base)
            p >>= 1
            if p:
                base = self.mul(base, base)
        return out


def _constant(poly: dict[Key, Coefficient], kind: Any) -> Coefficient | None:
    """The value of a polynomial that is a constant (every non-constant coefficient zero), else ``None``."""
    if any(k and not c.is_zero() for k, c in poly.items()):
        return None
    return poly.get((), kind.rational(0))


# ----------------------------------------------------------------------------------------------------------------
# the evaluator
# ----------------------------------------------------------------------------------------------------------------
class _Evaluator:
    """Evaluates the :mod:`ast` of a checked target text into a Hermite-basis polynomial."""

    def __init__(self, text: str, dim: int, kind: Any, sqrt_g: Sequence[float] | None, rotation: Any) -> None:
        self.text, self.dim = text, dim
        self.kind: Any = kind
        self.alg = _Algebra(kind)
        self.sqrt_g, self.rotation = sqrt_g, rotation

    def number(self, node: ast.Constant) -> Coefficient:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Unsupported(f"constant {value!r}")
        literal = ast.get_source_segment(self.text, node)
        try:   # the rational the literal spells, as SymPy's rational=True reads it
            q = Fraction(Decimal(literal)) if literal is not None else Fraction(value)
        except (InvalidOperation, ValueError):
            q = Fraction(value)
        return self.kind.rational(q)

    def coordinate(self, name: str) -> dict[Key, Coefficient]:
        kind, i = name[0], int(name[1:])
        if i >= self.dim:
            raise Unsupported(f"{name} out of range")
        if kind == "z":
            return {((i, 1),): self.kind.rational(1)}
        if self.kind is Surd:
            raise _NeedFloat
        if self.sqrt_g is None:
            raise Unsupported("x-coordinates without a spectrum")
        if self.rotation is None:
            return {((i, 1),): Approx(self.sqrt_g[i])}
        # user coordinates x_u = R x_eigen: x_j = Σ_i R[j, i] sqrt(g_i) z_i
        row = self.rotation[i]
        return {((k, 1),): Approx(float(row[k]) * self.sqrt_g[k]) for k in range(self.dim) if row[k] != 0}

    def eval(self, node: ast.AST) -> dict[Key, Coefficient]:
        alg = self.alg
        if isinstance(node, ast.Expression):
            return self.eval(node.body)
        if isinstance(node, ast.Constant):
            return alg.const(self.number(node))
        if isinstance(node, ast.Name):
            name = node.id
            if name == "pi":
                if self.kind is Surd:
                    raise _NeedFloat
                return alg.const(Approx(math.pi))
            if name[:1] in "zx" and name[1:].isdigit():
                return self.coordinate(name)
            raise Unsupported(f"name {name!r}")
        if isinstance(node, ast.UnaryOp):
            inner = self.eval(node.operand)
            if isinstance(node.op, ast.UAdd):
                return inner
            if isinstance(node.op, ast.USub):
                return {k: -c for k, c in inner.items()}
            raise Unsupported(type(node.op).__name__)
        if isinstance(node, ast.BinOp):
            a, b = self.eval(node.left), self.eval(node.right)
            if isinstance(node.op, ast.Add):
                return alg.add(a, b)
            if isinstance(node.op, ast.Sub):
                return alg.add(a, {k: -c for k, c in b.items()})
            if isinstance(node.op, ast.Mult):
                return alg.mul(a, b)
            if isinstance(node.op, ast.Div):
                c = _constant(b, self.kind)
                if c is None:
                    raise Unsupported("division by a non-constant")
                return alg.scale(a, c.inverse())
            if isinstance(node.op, ast.Pow):
                return self.power(a, b)
            raise Unsupported(type(node.op).__name__)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise Unsupported(type(node).__name__)

    def power(self, a: dict[Key, Coefficient], b: dict[Key, Coefficient]) -> dict[Key, Coefficient]:
        e = _constant(b, self.kind)
        q = e.as_rational() if e is not None else None
        if q is None:
            raise Unsupported("a non-rational or non-constant exponent")
        base = _constant(a, self.kind)
        if q.denominator == 1 and 0 <= q.numerator <= MAX_POWER:
            return self.alg.power(a, q.numerator)
        if base is None:
            raise Unsupported("a polynomial to a negative, fractional or large power")
        if q.denominator not in (1, 2) or abs(q.numerator) > MAX_POWER:
            raise Unsupported("a number to a power other than a multiple of 1/2")
        p = abs(q.numerator)
        value = self.alg.power(self.alg.const(base), p).get((), self.kind.rational(0))
        if q.denominator == 2:
            value = value.sqrt()
        return self.alg.const(value.inverse() if q < 0 else value)

    def call(self, node: ast.Call) -> dict[Key, Coefficient]:
        if not isinstance(node.func, ast.Name) or node.keywords or len(node.args) != 1:
            raise Unsupported("a call other than f(one argument)")
        name, arg = node.func.id, node.args[0]
        if name == "sqrt":
            c = _constant(self.eval(arg), self.kind)
            if c is None:
                raise Unsupported("sqrt of a non-constant")
            return self.alg.const(c.sqrt())
        if name == "staircase":
            if not (isinstance(arg, ast.Constant) and type(arg.value) is int and 1 <= arg.value <= self.dim
                    and arg.value <= 100):
                raise Unsupported("staircase(k) other than an integer 1 ≤ k ≤ min(d, 100)")
            k = arg.value
            c = self.alg.sqrt_rational(Fraction(1, k))
            return {tuple((i, 1) for i in range(j)): c for j in range(1, k + 1)}
        if name[:1] == "h" and name[1:].isdigit():
            n = int(name[1:])
            if not (isinstance(arg, ast.Name) and arg.id[:1] == "z" and arg.id[1:].isdigit()) or n > MAX_POWER:
                raise Unsupported("h<n>(…) of something other than z<i>, or a large n")
            i = int(arg.id[1:])
            if i >= self.dim:
                raise Unsupported(f"z{i} out of range")
            return {((i, n),) if n else (): self.kind.rational(1)}
        raise Unsupported(f"function {name!r}")


# ----------------------------------------------------------------------------------------------------------------
# entry point
# ----------------------------------------------------------------------------------------------------------------
def decompose(text: str, dim: int, sqrt_g: Sequence[float] | None = None, rotation: Any = None,
              normalize: bool = True) -> tuple[list[tuple[Key, float]], float]:
    """The Hermite decomposition of the checked target ``text`` (``^`` already written ``**``) in dimension
    ``dim``: ``([(mode key, v_α), …], constant)`` in the order of the modes, normalised to ``Σ_{α≠0} v_α² = 1``
    when ``normalize`` (the constant as written; without ``normalize`` a nonzero constant is the first mode, key
    ``()``). ``sqrt_g``: ``sqrt(g_i)`` of the spectrum (for ``x<i>``), ``rotation`` its eigenvectors (a full
    covariance). Raises :class:`Unsupported` for anything it does not decide (see the module doc)."""
    from featureode.calculus.hermite import Mode

    tree = ast.parse(text, mode="eval")

    def evaluate(kind: Any) -> dict[Key, Coefficient]:
        try:
            return _Evaluator(text, dim, kind, sqrt_g, rotation).eval(tree)
        except (OverflowError, ZeroDivisionError, RecursionError, MemoryError) as exc:
            raise Unsupported(type(exc).__name__) from None

    try:
        kind: Any = Surd
        poly = evaluate(Surd)
    except _NeedFloat:
        kind = Approx
        poly = evaluate(Approx)
    if kind is Approx:
        if rotation is not None:   # the rule of the SymPy path: round-off of the float rotation, relative to the top
            top = max((abs(c.value) for c in poly.values()), default=0.0)
            poly = {k: c for k, c in poly.items() if abs(c.value) > 1e-12 * top}
        elif any(c.is_round_off() for c in poly.values()):
            raise Unsupported("a coefficient that cancels to round-off")
    poly = {k: c for k, c in poly.items() if not c.is_zero()}
    const = poly.pop((), None)
    values = {k: float(c) for k, c in poly.items()}
    const_value = float(const) if const is not None else 0.0
    if not all(math.isfinite(v) for v in [*values.values(), const_value]):
        raise Unsupported("a coefficient beyond double precision")
    order = sorted(values, key=lambda k: Mode(k).sort_key())
    if normalize:
        if not values:
            raise Unsupported("no non-constant part")
        var = float(sum((poly[k] * poly[k] for k in order), kind.rational(0))) if kind is Surd \
            else math.fsum(v * v for v in values.values())
        if not 1e-300 < var < 1e300:
            raise Unsupported("a variance beyond double precision")
        norm = math.sqrt(var)
        return [(k, values[k] / norm) for k in order], const_value
    items = [(k, values[k]) for k in order]
    if const is not None:
        items.insert(0, ((), const_value))
    var = math.fsum(v * v for _, v in items)
    if items and not 1e-300 < var < 1e300:
        raise Unsupported("a variance beyond double precision")
    return items, const_value
