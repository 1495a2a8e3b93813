"""Code generation for a feature-ODE :class:`~featureode.ode.terms.System`: NumPy (vectorised) and numba (JIT loops).

Both backends translate the same indexed assignments — and the indexed exact Jacobian of
:meth:`~featureode.ode.terms.System.jacobian_program` — into a Python module with three functions of
``(y, B, v, lam0, g, gpow, c, K, gamma, kappa, *params)`` (``y = (f, D)``, ``M = B.shape[0]``, ``d = B.shape[1]``):

- ``rhs(y, …) → (df/dt, dD/dt)``, shape ``(2M,)``;
- ``observe(y, …) → (r, s, λ)`` with ``r`` of shape ``(d,)``, ``s`` a scalar and ``λ`` of shape ``(M,)``;
- ``jac(y, …) → ∂(df/dt, dD/dt)/∂(f, D)``, shape ``(2M, 2M)``.

NumPy: every index gets an array axis (mode indices ``β, α, j`` and the direction index ``i``); an indexed object
becomes a broadcasting view with its data on its indices' axes and length 1 elsewhere; elementwise SymPy operations
become NumPy operations. Every ``Σ_k``/``Π_k`` is hoisted into a temporary computed once; a sum becomes a sum over
k's axis, or an ``einsum`` contraction of its factors grouped by the axes they span (so no temporary larger than
the factors is built); ``Π_k b^e`` becomes ``exp(Σ_k e log b)`` when every ``b`` is positive at run time (one
contraction instead of a power per element; the direct product otherwise); ``δ(a, b)`` compares two ``arange``
views. Common subexpressions are then eliminated across all assignments of a function. numba: the same tree
becomes loops — one nest per assignment over its free indices and one per hoisted sum or product, in the memory
order of the arrays — compiled with ``numba.njit(cache=True)``.

The generated code depends on the equations only, never on ``M`` or ``d``, so generation time does not grow with the
number of modes. Modules are written to the cache directory (``$FEATUREODE_CACHE_DIR``, default
``~/.cache/featureode``) under a hash of the resolved system and of the generator's source; a later run imports them
instead of regenerating (numba also keeps its machine code there).

Size of the exact Jacobian: it is dense, ``(2M)²`` entries; the NumPy version builds ``(M, M, d)`` work only inside
``einsum``. :mod:`featureode.ode.solve` uses it up to ``JACOBIAN_MAX_STATES`` states and lets the solver estimate the
Jacobian by finite differences beyond that.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import PythonCodePrinter

from featureode.core.cache import cached_text
from featureode.core.errors import FeatureODEError
from featureode.core.registry import Registry
from featureode.ode import integrate
from featureode.ode import terms as ode
from featureode.ode.indexed import IndexedExpressionError, IndexSpace, axes

#: Version of the generator: a hash of the modules that shape the generated code (this one, the Jacobian
#: derivation and the system definitions), so an edited generator never reads stale modules from the cache.
CODEGEN_VERSION = hashlib.sha256(b"".join(
    (Path(__file__).parent / name).read_bytes()
    for name in ("compile.py", "indexed.py", "terms.py", "integrate.py"))).hexdigest()[:12]
_BUILTIN_TERMS = {t.name for t in (*ode.CORE_TERMS, ode.AGOP_GROWTH, ode.DISPLACEMENT_GROWTH)}
_AXIS_ORDER = (ode.beta, ode.i, ode.alpha, ode.j)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class CompileError(FeatureODEError, ValueError):
    """An unknown backend or a system the backend cannot translate."""


@dataclass(frozen=True)
class Compiled:
    """Compiled functions of one system (see the module doc for their signatures)."""

    backend: str
    key: str
    path: Path
    from_cache: bool
    seconds: float
    rhs: Callable
    observe: Callable
    jac: Callable
    rodas: Callable | None = None   # numba only: the compiled integrator of :mod:`featureode.ode.integrate`


# ----------------------------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------------------------
def _functions(system: ode.System) -> list[tuple[str, tuple[ode.Assignment, ...], str]]:
    """(name, assignments, return expression) of the three generated functions."""
    inter = tuple(a for a in system.assignments if a.name in ode.INTERMEDIATES)
    jac_prog, blocks = system.jacobian_program()
    block = [[blocks[(row, col)].name if blocks[(row, col)] is not None else "_zeros" for col in ("f", "D")]  # type: ignore[union-attr]  # the None case is tested in the same expression
             for row in ("dfdt", "dDdt")]
    return [("rhs", system.assignments, "numpy.concatenate((dfdt, dDdt))"),
            ("observe", inter, "(r, s, lam)"),
            ("jac", inter + jac_prog, f"_block({block[0][0]}, {block[0][1]}, {block[1][0]}, {block[1][1]})")]


def _signature(system: ode.System) -> str:
    return ", ".join(("y",) + system.inputs)


def _prologue(indent: str, zeros: bool) -> list[str]:
    out = [f"{indent}M = B.shape[0]", f"{indent}d = B.shape[1]", f"{indent}f = y[:M]", f"{indent}D = y[M:]"]
    return out + ([f"{indent}_zeros = numpy.zeros((M, M))"] if zeros else [])


def _size_name(space: IndexSpace, idx: sp.Symbol) -> str:
    return str(space.size(idx))


def _tuple(items: Iterable[str]) -> str:
    items = list(items)
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _hoist_reductions(exprs: Sequence[sp.Expr]) -> tuple[list[sp.Expr], dict[sp.Symbol, sp.Expr]]:
    """Replace every Sum/Product (innermost first, equal ones once) by a symbol ``_r<n>``; returns the rewritten
    expressions and the definitions. Common-subexpression elimination then treats reductions as atoms: a reduction
    used by several assignments is computed once, and no power inside a product is split off from it."""
    found: dict[sp.Expr, sp.Symbol] = {}

    def hoist(expr: sp.Expr) -> sp.Expr:
        if isinstance(expr, (sp.Sum, sp.Product)):
            node = expr.func(hoist(expr.function), *expr.limits)
            return found.setdefault(node, sp.Symbol(f"_r{len(found)}"))
        if not expr.args or isinstance(expr, sp.Indexed):
            return expr
        return expr.func(*[hoist(a) for a in expr.args])

    out = [hoist(e) for e in exprs]
    return out, {sym: node for node, sym in found.items()}


# ----------------------------------------------------------------------------------------------------------------
# NumPy backend
# ----------------------------------------------------------------------------------------------------------------
class _BroadcastPrinter(NumPyPrinter):
    """Prints an indexed expression as broadcasting NumPy code in a fixed axis frame."""

    def __init__(self, space: IndexSpace, axis: dict[sp.Symbol, int], temps: dict[sp.Symbol, frozenset],
                 views: dict[str, str]) -> None:
        super().__init__({"fully_qualified_modules": True, "allow_unknown_functions": False})
        self.space, self.axis, self.temps, self.views = space, axis, temps, views

    def _shape(self, placed: dict[int, sp.Symbol]) -> str:
        return _tuple(_size_name(self.space, placed[k]) if k in placed else "1" for k in range(len(self.axis)))

    def _view(self, name: str, code: str) -> str:
        self.views.setdefault(name, code)
        return name

    def _print_Indexed(self, expr: sp.Indexed) -> str:
        idx = list(expr.indices)
        axes_ = [self.axis[k] for k in idx]
        perm = sorted(range(len(idx)), key=lambda n: axes_[n])
        base = str(expr.base)
        src = base if perm == list(range(len(idx))) else f"numpy.transpose({base}, {tuple(perm)})"
        name = f"_{base}_" + "_".join(map(str, idx))
        return self._view(name, f"{src}.reshape({self._shape(dict(zip(axes_, idx)))})")

    def _arange(self, idx: sp.Symbol) -> str:
        return self._view(f"_idx_{idx}", f"numpy.arange({_size_name(self.space, idx)}, dtype=float)"
                                         f".reshape({self._shape({self.axis[idx]: idx})})")

    def _print_Symbol(self, expr: sp.Symbol) -> str:
        return self._arange(expr) if expr in self.space.kinds else super()._print_Symbol(expr)

    def _print_KroneckerDelta(self, expr: sp.KroneckerDelta) -> str:
        a, b = expr.args
        return f"(1.0*({self._arange(a)} == {self._arange(b)}))"

    def _full(self, ax: Iterable[int]) -> str:
        """Broadcast shape with the sizes of axes ``ax`` and 1 elsewhere."""
        index_at = {n: x for x, n in self.axis.items()}
        return self._shape({k: index_at[k] for k in ax})

    def _compact(self, ax: Sequence[int]) -> str:
        index_at = {n: x for x, n in self.axis.items()}
        return _tuple(_size_name(self.space, index_at[k]) for k in ax)

    def _sum(self, expr: sp.Sum) -> str:
        """``Σ_k Π factors``: factors grouped by the axes they span and multiplied within a group; one group is
        summed over k's axis, several are contracted by ``einsum`` on their compact (squeezed) arrays."""
        idx = self.space.check_limits(expr)
        ax = self.axis[idx]
        groups: dict[frozenset, list[sp.Expr]] = {}
        for x in sp.Mul.make_args(expr.function):
            groups.setdefault(frozenset(self.axis[k] for k in axes(x, self.space, self.temps)), []).append(x)
        scalar = sp.Mul(*groups.pop(frozenset(), []))
        if len(groups) == 1:
            out = f"numpy.sum({self._print(sp.Mul(*next(iter(groups.values()))))}, axis={ax}, keepdims=True)"
        else:
            ops, specs = [], []
            for span_set, factors in groups.items():
                spans = sorted(span_set)
                # the factors of a group span exactly its axes, so the product has their sizes: no broadcast
                ops.append(f"({self._print(sp.Mul(*factors))}).reshape({self._compact(spans)})")
                specs.append("".join(_LETTERS[k] for k in spans))
            kept = sorted(set().union(*map(set, groups)) - {ax})
            spec = ",".join(specs) + "->" + "".join(_LETTERS[k] for k in kept)
            # one contraction without a path search (einsum's optimizer costs ≈ 0.5 ms a call, more than the work)
            out = f"numpy.einsum('{spec}', {', '.join(ops)}).reshape({self._full(kept)})"
        return out if scalar == 1 else f"({self._print(scalar)})*{out}"

    def _print_Sum(self, expr: sp.Sum) -> str:
        idx = self.space.check_limits(expr)
        if idx not in axes(expr.function, self.space, self.temps):
            return f"(({self._print(expr.function)})*{_size_name(self.space, idx)})"
        return self._sum(expr)

    def _print_Product(self, expr: sp.Product) -> str:
        """``Π_k F``; for ``F = b^e`` it is ``exp(Σ_k e log b)`` (a contraction instead of a power per element)
        whenever every ``b`` is positive at run time, and the direct product otherwise."""
        idx = self.space.check_limits(expr)
        body = expr.function
        if idx not in axes(body, self.space, self.temps):
            return f"(({self._print(body)})**{_size_name(self.space, idx)})"
        direct = f"numpy.prod({self._print(body)}, axis={self.axis[idx]}, keepdims=True)"
        if not body.is_Pow:
            return direct
        base, expo = body.args
        via_log = self._sum(sp.Sum(expo * _Log(base), expr.limits[0]))
        return f"(numpy.exp({via_log}) if numpy.all({self._print(base)} > 0) else {direct})"


