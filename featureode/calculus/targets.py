"""Targets ``f*(x) = Σ_α v_α h_α(z)`` (theory §1): parsing, exact Hermite decomposition, evaluation.

A target expression is a polynomial written with

* whitened coordinates ``z0, z1, …`` and eigenbasis inputs ``x0, x1, …`` (``x_i = sqrt(g_i) z_i``; with a full
  covariance, ``x`` are the user's coordinates and are rotated into the eigenbasis),
* Hermite factors ``h<n>(z<i>)`` (orthonormal ``h_n``), ``staircase(k) = (1/sqrt(k)) Σ_{j=1..k} z0*…*z_{j-1}``,
* numbers, ``+ - * / ^ **``, parentheses, ``sqrt`` and ``pi``.

It is expanded and decomposed exactly into Hermite modes (rational arithmetic where the inputs are rational).
By default the non-constant part is normalised to unit variance ``Σ_{α≠0} v_α² = 1``; the constant term is
reported separately (``constant``) and is not a mode of the normalised target.
"""
from __future__ import annotations

import ast
import math
import operator
import re
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import sympy as sp

from featureode.core.errors import FeatureODEError
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode, hermite_expr, polynomial_to_hermite


class TargetError(FeatureODEError, ValueError):
    """A target expression that cannot be parsed or decomposed."""


_TOKEN = re.compile(r"\s*(?:(?P<num>\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_]\w*)"
                    r"|(?P<op>\*\*|[-+*/^(),]))", re.ASCII)   # ASCII only: \d would match "０" (U+FF10)
_FUNCS = {"staircase", "sqrt", "pi"}
#: The highest ``h<n>`` a target may name, and the largest ``k`` of ``staircase(k)``.
MAX_HERMITE_INDEX = 100
MAX_STAIRCASE = 100
_ROUNDOFF = 1e-12  # relative size below which a coefficient from a floating-point rotation is round-off


def _z(i: int) -> sp.Symbol:
    """The whitened coordinate ``z_i`` (SymPy caches symbols, so every call gives the same object)."""
    return sp.Symbol(f"z{i}", real=True)


def _z_index(sym: Any) -> int | None:
    """``i`` when ``sym`` is the symbol ``z_i``, else ``None``."""
    m = re.fullmatch(r"z(\d+)", sym.name, re.ASCII) if isinstance(sym, sp.Symbol) else None
    return int(m.group(1)) if m else None


def staircase_expr(k: int, dim: int) -> sp.Expr:
    """``staircase(k) = (1/sqrt(k)) Σ_{j=1..k} z_0 ⋯ z_{j-1}`` (unit variance) in dimension ``dim``."""
    if not (isinstance(k, (int, sp.Integer)) and not isinstance(k, bool)):
        raise TargetError(f"staircase(k) needs an integer k, got {k}")
    k = int(k)
    if k < 1 or k > dim:
        raise TargetError(f"staircase({k}) needs 1 ≤ k ≤ d = {dim}")
    if k > MAX_STAIRCASE:
        raise TargetError(f"staircase({k}) is above the supported k ≤ {MAX_STAIRCASE} (its top mode has degree k, "
                          "and k in the hundreds takes minutes to expand)")
    zs = [_z(i) for i in range(k)]
    return sum((sp.Mul(*zs[:j]) for j in range(1, k + 1)), sp.Integer(0)) / sp.sqrt(k)


def _check_syntax(text: str) -> str:
    """``text`` with ``^`` as ``**``, after checking that it is a well-formed expression (else say where)."""
    py = text.replace("^", "**")
    try:
        ast.parse(py, mode="eval")
    except SyntaxError as exc:
        at = (exc.offset or 1) - 1
        at -= text[:at].count("^")  # position in the original text (each ^ became two characters)
        raise TargetError(f"cannot parse target {text!r}: {exc.msg} at position {at} "
                          f"({text[:at]!r} ⟨here⟩ {text[at:]!r})") from None
    return py


