"""Calculus on indexed SymPy expressions: the machinery under the feature ODE's two renderings (theory §4).

An *indexed* expression is built from ``Indexed`` objects (``f[β]``, ``β_i`` …), plain symbols, and full-range
``Sum``/``Product`` over an index (``Σ_{β∈B}``, ``Π_{i=0}^{d-1}``). Every index symbol has a *kind* with an extent
(mode indices run over ``0…M-1``, direction indices over ``0…d-1``); an :class:`IndexSpace` records them.

This module knows nothing about the ODE itself. It provides
- :func:`free_indices` / :func:`axes` — which index symbols an expression depends on;
- :func:`rename_shadowed` — renames bound indices that collide with indices free outside;
- :func:`expand` — the expanded rendering: every index replaced by a concrete value, sums written out;
- :func:`differentiate` — the indexed derivative ``∂E/∂X[j]`` of an expression with respect to one component of an
  indexed state ``X``, with the chain rule through named intermediates and Kronecker deltas summed out, so that
  the exact Jacobian stays in indexed (vectorisable) form.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import sympy as sp
from sympy.core.function import AppliedUndef

from featureode.core.errors import FeatureODEError


class IndexedExpressionError(FeatureODEError, ValueError):
    """An indexed expression outside the supported subset (partial-range sums, repeated indices, …)."""


@dataclass
class IndexSpace:
    """Index symbols by kind: ``kinds[idx] = kind`` and ``extent[kind] = size symbol`` (e.g. ``mode → M``)."""

    extent: dict[str, sp.Symbol]
    kinds: dict[sp.Symbol, str] = field(default_factory=dict)

    def add(self, idx: sp.Symbol, kind: str) -> sp.Symbol:
        """Declare ``idx`` as an index of ``kind``; returns it."""
        if kind not in self.extent:
            raise IndexedExpressionError(f"unknown index kind {kind!r}; kinds: {sorted(self.extent)}")
        self.kinds[idx] = kind
        return idx

    def size(self, idx: sp.Symbol) -> sp.Symbol:
        """The extent symbol of ``idx``'s kind (``M`` or ``d``)."""
        return self.extent[self.kinds[idx]]

    def fresh(self, like: sp.Symbol, avoid: set) -> sp.Symbol:
        """A new index of the same kind as ``like``, named ``like`` + a number not used in ``avoid``."""
        names = {str(s) for s in avoid} | {str(s) for s in self.kinds}
        n = 1
        while f"{like}{n}" in names:
            n += 1
        return self.add(sp.Symbol(f"{like}{n}", integer=True), self.kinds[like])

    def full_range(self, idx: sp.Symbol) -> tuple:
        """SymPy limits ``(idx, 0, size − 1)`` of a full-range Sum/Product."""
        return (idx, 0, self.size(idx) - 1)

    def check_limits(self, node: sp.Expr) -> sp.Symbol:
        """The index of a full-range ``Sum``/``Product``; raises for anything else."""
        if len(node.limits) != 1:
            raise IndexedExpressionError(f"{node}: write one index per Sum/Product (nest them)")
        idx, lo, hi = node.limits[0]
        if idx not in self.kinds:
            raise IndexedExpressionError(f"{node}: {idx} is not an index; indices: {sorted(map(str, self.kinds))}")
        # limits are linear in the extents (M, d): expand decides them (and, unlike simplify, needs no import of
        # sympy.physics, which costs 0.4 s in a fresh process)
        if sp.expand(lo) != 0 or sp.expand(hi - self.size(idx) + 1) != 0:
            raise IndexedExpressionError(f"{node}: only full ranges ({idx}, 0, {self.size(idx) - 1}) are supported")
        return idx


def _indexed_indices(node: sp.Indexed, space: IndexSpace) -> list[sp.Symbol]:
    out = []
    for k in node.indices:
        if k not in space.kinds:
            raise IndexedExpressionError(f"{node}: index {k} must be one of the index symbols "
                                         f"{sorted(map(str, space.kinds))}")
        out.append(k)
    if len(set(out)) != len(out):
        raise IndexedExpressionError(f"{node}: an index may appear once per object (no diagonals)")
    return out