class _Log(sp.Function):
    """``log`` that SymPy leaves alone (no expansion of ``log(x**e)``); printed as ``numpy.log``."""

    def _numpycode(self, printer: NumPyPrinter) -> str:
        return f"numpy.log({printer._print(self.args[0])})"


def _axis_frame(space: IndexSpace, exprs: Iterable[sp.Expr], lhs: Iterable[sp.Symbol]) -> dict[sp.Symbol, int]:
    used = set(lhs)
    for e in exprs:
        used |= e.atoms(sp.Symbol) & set(space.kinds)
    ordered = [x for x in _AXIS_ORDER if x in used] + sorted(used - set(_AXIS_ORDER), key=str)
    return {x: n for n, x in enumerate(ordered)}


def _numpy_function(name: str, system: ode.System, assignments: Sequence[ode.Assignment], ret: str) -> list[str]:
    space = system.space
    axis = _axis_frame(space, [a.expr for a in assignments], [k for a in assignments for k in a.index])
    hoisted, reductions = _hoist_reductions([a.expr for a in assignments])
    temps_list, reduced = sp.cse(hoisted, symbols=sp.numbered_symbols("_x"), order="none")
    temps_def = {**reductions, **dict(temps_list)}
    temps: dict[sp.Symbol, frozenset] = {}
    views: dict[str, str] = {}
    printer = _BroadcastPrinter(space, axis, temps, views)
    body: list[str] = []
    emitted: set = set()

    def emit(lhs: str, expr: sp.Expr, wrap: Callable[[str], str] = str) -> None:
        known = len(views)
        code = wrap(printer.doprint(expr))
        body.extend(f"    {k} = {views[k]}" for k in list(views)[known:])
        body.append(f"    {lhs} = {code}")

    def need(expr: sp.Expr) -> None:
        for x in sorted(expr.free_symbols & set(temps_def) - emitted, key=str):
            need(temps_def[x])
            emitted.add(x)
            temps[x] = axes(temps_def[x], space, temps)
            emit(str(x), temps_def[x])

    for a, expr in zip(assignments, reduced):
        need(expr)
        if not a.index:
            emit(a.name, expr, lambda code: f"numpy.reshape({code}, ())[()]")
            continue
        placed = {axis[k]: k for k in a.index}
        full = _tuple(_size_name(space, placed[n]) if n in placed else "1" for n in range(len(axis)))
        order = sorted(range(len(a.index)), key=lambda n: axis[a.index[n]])
        inverse = tuple(sorted(range(len(order)), key=lambda n: order[n]))
        shape = _tuple(_size_name(space, a.index[n]) for n in order)

        spans = axes(expr, space, temps)

        def wrap(code: str) -> str:
            # broadcast only where the expression lacks an axis of the assignment (else it has every size already)
            out = f"({code}).reshape({shape})" if set(a.index) <= set(spans) \
                else f"numpy.broadcast_to({code}, {full}).reshape({shape})"
            return out if inverse == tuple(range(len(order))) else f"numpy.transpose({out}, {inverse})"

        emit(a.name, expr, wrap)
    head = [f"def {name}({_signature(system)}):"] + _prologue("    ", name == "jac")
    return head + body + [f"    return {ret}", "", ""]