def _check_tokens(text: str, d: int) -> None:
    """Reject unknown names, out-of-range dimensions and stray characters (anything outside printable ASCII:
    full-width digits, Unicode letters and minus signs), saying where."""
    for at, ch in enumerate(text):
        if not (32 <= ord(ch) < 127 or ch in "\t"):
            raise TargetError(f"cannot parse target {text!r}: character {ch!r} (U+{ord(ch):04X}) at position {at} "
                              "is not ASCII; mode names are ASCII letters and digits (z0, x3, h2(z1)) and "
                              "operators + - * / ^ ( )")
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            at = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise TargetError(f"cannot parse target {text!r}: unexpected character {text[at]!r} at position {at}")
        name = m.group("name")
        if name is not None:
            where = m.start("name")
            coord = re.fullmatch(r"([xz])(\d+)", name, re.ASCII)
            herm = re.fullmatch(r"h(\d+)", name, re.ASCII)
            if coord:
                if len(coord.group(2)) > 1 and coord.group(2).startswith("0"):
                    raise TargetError(f"target {text!r}: {name} at position {where} has a leading zero; write "
                                      f"{coord.group(1)}{int(coord.group(2))}")
                if int(coord.group(2)) >= d:
                    raise TargetError(f"target {text!r}: {name} at position {where} is out of range for d = {d} "
                                      f"(dimensions are 0-based: {coord.group(1)}0 … {coord.group(1)}{d - 1})")
            elif herm and int(herm.group(1)) > MAX_HERMITE_INDEX:
                raise TargetError(f"target {text!r}: {name} at position {where} has degree {int(herm.group(1))}, "
                                  f"above the supported {MAX_HERMITE_INDEX} (the kernel needs derivative means up "
                                  "to degree + 2, and a degree in the hundreds takes minutes to expand)")
            elif not herm and name not in _FUNCS:
                raise TargetError(f"target {text!r}: unknown name {name!r} at position {where}; use z<i>, x<i>, "
                                  "h<n>(z<i>), staircase(k), sqrt, pi")
        pos = m.end()


def check_target_text(text: str, dim: int) -> None:
    """The cheap checks of a target expression in dimension ``dim`` (syntax, names, coordinate ranges), without
    decomposing it; raises :class:`TargetError` saying where."""
    if not isinstance(text, str) or not text.strip():
        raise TargetError(f"target must be a non-empty string, got {text!r}")
    _check_tokens(text, dim)
    _check_syntax(text)


def _check_double_range(text: str, items: list[tuple[Mode, sp.Expr]]) -> None:
    """Refuse coefficients (and a variance ``Σ v_α²``) that double precision cannot hold: the ODE's loss would be
    ``inf`` or ``0/0``."""
    vals = []
    for m, c in items:
        try:
            v = float(c)
        except (TypeError, ValueError):
            raise TargetError(f"target {text!r}: the coefficient of {m} is not a real number ({c})") from None
        if not math.isfinite(v):
            raise TargetError(f"target {text!r}: the coefficient of {m} is {sp.N(c, 6)}, beyond double precision "
                              "(|v| < 1.8e308); rescale the target")
        vals.append(v)
    var = math.fsum(v * v for v in vals)
    if vals and not (1e-300 < var < 1e300):
        raise TargetError(f"target {text!r}: its variance Σ v_α² = {sp.N(sum(c**2 for _, c in items), 6)} is "
                          "outside the range double precision can hold (1e-300 … 1e300), so the loss would be "
                          "0 or inf; rescale the target (or keep target.normalize = true)")