def axes(expr: sp.Expr, space: IndexSpace, temps: Mapping[sp.Symbol, frozenset] | None = None) -> frozenset:
    """Index symbols ``expr`` depends on (free indices; ``temps`` gives those of temporaries from CSE)."""
    temps = temps or {}
    if isinstance(expr, sp.Indexed):
        return frozenset(_indexed_indices(expr, space))
    if isinstance(expr, (sp.Sum, sp.Product)):
        return axes(expr.function, space, temps) - {space.check_limits(expr)}
    if isinstance(expr, sp.Symbol):
        if expr in space.kinds:
            return frozenset({expr})
        return temps.get(expr, frozenset())
    if isinstance(expr, sp.IndexedBase):
        raise IndexedExpressionError(f"{expr} is an indexed object; write it with its indices, e.g. {expr}[...]")
    out: frozenset = frozenset()
    for a in expr.args:
        if isinstance(a, sp.Basic):
            out |= axes(a, space, temps)
    return out


def free_indices(expr: sp.Expr, space: IndexSpace) -> frozenset:
    """Free index symbols of ``expr`` (indices not bound by a Sum/Product)."""
    return axes(expr, space)


def rename_shadowed(expr: sp.Expr, space: IndexSpace, outer: frozenset = frozenset()) -> sp.Expr:
    """Rename every bound index that is also in use outside its Sum/Product (``outer``) to a fresh index."""
    if isinstance(expr, (sp.Sum, sp.Product)):
        idx = space.check_limits(expr)
        body = expr.function
        if idx in outer:
            new = space.fresh(idx, set(outer) | expr.free_symbols | {idx})
            body = body.xreplace({idx: new})
            idx = new
        body = rename_shadowed(body, space, outer | {idx})
        return expr.func(body, space.full_range(idx))
    if not expr.args or isinstance(expr, sp.Indexed):
        return expr
    return expr.func(*[rename_shadowed(a, space, outer) for a in expr.args])


# ----------------------------------------------------------------------------------------------------------------
# expanded rendering
# ----------------------------------------------------------------------------------------------------------------
def expand(expr: sp.Expr, space: IndexSpace, sizes: Mapping[str, int], env: Mapping[sp.Symbol, int],
           lookup: Callable[[sp.Expr, tuple[int, ...]], sp.Expr]) -> sp.Expr:
    """Write ``expr`` out for concrete index values.

    ``sizes[kind]`` are the extents (e.g. ``{"mode": 3, "direction": 4}``), ``env`` the values of the free indices,
    and ``lookup(base, values)`` returns the expression standing for ``base[values]`` (``values = ()`` for a plain
    non-index symbol, which ``lookup`` may return unchanged). Sums become ``Add``, products ``Mul``.
    """
    if isinstance(expr, sp.Indexed):
        return lookup(expr.base, tuple(env[k] for k in _indexed_indices(expr, space)))
    if isinstance(expr, (sp.Sum, sp.Product)):
        idx = space.check_limits(expr)
        op = sp.Add if isinstance(expr, sp.Sum) else sp.Mul
        return op(*[expand(expr.function, space, sizes, {**env, idx: n}, lookup)
                    for n in range(sizes[space.kinds[idx]])])
    if isinstance(expr, sp.Symbol):
        return sp.Integer(env[expr]) if expr in space.kinds else lookup(expr, ())
    if isinstance(expr, sp.KroneckerDelta):
        a, b = (expand(x, space, sizes, env, lookup) for x in expr.args)
        return sp.Integer(int(a == b))
    if not expr.args:
        return expr
    return expr.func(*[expand(a, space, sizes, env, lookup) for a in expr.args])


# ----------------------------------------------------------------------------------------------------------------
# indexed derivative
# ----------------------------------------------------------------------------------------------------------------
def _product_terms(expr: sp.Expr) -> list[sp.Expr]:
    """``expr`` as a list of products, distributing only the sums that contain a Kronecker delta."""
    if expr.is_Add:
        return [t for a in expr.args for t in _product_terms(a)]
    if expr.is_Mul:
        out = [sp.Integer(1)]
        for factor in expr.args:
            parts = _product_terms(factor) if factor.is_Add and factor.has(sp.KroneckerDelta) else [factor]
            out = [o * p for o in out for p in parts]
        return out
    return [expr]