def _numpy_source(system: ode.System) -> list[str]:
    # functools: SymPy's NumPy printer writes Min/Max through functools.reduce
    lines = ["import functools", "", "import numpy", "", "", "def _block(a, b, c, e):",
             "    return numpy.block([[a, b], [c, e]])", "", ""]
    for name, assignments, ret in _functions(system):
        lines += _numpy_function(name, system, assignments, ret)
    return lines


# ----------------------------------------------------------------------------------------------------------------
# numba backend
# ----------------------------------------------------------------------------------------------------------------
class _LoopPrinter(PythonCodePrinter):
    """Prints a reduction-free indexed expression as scalar Python code inside loops over its indices; a hoisted
    reduction ``_r<n>`` is read at its free indices."""

    def __init__(self, reductions: dict[sp.Symbol, list[sp.Symbol]]) -> None:
        super().__init__({"fully_qualified_modules": True, "allow_unknown_functions": False})
        self.reductions = reductions

    def _print_Indexed(self, expr: sp.Indexed) -> str:
        return f"{expr.base}[{', '.join(map(str, expr.indices))}]"

    def _print_Symbol(self, expr: sp.Symbol) -> str:
        idx = self.reductions.get(expr)
        return f"{expr}[{', '.join(map(str, idx))}]" if idx else super()._print_Symbol(expr)

    def _print_KroneckerDelta(self, expr: sp.KroneckerDelta) -> str:
        a, b = expr.args
        return f"(1.0 if {a} == {b} else 0.0)"