@dataclass(frozen=True)
class Target:
    """A decomposed target: modes ``α`` with coefficients ``v_α`` (float and exact), plus the constant term.

    ``values``/``constant_value`` are the floats; ``exact``/``constant_exact`` the exact SymPy numbers. A target
    parsed by :func:`parse_target` has its floats from the numeric path (:mod:`featureode.calculus.numeric_targets`,
    no SymPy) and builds its exact form on first use of :attr:`exact` (display, LaTeX, ``featureode decompose``)."""

    expr: str
    dim: int
    modes: tuple[Mode, ...]
    exact: "tuple[sp.Expr, ...]" = field(default=None, compare=False, repr=False)  # type: ignore[arg-type]  # None until built by exact_factory (on first read) or given
    constant_exact: "sp.Expr" = field(default=None, compare=False, repr=False)  # likewise: None until built
    normalized: bool = True
    values: "tuple[float, ...] | None" = None
    constant_value: "float | None" = None
    #: builds ``(exact, constant_exact)`` on first use of :attr:`exact` (the SymPy decomposition of ``expr``)
    exact_factory: "Callable[[], tuple[tuple[sp.Expr, ...], sp.Expr]] | None" = field(
        default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        factory = object.__getattribute__(self, "exact_factory")
        if factory is None:
            if self.exact is None:
                raise TargetError("a Target needs its coefficients: exact=(…) or values=(…) with exact_factory")
            if self.constant_exact is None:
                object.__setattr__(self, "constant_exact", sp.Integer(0))
        elif self.values is None:
            raise TargetError("a Target with an exact_factory needs its float values")
        if self.values is None:
            object.__setattr__(self, "values", tuple(float(c) for c in self.exact))
        if self.constant_value is None:
            object.__setattr__(self, "constant_value", float(self.constant_exact) if factory is None else 0.0)

    def __getattribute__(self, name: str) -> Any:
        if name in ("exact", "constant_exact"):
            factory = object.__getattribute__(self, "exact_factory")
            if factory is not None:   # the SymPy form, built once on first use
                exact, constant = factory()
                object.__setattr__(self, "exact", exact)
                object.__setattr__(self, "constant_exact", constant)
                object.__setattr__(self, "exact_factory", None)
        return object.__getattribute__(self, name)

    @property
    def coefficients(self) -> np.ndarray:
        """``v_α`` as floats, in the order of ``modes``."""
        return np.array(self.values, dtype=float)

    @property
    def constant(self) -> float:
        """The constant term ``v_0`` (excluded from the modes when normalised)."""
        return float(self.constant_value)  # type: ignore[arg-type]  # set in __post_init__

    @property
    def variance(self) -> float:
        """``Σ_{α≠0} v_α²`` (the constant mode, when listed, excluded)."""
        return float(sum(c**2 for m, c in zip(self.modes, self.coefficients) if m.degree > 0))

    def as_dict(self) -> dict[Mode, float]:
        """``{α: v_α}``."""
        return dict(zip(self.modes, self.coefficients))

    def evaluate(self, z: Any) -> Any:
        """``f*(z) = Σ_α v_α h_α(z)`` for samples of shape ``(..., d)``, NumPy or torch (constant excluded when
        the target is normalised)."""
        if z.shape[-1] != self.dim:
            raise TargetError(f"samples have {z.shape[-1]} dimensions, target {self.expr!r} has d = {self.dim}")
        out = z[..., 0] * 0
        for m, v in zip(self.modes, self.coefficients):
            out = out + float(v) * m.evaluate(z)
        return out

    # constructors ---------------------------------------------------------------------------------------------------
    @classmethod
    def from_modes(cls, coeffs: Mapping["Mode | str", Any], dim: int, normalize: bool = True,
                   expr: str | None = None) -> "Target":
        """From ``{mode: coefficient}`` directly."""
        parsed = {(m if isinstance(m, Mode) else Mode.parse(m)): sp.nsimplify(c) if isinstance(c, (int, str))
                  else sp.sympify(c) for m, c in coeffs.items()}
        for m in parsed:
            m.check_dim(dim)
        text = expr or " + ".join(f"{c}*{m}" for m, c in parsed.items())
        return cls._build(text, dim, parsed, normalize)

    @classmethod
    def _build(cls, text: str, dim: int, coeffs: dict[Mode, sp.Expr], normalize: bool) -> "Target":
        const = sp.sympify(coeffs.pop(Mode(), 0))
        items = sorted((m, c) for m, c in coeffs.items() if c != 0)
        if normalize:
            var = sum((c**2 for _, c in items), sp.Integer(0))
            if var == 0:
                raise TargetError(f"target {text!r} has no non-constant part, so it cannot be normalised to unit "
                                  "variance; use normalize=False")
            norm = sp.sqrt(var)
            # rationalise denominators only for sqrt(rational) norms: radsimp of nested surds is very slow
            items = [(m, sp.radsimp(c / norm) if var.is_Rational else c / norm) for m, c in items]
        elif const != 0:
            items = [(Mode(), const)] + items
        _check_double_range(text, items)
        return cls(text, dim, tuple(m for m, _ in items), tuple(c for _, c in items), const, normalize)


def parse_target(text: str, spectrum: "Spectrum | int", normalize: bool = True) -> Target:
    """Parse and decompose a target expression (see module doc) under the covariance ``spectrum``.

    ``spectrum`` may be an int ``d`` (then only z-coordinates may be used). The coefficients are computed without
    SymPy (:mod:`featureode.calculus.numeric_targets`: exact arithmetic in the square roots of rationals for
    z-coordinates, floating point for x-coordinates), with the modes SymPy gives and values equal to the exact ones
    to a few ulps; the exact SymPy form is built when :attr:`Target.exact` is first read. An expression the numeric
    path does not decide (or a bad one) goes to SymPy, which gives the result or the one-line error. Only the
    coordinates the expression uses become symbols, so a low-order target decomposes in the same time at any ``d``.
    """
    if isinstance(spectrum, Spectrum):
        d = spectrum.dim
    else:
        try:
            d = -1 if isinstance(spectrum, bool) else operator.index(spectrum)
        except TypeError:
            d = -1
        if d < 1:
            raise TargetError(f"target {text!r}: the dimension d = {spectrum!r} must be an integer ≥ 1 (give d or a "
                              "Spectrum)")
        spectrum = d
    check_target_text(text, d)
    from featureode.calculus import numeric_targets

    sqrt_g = rotation = None
    if isinstance(spectrum, Spectrum):
        sqrt_g, rotation = np.sqrt(spectrum.g).tolist(), spectrum.rotation
    try:
        items, constant = numeric_targets.decompose(text.replace("^", "**"), d, sqrt_g, rotation, normalize)
    except Exception:  # noqa: BLE001 — whatever the numeric path does not decide, SymPy decides (or names the error)
        return _parse_exact(text, spectrum, normalize)
    modes = tuple(Mode(k) for k, _ in items)
    return Target(text, d, modes, normalized=normalize, values=tuple(v for _, v in items), constant_value=constant,
                  exact_factory=functools.partial(_exact_of, text, spectrum, normalize, modes))


def _exact_of(text: str, spectrum: "Spectrum | int", normalize: bool, modes: tuple[Mode, ...]
              ) -> tuple[tuple[sp.Expr, ...], sp.Expr]:
    """The exact coefficients of ``modes`` and the exact constant of the target ``text`` (SymPy)."""
    exact = _parse_exact(text, spectrum, normalize)
    coeffs = dict(zip(exact.modes, exact.exact))
    return tuple(coeffs.get(m, sp.Integer(0)) for m in modes), exact.constant_exact


def _parse_exact(text: str, spectrum: "Spectrum | int", normalize: bool = True) -> Target:
    """:func:`parse_target` through SymPy (exact arithmetic; every error message of a bad target comes from here)."""
    d = spectrum if isinstance(spectrum, int) else spectrum.dim
    ns: dict[str, Any] = {f"z{i}": _z(i) for i in {int(n) for n in re.findall(r"\bz(\d+)\b", text, re.ASCII)}}
    used_x = sorted({int(n) for n in re.findall(r"\bx(\d+)\b", text, re.ASCII)})
    if isinstance(spectrum, Spectrum):
        if spectrum.rotation is not None:  # user coordinates x_u = R x_eigen, x_eigen,i = sqrt(g_i) z_i
            rot = spectrum.rotation
            xe = [spectrum.sqrt_exact(i) * _z(i) for i in range(d)] if used_x else []
            ns.update({f"x{j}": sum((sp.Float(rot[j, i], 17) * xe[i] for i in range(d)), sp.Integer(0))
                       for j in used_x})
        else:
            ns.update({f"x{i}": spectrum.sqrt_exact(i) * _z(i) for i in used_x})
    elif used_x:
        raise TargetError(f"target {text!r} uses x-coordinates, which need the covariance spectrum, not only d")

    def _h(n: int) -> Any:
        def h(*args: Any) -> sp.Expr:
            if len(args) != 1 or _z_index(args[0]) is None:
                raise TargetError(f"target {text!r}: h{n}(...) takes a single whitened coordinate z<i>, "
                                  f"got h{n}({', '.join(map(str, args))})")
            return hermite_expr(n).subs(sp.Symbol("z", real=True), args[0])
        return h

    def _staircase(*args: Any) -> sp.Expr:
        if len(args) != 1:
            raise TargetError(f"target {text!r}: staircase(k) takes one integer, got {len(args)} arguments")
        return staircase_expr(args[0], d)

    for m in set(re.findall(r"\bh(\d+)\b", text, re.ASCII)):
        ns[f"h{m}"] = _h(int(m))
    ns["staircase"] = _staircase
    ns["sqrt"], ns["pi"] = sp.sqrt, sp.pi
    py = text.replace("^", "**")
    try:
        expr = sp.sympify(py, locals=ns, rational=True)
    except TargetError:
        raise
    except (sp.SympifyError, SyntaxError, TypeError, ValueError) as exc:
        raise TargetError(f"cannot parse target {text!r}: {exc}") from None
    if not isinstance(expr, sp.Expr):
        raise TargetError(f"target {text!r} is not a single expression (got {type(expr).__name__} {expr})")
    expr = sp.expand(expr)
    stray = sorted(str(v) for v in expr.free_symbols if _z_index(v) is None)
    if stray:
        raise TargetError(f"target {text!r}: unknown name(s) {', '.join(stray)}; use z<i>, x<i>, h<n>(z<i>), "
                          "staircase(k), sqrt, pi")
    index = sorted(i for i in map(_z_index, expr.free_symbols) if i is not None)
    zs = [_z(i) for i in index]
    if not expr.is_polynomial(*zs):
        raise TargetError(f"target {text!r} is not a polynomial in the coordinates; only polynomial targets "
                          "have a finite Hermite expansion")
    # decomposed on the used coordinates (positions in zs), then written with their dimensions
    if zs:
        coeffs = {Mode.from_dict({index[pos]: n for pos, n in m.items}): c
                  for m, c in polynomial_to_hermite(expr, zs).items()}
    else:  # a constant
        coeffs = {Mode(): expr} if expr != 0 else {}
    if isinstance(spectrum, Spectrum) and spectrum.rotation is not None:
        # the rotation is floating point: drop round-off modes (e.g. the cross terms of |x|² = Σ g_i z_i²)
        top = max((abs(float(c)) for c in coeffs.values()), default=0.0)
        coeffs = {m: c for m, c in coeffs.items() if abs(float(c)) > _ROUNDOFF * top}
    return Target._build(text, d, coeffs, normalize)