def sum_out(body: sp.Expr, idx: sp.Symbol, space: IndexSpace) -> sp.Expr:
    """``Σ_idx body`` with every term carrying a factor ``δ(idx, k)`` summed out (``idx → k``)."""
    out = []
    for term in _product_terms(body):
        delta = next((fac for fac in sp.Mul.make_args(term)
                      if isinstance(fac, sp.KroneckerDelta) and idx in fac.args), None)
        if delta is None:
            out.append(sp.Sum(term, space.full_range(idx)) if term != 0 else sp.Integer(0))
            continue
        other = delta.args[1] if delta.args[0] == idx else delta.args[0]
        rest = rename_shadowed(term / delta, space, frozenset({other}))
        out.append(rest.xreplace({idx: other}))
    return sp.Add(*out)


@dataclass(frozen=True)
class DerivativeContext:
    """What :func:`differentiate` needs: the state base ``X`` and column index ``j`` (``∂/∂X[j]``), and for every
    intermediate (an ``IndexedBase`` or plain ``Symbol`` computed earlier) the object holding its own derivative
    ``∂z[k]/∂X[j]`` as ``jac[z][k, j]`` (``None`` when it is identically zero)."""

    state: sp.IndexedBase
    column: sp.Symbol
    jac: Mapping[sp.Basic, "sp.IndexedBase | None"]
    space: IndexSpace


def differentiate(expr: sp.Expr, ctx: DerivativeContext) -> sp.Expr:
    """Indexed derivative ``∂expr/∂X[j]``.

    Rules: ``∂X[k]/∂X[j] = δ(k, j)``; an intermediate ``z[k]`` gives ``J_z[k, j]``; other indexed objects and symbols
    are constants; ``∂Σ_k F = Σ_k ∂F`` with deltas summed out; ``∂Π_k F = (Π_k F) Σ_k ∂ log F`` (valid where
    ``F ≠ 0``, as for ``Π_i r_i^{β_i}`` with ``r_i > 0``); any other node by the chain rule over its maximal
    indexed/sum/product/symbol sub-nodes, differentiated by SymPy.
    """
    if isinstance(expr, sp.Indexed):
        if expr.base == ctx.state:
            return sp.KroneckerDelta(expr.indices[0], ctx.column)
        jac = ctx.jac.get(expr.base)
        return jac[(*expr.indices, ctx.column)] if jac is not None else sp.Integer(0)
    if isinstance(expr, sp.Symbol):
        jac = ctx.jac.get(expr)
        return jac[ctx.column] if jac is not None else sp.Integer(0)
    if isinstance(expr, sp.Sum):
        idx = ctx.space.check_limits(expr)
        inner = differentiate(expr.function, ctx)
        return sum_out(inner, idx, ctx.space) if inner != 0 else sp.Integer(0)
    if isinstance(expr, sp.Product):
        idx = ctx.space.check_limits(expr)
        inner = differentiate(sp.expand_log(sp.log(expr.function), force=True), ctx)
        return expr * sum_out(inner, idx, ctx.space) if inner != 0 else sp.Integer(0)
    if not expr.args or isinstance(expr, (sp.KroneckerDelta, AppliedUndef)):
        return sp.Integer(0)
    atoms: dict[sp.Expr, sp.Dummy] = {}

    def collect(node: sp.Basic) -> None:
        if isinstance(node, (sp.Indexed, sp.Sum, sp.Product, sp.Symbol)):
            atoms.setdefault(node, sp.Dummy())
        else:
            for a in node.args:
                collect(a)

    collect(expr)
    flat = expr.xreplace(atoms)
    back = {dummy: node for node, dummy in atoms.items()}
    out = []
    for node, dummy in atoms.items():
        inner = differentiate(node, ctx)
        if inner != 0:
            out.append(sp.diff(flat, dummy).xreplace(back) * inner)
    return sp.Add(*out)