def _costly(expr: sp.Expr) -> bool:
    """Whether ``expr`` calls a function (sinh, sqrt, Max …) or takes a non-integer power: worth computing once."""
    if expr.is_number:
        return False
    for node in sp.preorder_traversal(expr):
        if isinstance(node, sp.KroneckerDelta) or getattr(node, "is_number", False):
            continue
        if isinstance(node, sp.Function) or (isinstance(node, sp.Pow) and not node.exp.is_Integer):
            return True
    return False


def _numba_function(name: str, system: ode.System, assignments: Sequence[ode.Assignment],
                    ret: str) -> tuple[list[str], str]:
    """Loops in axis order (β, i, α, j — the memory order of ``B[β, i]``, ``K[β, α]``, ``J[·, j]``); every Sum/Product
    is hoisted into its own accumulator array, filled by one loop nest over its free indices and its summation index;
    a product of powers ``Π_k b^e`` skips the factors with ``e = 0`` and multiplies those with ``e = 1`` without a
    power."""
    space = system.space
    order = _axis_frame(space, [a.expr for a in assignments], [k for a in assignments for k in a.index])
    hoisted, definitions = _hoist_reductions([a.expr for a in assignments])
    free: dict[sp.Symbol, list[sp.Symbol]] = {}
    printer = _LoopPrinter(free)
    lines = ["@numba.njit(cache=True, error_model='numpy')", f"def {name}({_signature(system)}):"]
    lines += _prologue("    ", name == "jac")
    # every array of the function is a slice of one scratch buffer ``_w``, the argument ``_w<name>`` (allocated by
    # the caller: once per solve by the integrator, not one per array and call); the right-hand side's dfdt and
    # dDdt are its first 2M entries, returned as one view (no concatenation)
    scratch_at = len(lines)
    sizes: list[str] = []
    outputs = {a.name: a for a in assignments if a.name in ("dfdt", "dDdt") and len(a.index) == 1}
    packed = name == "rhs" and len(outputs) == 2

    def carve(x: str, dims: "list[str]") -> str:
        """``x`` as the next slice of the scratch buffer, of shape ``dims``."""
        size = " * ".join(dims)
        sizes.append(size if len(dims) == 1 else f"({size})")
        view = f"_w[_k:_k + {size}]" + (f".reshape({_tuple(dims)})" if len(dims) > 1 else "")
        return f"    {x} = {view}; _k += {size}"

    def nest(indices: Iterable[sp.Symbol]) -> str:
        pad = "    "
        for k in sorted(indices, key=order.__getitem__):
            lines.append(f"{pad}for {k} in range({_size_name(space, k)}):")
            pad += "    "
        return pad

    def need(expr: sp.Expr) -> None:
        for x in sorted(expr.free_symbols & set(definitions) - set(free), key=str):
            node = definitions[x]
            need(node.function)
            k = space.check_limits(node)
            free[x] = sorted(axes(node, space, {y: frozenset(v) for y, v in free.items()}), key=order.__getitem__)
            init, op = ("0.0", "+=") if isinstance(node, sp.Sum) else ("1.0", "*=")
            shape = _tuple(_size_name(space, q) for q in free[x]) if free[x] else None
            if shape:
                lines.append(carve(str(x), [_size_name(space, q) for q in free[x]]))
                lines.append(f"    {x}.fill({init})")
            else:
                lines.append(f"    {x} = {init}")
            target, body = printer.doprint(x), node.function
            if isinstance(node, sp.Product) and body.is_Pow:
                pad = nest(free[x] + [k])
                # e = 1 (a mode of degree 1 in a direction: most factors) multiplies without pow(), which
                # returns its base exactly there: the same floats, ~20 ns less a factor
                base = printer.doprint(body.base)
                lines.extend([f"{pad}_e = {printer.doprint(body.exp)}", f"{pad}if _e == 1.0:",
                              f"{pad}    {target} {op} {base}", f"{pad}elif _e != 0.0:",
                              f"{pad}    {target} {op} ({base})**_e"])
            else:
                hoisted_nest(free[x] + [k], body, f"{target} {op} ", (target, op, init, k))

    precomputed: dict[sp.Expr, sp.Expr] = {}

    def lift(expr: sp.Expr, nest_set: frozenset) -> sp.Expr:
        """``expr`` (evaluated once per point of the loops over ``nest_set``) with every costly subexpression
        (a function call or a non-integer power) that depends on fewer indices than ``nest_set`` replaced by an
        array ``_p<n>`` over its own indices, filled before the nest (a scalar when it has none): e.g.
        ``Σ_δ U[β,α,δ] sinh(κ_δ D_δ)/κ_δ`` evaluates the sinh M times, not M³. The factors of a product are
        grouped by the indices they depend on, so one array holds each group."""
        temps = {y: frozenset(v) for y, v in free.items()}
        if expr.is_number or not expr.args or isinstance(expr, sp.Indexed):
            return expr
        deps = axes(expr, space, temps)
        if deps < nest_set and _costly(expr):
            return precompute(expr, deps)
        if expr.is_Mul:
            groups: dict[frozenset, list[sp.Expr]] = {}
            for factor in expr.args:
                groups.setdefault(axes(factor, space, temps), []).append(factor)
            out = []
            for g_deps, factors in groups.items():
                prod = sp.Mul(*factors)
                out.append(precompute(prod, g_deps) if g_deps < nest_set and _costly(prod)
                           else sp.Mul(*[lift(x, nest_set) for x in factors]))
            return sp.Mul(*out)
        return expr.func(*[lift(a, nest_set) for a in expr.args])

    def precompute(expr: sp.Expr, deps: frozenset) -> sp.Expr:
        if expr in precomputed:
            return precomputed[expr]
        body = lift(expr, deps)
        name = f"_p{len(precomputed)}"
        ordered = sorted(deps, key=order.__getitem__)
        if ordered:
            lines.append(carve(name, [_size_name(space, k) for k in ordered]))
            pad = nest(ordered)
            lines.append(f"{pad}{name}[{', '.join(map(str, ordered))}] = {printer.doprint(body)}")
            ref: sp.Expr = sp.IndexedBase(name)[tuple(ordered)]
        else:
            lines.append(f"    {name} = {printer.doprint(body)}")
            ref = sp.Symbol(name)
        precomputed[expr] = ref
        return ref

    def hoisted_nest(indices: list[sp.Symbol], body: sp.Expr, head: str,
                     reduction: "tuple[str, str, str, sp.Symbol] | None" = None) -> None:
        """The loop nest of ``head + body`` with loop-invariant code motion: each factor of ``body`` is multiplied
        in at the outermost loop where all its indices are bound (``_h<level>`` carries the partial product), so
        e.g. ``Σ_α K[β,α] (v_α − f_α) ρ_α^{-1/2} J[α,j]`` computes the square root once per (β, α), not per j;
        a costly factor whose indices are not the loops outside it (``sinh(κ_δ D_δ)`` inside the loops over β, α)
        and costly parts of a factor that depend on fewer of its indices are precomputed (:func:`lift`). A
        ``reduction = (target, op, init, k)`` whose index ``k`` is the innermost loop accumulates in a local
        ``_acc`` (the same operations in the same order, but in a register: an array element as accumulator is
        stored and reloaded every step)."""
        idx = sorted(indices, key=order.__getitem__)
        temps = {y: frozenset(v) for y, v in free.items()}
        levels: dict[int, list[sp.Expr]] = {}
        lifted: dict[frozenset, list[sp.Expr]] = {}
        for factor in sp.Mul.make_args(body):
            deps = axes(factor, space, temps)
            level = max((idx.index(q) for q in deps), default=0)
            prefix = frozenset(idx[:level + 1])
            if deps < prefix and _costly(factor):
                lifted.setdefault(deps, []).append(factor)
            else:
                levels.setdefault(level, []).append(lift(factor, prefix))
        for deps, factors in lifted.items():
            levels.setdefault(max((idx.index(q) for q in deps), default=0), []).append(
                precompute(sp.Mul(*factors), deps))
        pad, carried = "    ", []
        local = reduction is not None and idx[-1] == reduction[3]
        outer = pad
        for level, q in enumerate(idx):
            if local and level == len(idx) - 1:
                lines.append(f"{pad}_acc = {reduction[2]}")  # type: ignore[index]  # local implies a reduction
                outer = pad
            lines.append(f"{pad}for {q} in range({_size_name(space, q)}):")
            pad += "    "
            carried += levels.get(level, [])
            if level < len(idx) - 1 and levels.get(level) and level + 1 in levels:
                lines.append(f"{pad}_h{level} = {printer.doprint(sp.Mul(*carried))}")
                carried = [sp.Symbol(f"_h{level}")]
        if local:
            target, op = reduction[0], reduction[1]  # type: ignore[index]  # local implies a reduction
            lines.append(f"{pad}_acc {op} {printer.doprint(sp.Mul(*carried))}")
            lines.append(f"{outer}{target} {op} _acc")
        else:
            lines.append(f"{pad}{head}{printer.doprint(sp.Mul(*carried))}")

    for a, expr in zip(assignments, hoisted):
        need(expr)
        if a.index:
            body = lift(expr, frozenset(a.index))
            if packed and a.name in outputs:
                lines.append(f"    {a.name} = _w[{'0:M' if a.name == 'dfdt' else 'M:2 * M'}]")
            else:
                lines.append(carve(a.name, [_size_name(space, k) for k in a.index]))
            pad = nest(a.index)
            lines.append(f"{pad}{a.name}[{', '.join(map(str, a.index))}] = {printer.doprint(body)}")
        else:
            lines.append(f"    {a.name} = float({printer.doprint(expr)})")
    total = " + ".join((["2 * M"] if packed else []) + sizes) or "0"
    lines[scratch_at:scratch_at] = [f"    _w = _w{name}", f"    _k = {'2 * M' if packed else 0}"]
    return lines + [f"    return {'_w[:2 * M]' if packed else ret}", "", ""], total


def _numba_source(system: ode.System) -> list[str]:
    """The numba module: ``rhs``/``observe``/``jac`` with the full signature of the module doc, each a wrapper of
    ``_<name>_u`` that takes only the inputs the three functions read (``B`` first: it gives ``M`` and ``d``) and
    the three functions' scratch buffers, and the integrator template calling those on ``p`` cut to them once per
    solve (by position), with the buffers allocated there once (``_select``). The ``_<name>_u`` and ``_block`` are
    inlined into the integrator (``inline='always'``): a call between compiled functions costs 25–40 ns, an
    allocation ~45 ns, and a step makes seven or more such calls. A function's returned arrays are views of its
    buffer, valid until its next call: the template copies them before that."""
    lines = ["import math", "", "import numba", "import numpy", "", "",
             "@numba.njit(cache=True, inline='always')", "def _block(a, b, c, e):", "    M = a.shape[0]",
             "    out = numpy.empty((2 * M, 2 * M))", "    out[:M, :M] = a", "    out[:M, M:] = b",
             "    out[M:, :M] = c", "    out[M:, M:] = e", "    return out", "", ""]
    bodies = [(name, *_numba_function(name, system, assignments, ret)) for name, assignments, ret in
              _functions(system)]
    # B: the prologue reads M and d from it (first in INPUTS, so p[0] stays B for the template's d)
    used = [x for x in system.inputs if x == "B" or x in system.reads]
    if used[0] != "B":
        raise AssertionError(f"the generated functions' first input must be B, got {used}")   # INPUTS order
    full, cut = _signature(system), ", ".join(("y",) + tuple(used))
    names = [name for name, _, _ in bodies]
    buffers = [f"_w{name}" for name in names]
    size = {name: total for name, _, total in bodies}
    for name, body, total in bodies:
        # the scratch buffer comes in as an argument (one of three: the solve's buffers of rhs, observe and jac,
        # allocated once per solve by _select; the wrapper allocates its own per call)
        lines += ["@numba.njit(cache=True, error_model='numpy', inline='always')",
                  f"def _{name}_u({cut}, {', '.join(buffers)}):", *body[2:]]
        lines += ["@numba.njit(cache=True, error_model='numpy')", f"def {name}({full}):",
                  "    M = B.shape[0]", "    d = B.shape[1]", f"    _w = numpy.empty({total})",
                  f"    return _{name}_u({cut}, {', '.join(['_w'] * len(buffers))})", "", ""]
    at = ", ".join(f"p[{system.inputs.index(x)}]" for x in used)
    scratch = ", ".join(f"numpy.empty({size[name]})" for name in names)
    lines += ["@numba.njit(cache=True)", "def _select(p):", f"    B = p[{system.inputs.index('B')}]",
              "    M = B.shape[0]", "    d = B.shape[1]", f"    return ({at}, {scratch})", "", ""]
    template = integrate.template_source()
    # the cut inputs and the buffers by position: numba inlines no call with *args
    args = ", ".join(f"p[{k}]" for k in range(len(used) + len(buffers)))
    out = []
    for line in template:
        line = line.replace("def rodas(y0, p, ", "def rodas(y0, p_all, ")
        if line == "    n = y0.size":   # the first statement of rodas: the inputs cut once
            out.append("    p = _select(p_all)")
        for fn in ("rhs", "observe", "jac"):
            line = re.sub(rf"(?<![\w.]){fn}\((\w+), \*p\)", rf"_{fn}_u(\1, {args})", line)
        out.append(line)
    if "    p = _select(p_all)" not in out:
        raise AssertionError("the integrator template changed: rodas has no line 'n = y0.size' to cut p before")
    return lines + out


# ----------------------------------------------------------------------------------------------------------------
# the backend table
# ----------------------------------------------------------------------------------------------------------------
@runtime_checkable
class Backend(Protocol):
    """A code-generation backend: ``source(system)`` is the text of a Python module defining ``rhs``, ``observe``
    and ``jac`` with the signatures of the module doc (and optionally ``rodas``, the compiled integrator of
    :mod:`featureode.ode.integrate`). ``name`` selects it (``[ode] backend``);
    ``version`` is part of the disk-cache key, so change it whenever the generated text would change."""

    name: str
    version: str

    def source(self, system: ode.System) -> str:
        """The generated module's text, without the header :func:`generate_source` adds."""
        ...


class NumPyBackend:
    """Vectorised NumPy: one broadcasting expression or ``einsum`` per assignment (see the module doc)."""

    name = "numpy"
    version = ""   # covered by CODEGEN_VERSION (this file)

    def source(self, system: ode.System) -> str:
        return "\n".join(_numpy_source(system))


class NumbaBackend:
    """numba loops, ``njit(cache=True)``, with the compiled Rodas integrator of :mod:`featureode.ode.integrate`."""

    name = "numba"
    version = ""   # covered by CODEGEN_VERSION (this file)

    def source(self, system: ode.System) -> str:
        return "\n".join(_numba_source(system))


def _check_backend(name: str, backend: object) -> None:
    if not isinstance(backend, Backend):
        raise CompileError(f"backend {name!r} must have a name, a version and a source(system) method "
                           f"(see featureode.ode.compile.Backend), got {type(backend).__name__}")
    if backend.name != name:
        raise CompileError(f"backend registered as {name!r} calls itself {backend.name!r}; use one name")


#: The code-generation backends by name (a :class:`~featureode.core.registry.Registry`), like SymPy's table of
#: printers: ``[ode] backend`` is checked against it when a config is loaded.
BACKENDS: Registry[Backend] = Registry("backend", CompileError, check=_check_backend)
BACKENDS.register("numpy", NumPyBackend())
BACKENDS.register("numba", NumbaBackend())


def register_backend(backend: Backend, replace: bool = False) -> Backend:
    """Add ``backend`` (an object with ``name``, ``version`` and ``source(system)``) to :data:`BACKENDS`."""
    _check_backend(getattr(backend, "name", "?"), backend)
    return BACKENDS.register(backend.name, backend, replace=replace)


# ----------------------------------------------------------------------------------------------------------------
# entry points
# ----------------------------------------------------------------------------------------------------------------
def generate_source(system: ode.System, backend: str = "numpy") -> str:
    """The module text for ``system`` (no caching)."""
    printer = BACKENDS.get(backend)
    backend = printer.name
    header = [f'"""Generated by featureode.ode.compile (version {CODEGEN_VERSION}, backend {backend}); do not edit.',
              "", f"System {system.key}: basis {system.basis}; terms {', '.join(t.name for t in system.terms)}"
              + (f"; removed {', '.join(system.removed)}" if system.removed else "")
              + (f"; replaced {', '.join(system.replaced)}" if system.replaced else ""), '"""']
    try:
        body = [printer.source(system)]
    except (ode.AssemblyError, IndexedExpressionError):
        raise
    except (ValueError, NotImplementedError) as exc:  # what SymPy's code printers raise for what they cannot print
        first = (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(".")
        user_terms = system.replaced or any(t.name not in _BUILTIN_TERMS for t in system.terms)
        hint = ("; a replaced or custom term probably uses a function whose derivative SymPy leaves unevaluated "
                "(e.g. Abs or sign of an expression not known to be real): write it with Min, Max, sqrt(x**2) or "
                "Piecewise instead") if user_terms else ""
        raise CompileError(f"cannot generate {backend} code for the system of terms "
                           f"{', '.join(t.name for t in system.terms)}: {first}{hint}") from exc
    return "\n".join(header + body).rstrip() + "\n"


def _key(system: ode.System, backend: str) -> str:
    """The cache key of ``system``'s ``backend`` module."""
    version = BACKENDS.get(backend).version
    return hashlib.sha256(f"{CODEGEN_VERSION}|{backend}|{version}|{system.key}".encode()).hexdigest()[:24]


@functools.lru_cache(maxsize=1)
def _numba_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba")
    except PackageNotFoundError:
        return "none"


_STAMPS: dict[tuple[str, str], Path] = {}   # (module key, FEATUREODE_CACHE_DIR) -> ready stamp


def _ready_stamp(system: ode.System) -> Path:
    """The file that says the numba machine code of ``system``'s integrator is in numba's cache (written after its
    first compiled run, per numba version); its path kept per module key and cache folder setting (a solve asks
    three times)."""
    from featureode.core.cache import cache_dir

    where = (_key(system, "numba"), os.environ.get("FEATUREODE_CACHE_DIR", ""))
    stamp = _STAMPS.get(where)
    if stamp is None:
        stamp = _STAMPS[where] = cache_dir() / f"numba_{where[0]}.ready-{_numba_version()}"
    return stamp


_READY: set[str] = set()


def numba_ready(system: ode.System) -> bool:
    """Is the compiled RODAS4 integrator of ``system`` in the cache (so loading it takes ≈ 0.2 s, not a compile of
    ≈ 10 s)? Checked without importing numba (on disk once per process and cache folder, when it is)."""
    stamp = _ready_stamp(system)
    if str(stamp) not in _READY and stamp.exists():
        _READY.add(str(stamp))
    return str(stamp) in _READY


_ANNOUNCED: set[str] = set()


def announce_compile(system: ode.System, what: str) -> None:
    """Say once per process, on stderr, that ``system``'s numba code is being compiled (and where it is kept), unless
    it is already in the cache."""
    from featureode.core.cache import cache_dir

    key = _key(system, "numba")
    if key in _ANNOUNCED or numba_ready(system):
        return
    _ANNOUNCED.add(key)
    print(f"featureode: compiling {what} with numba (≈ 10 s, once; cached in {cache_dir()})", file=sys.stderr,
          flush=True)


def mark_numba_ready(system: ode.System) -> None:
    """Record that ``system``'s compiled integrator has run (its machine code is now in numba's cache)."""
    if not numba_ready(system):
        stamp = _ready_stamp(system)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text("")
        _READY.add(str(stamp))


_LOADED: dict[tuple[str, str], Compiled] = {}


def compile_system(system: ode.System, backend: str = "numpy") -> Compiled:
    """Compiled ``rhs``/``observe``/``jac`` for ``system``: from this process, else from the disk cache, else
    generated and written there. numba itself is imported only by the generated numba module."""
    printer = BACKENDS.get(backend)
    backend = printer.name
    key = _key(system, backend)
    if (backend, key) in _LOADED:
        return _LOADED[(backend, key)]
    start = time.perf_counter()
    path, from_cache = cached_text(f"{backend}_{key}.py", lambda: generate_source(system, backend))
    modname = f"featureode_generated_{backend}_{key}"
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[modname]
        raise CompileError(f"backend {backend!r} needs a package that is not installed: {exc}") from None
    compiled = Compiled(backend, key, path, from_cache, time.perf_counter() - start,
                        module.rhs, module.observe, module.jac, getattr(module, "rodas", None))
    _LOADED[(backend, key)] = compiled
    return compiled
