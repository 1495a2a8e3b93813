"""Variants and ablation as data (theory §4): a variant is a closure + options + removed/replaced terms.

- Closures are named entries of a registry (:func:`closure_names`): ``lazy`` (``r_i = 1``), ``agop``,
  ``displacement`` (direction laws for ``r_i``), ``second_order``, ``resummed`` and ``rational`` (eigenvalue laws
  for ``ρ_β``);
  :func:`register_closure` adds one from a SymPy expression (or a string) for ``r_i``.
- Terms are named (:func:`term_names`); ``Variant(..., ablate=[name])`` removes a term (its neutral value takes its
  place) and ``Variant(..., replace={name: expr})`` swaps its body — e.g. a new eigenvalue law
  ``replace={"eigen_growth": "prod_i(r[i]**(2*B[b,i]))"}``.
- :func:`variants_from_config` reads the ``[ode]`` table: ``variants`` (closure names or names of
  ``[ode.custom.NAME]`` tables), ``kappa``/``scale`` defaults, ``ablate`` (applied to every listed variant that has
  the term), and custom tables with keys ``closure`` (a name or an expression for ``r_i``), ``kappa``, ``scale``,
  ``ablate``, ``replace`` (table term → expression), ``params`` (table name → number), ``doc``, ``spread``; a
  built-in closure name with the suffix ``+spread`` (``"lazy+spread"``) is that closure's spread-aware flow.

User expressions use the names of :data:`featureode.ode.terms.NAMESPACE` (``f[b]``, ``D[b]``, ``B[b,i]``, ``g[i]``,
``gpow[b]``, ``c[b]``, ``r[i]``, ``gamma``, ``kappa``, ``sum_b(...)``, ``prod_i(...)``, …) plus declared params.
"""
from __future__ import annotations

import dataclasses
import keyword
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import sympy as sp
from sympy.core.function import AppliedUndef

from featureode.core.errors import FeatureODEError
from featureode.core.registry import Registry
from featureode.ode import terms as ode
from featureode.ode.indexed import IndexedExpressionError, free_indices

if TYPE_CHECKING:  # type-only imports (these modules sit above this layer or are heavy)
    from featureode.config import ODEConfig


#: The reference variant: the one the report's figure panels show by default and the built-in config solves
#: (``featureode/defaults/default.toml``). ``meanfield+whole`` since this release (the infinite-width flow driven by
#: the whole residual on the target's directions; not a closure: the combined score that decided it is in
#: ``docs/validation/whole_residual.md``); before it the closures ``rational`` (the fastest closure that holds, still
#: in the built-in config), ``second_order`` and ``displacement``.
REFERENCE = "meanfield+whole"


class VariantError(FeatureODEError, ValueError):
    """An unknown closure/term name, or a custom expression that cannot be used; the message lists valid names."""


@dataclass(frozen=True)
class Closure:
    """A closure for ``r_i``: its term (``None`` for ``lazy``), default values of its own parameters, a docstring."""

    name: str
    term: ode.Term | None
    params: Mapping[str, float] = field(default_factory=dict)
    doc: str = ""


#: The closures by name (a :class:`~featureode.core.registry.Registry`; built-in first, then user ones). Add one
#: with :func:`register_closure`; the name then works in ``[ode] variants`` and ``Variant(name)``.
CLOSURES: Registry[Closure] = Registry("closure", VariantError)
for _c in (Closure("lazy", None, doc="r_i = 1: the pure kernel regime"),
           Closure("agop", ode.AGOP_GROWTH, doc=ode.AGOP_GROWTH.doc),
           Closure("displacement", ode.DISPLACEMENT_GROWTH, doc=ode.DISPLACEMENT_GROWTH.doc),
           Closure("second_order", ode.SECOND_ORDER_GROWTH, doc=ode.SECOND_ORDER_GROWTH.doc),
           Closure("resummed", ode.RESUMMED_GROWTH, doc=ode.RESUMMED_GROWTH.doc),
           Closure("rational", ode.RATIONAL_GROWTH, doc=ode.RATIONAL_GROWTH.doc)):
    CLOSURES.register(_c.name, _c)
del _c
_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_RESERVED = {"y", "j", "numpy", "math", "numba", "out"}   # names used by the generated code


def closure_names() -> list[str]:
    """Names of the registered closures (built-in first, then user ones)."""
    return CLOSURES.names()


def term_names() -> list[str]:
    """Every known term name: the core terms and each registered closure's term."""
    return ([t.name for t in ode.CORE_TERMS] + [ode.SPREAD.name]
            + [c.term.name for c in CLOSURES.values() if c.term is not None])


def get_closure(name: str) -> Closure:
    """The registered closure ``name``; raises :class:`VariantError` listing the valid names."""
    return CLOSURES.get(name)


# ----------------------------------------------------------------------------------------------------------------
# user expressions
# ----------------------------------------------------------------------------------------------------------------
def _available(ns: Mapping[str, Any]) -> str:
    return ", ".join(sorted(ns))


def parse_expression(expr: "str | sp.Expr", params: Iterable[str] = (), where: str = "expression") -> sp.Expr:
    """A user expression in the ODE's symbols: parse a string, or check a SymPy expression.

    Raises :class:`VariantError` naming any undefined symbol or function (declare constants as ``params``), any
    indexed object written without indices, and any sum/product that is not over a full index range.
    """
    params = tuple(params)
    for p in params:
        if not _IDENT.match(p) or keyword.iskeyword(p) or p in ode.NAMESPACE or p in _RESERVED:
            raise VariantError(f"{where}: parameter name {p!r} must be an identifier not among the built-in names "
                               f"{', '.join(sorted(ode.NAMESPACE))}")
    ns = {**ode.NAMESPACE, **{p: sp.Symbol(p) for p in params}}
    if isinstance(expr, str):
        names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr))
        undefined = sorted(n for n in names if n not in ns and not callable(getattr(sp, n, None))
                           and not isinstance(getattr(sp, n, None), sp.Basic))
        if undefined:
            raise VariantError(f"{where} uses undefined symbols: {', '.join(undefined)}; available: "
                               f"{_available(ns)} (declare other constants as params)")
        try:
            out = sp.sympify(expr.replace("^", "**"), locals=ns)
        except (sp.SympifyError, SyntaxError, TypeError, ValueError) as exc:
            raise VariantError(f"{where}: cannot parse {expr!r}: {exc}") from None
    else:
        out = sp.sympify(expr)
    canonical: dict[str, sp.Basic] = {}
    for x in ns.values():
        if isinstance(x, sp.IndexedBase):
            canonical[str(x.label)] = x.label
        elif isinstance(x, sp.Symbol):
            canonical[str(x)] = x
    unknown = sorted({str(x) for x in out.atoms(sp.Symbol)} - set(canonical))
    unknown += sorted({type(x).__name__ + "(…)" for x in out.atoms(AppliedUndef)})
    if unknown:
        raise VariantError(f"{where} uses undefined symbols: {', '.join(unknown)}; available: "
                           f"{_available(ns)} (declare other constants as params)")
    out = out.xreplace({x: canonical[str(x)] for x in out.atoms(sp.Symbol)})
    bases = {x.base for x in out.atoms(sp.Indexed)}
    bare = sorted(str(x) for x in out.atoms(sp.IndexedBase) if x not in bases)
    if bare:
        raise VariantError(f"{where}: {', '.join(bare)} must be written with indices, e.g. {bare[0]}[b]")
    try:
        free_indices(out, ode.index_space())
    except IndexedExpressionError as exc:
        raise VariantError(f"{where}: {exc}") from None
    return out


def make_closure(name: str, r_expr: "str | sp.Expr", params: Mapping[str, float] | None = None,
                 doc: str = "") -> Closure:
    """A closure from an expression for ``r_i`` (free index ``i`` at most); its term is named ``<name>_growth``."""
    if not _IDENT.match(name):
        raise VariantError(f"closure name {name!r} must be an identifier")
    params = {k: float(val) for k, val in (params or {}).items()}
    expr = parse_expression(r_expr, params, where=f"closure {name!r}")
    stray = free_indices(expr, ode.index_space()) - {ode.i}
    if stray:
        raise VariantError(f"closure {name!r}: r_i may depend on the direction index i only; free indices "
                           f"{sorted(map(str, stray))} must be summed (sum_b(...))")
    term = ode.Term(f"{name}_growth", expr, (ode.i,), sp.Integer(1), doc or f"user closure {name}")
    return Closure(name, term, params, doc or f"user closure {name}")


def register_closure(name: str, r_expr: "str | sp.Expr", params: Mapping[str, float] | None = None,
                     doc: str = "") -> Closure:
    """Make a closure (see :func:`make_closure`) and add it to the registry, so ``Variant(name)`` and config files
    can use it. Registering the same name again with the same expression is a no-op; a different one is an error."""
    closure = make_closure(name, r_expr, params, doc)
    assert closure.term is not None  # make_closure always builds a term
    old = CLOSURES.get(name) if name in CLOSURES.names() else None
    if old is not None and (old.term is None or old.term.body != closure.term.body):
        raise VariantError(f"closure {name!r} is already registered with a different expression")
    if old is None and closure.term.name in term_names():
        raise VariantError(f"closure {name!r} would define term {closure.term.name!r}, which already exists")
    return CLOSURES.register(name, closure, replace=old is not None)


# ----------------------------------------------------------------------------------------------------------------
# variants
# ----------------------------------------------------------------------------------------------------------------
def _number(value: Any) -> float:
    """``value`` as a float; NaN for what is not a number (``True`` included), so one finiteness test refuses it."""
    if isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class Variant:
    """One member of the ODE family: closure (a registered name or a :class:`Closure`) + options + ablations.

    ``kappa``: AGOP constant (``None``: the derived ``γ² c_1/Λ_1²``); ``scale``: include the ``⟨a²⟩`` factor;
    ``ablate``: term names removed; ``replace``: ``{term name: expression}``; ``params``: values of user
    constants (override a closure's defaults); ``name``: label in outputs (default built from the above);
    ``spread``: the spread-aware flow (:data:`featureode.ode.terms.SPREAD`) with the init spread at width
    ``spread_width`` (``None``: the caller's config width, or infinite width without one).
    """

    closure: "str | Closure" = "lazy"
    kappa: float | None = None
    scale: bool = False
    ablate: Sequence[str] = ()  # any sequence of names (or one name); kept as a tuple
    replace: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)
    name: str | None = None
    spread: bool = False
    spread_width: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.closure, Closure):
            get_closure(self.closure)
        # one term name given as text is that name (tuple("eigen_growth") would be its characters)
        ablate = (self.ablate,) if isinstance(self.ablate, str) else self.ablate
        try:
            object.__setattr__(self, "ablate", tuple(ablate))
            object.__setattr__(self, "replace", dict(self.replace))
            params = dict(self.params)
        except (TypeError, ValueError):
            raise VariantError(f"ablate must be a list of term names, replace and params tables; got "
                               f"ablate={self.ablate!r}, replace={self.replace!r}, params={self.params!r}") from None
        checked = {}
        for k, val in params.items():
            x = _number(val)
            if not math.isfinite(x):
                raise VariantError(f"closure parameter {k!r} = {val!r} must be a finite number")
            checked[k] = x
        object.__setattr__(self, "params", checked)
        if self.kappa is not None:   # as the config's [ode] kappa rule
            kappa = _number(self.kappa)
            if not (math.isfinite(kappa) and kappa >= 0):
                raise VariantError(f"kappa = {self.kappa!r} must be a finite number ≥ 0 (the AGOP constant κ; leave "
                                   "it None to derive κ = γ² c_1/Λ_1²)")
            object.__setattr__(self, "kappa", kappa)
        known = term_names() + [t.name for t in [self.closure_obj.term] if t is not None]
        for what, names in (("ablate", self.ablate), ("replace", list(self.replace))):
            bad = [n for n in names if n not in known]
            if bad:
                raise VariantError(f"{what}: unknown term {', '.join(map(repr, bad))}; valid terms: "
                                   f"{', '.join(dict.fromkeys(known))}")

    @property
    def closure_obj(self) -> Closure:
        """The :class:`Closure` (looked up when given by name)."""
        return self.closure if isinstance(self.closure, Closure) else get_closure(self.closure)

    @property
    def label(self) -> str:
        """Name in outputs: ``name``, else closure + ``+scale`` + ``-no-TERM`` + ``-TERM-replaced``."""
        if self.name:
            return self.name
        out = self.closure_obj.name + ("+scale" if self.scale else "") + ("+spread" if self.spread else "")
        out += "".join(f"-no-{t}" for t in self.ablate)
        return out + "".join(f"-{t}-replaced" for t in self.replace)

    @property
    def param_values(self) -> dict[str, float]:
        """Closure parameter defaults overridden by the variant's ``params``."""
        return {**self.closure_obj.params, **self.params}

    def term_names(self, basis: str = "target") -> list[str]:
        """Terms present in this variant's system for ``basis``."""
        closure = self.closure_obj.term
        out = [closure.name] if closure is not None else []
        out += ["scale"] if self.scale else []
        out += [] if closure is not None and ode.is_eigen_law(closure) else ["eigen_growth"]
        out += ["spread"] if self.spread else []
        out += ["kernel_flow"] + (["mode_coupling"] if basis == "extended" else [])
        return out + ["residual_integral"]

    def system(self, basis: str = "target") -> ode.System:
        """The resolved system of this variant in ``basis`` ("target" or "extended")."""
        present = self.term_names(basis)
        for what, names in (("ablate", self.ablate), ("replace", list(self.replace))):
            missing = [n for n in names if n not in present]
            if missing:
                raise VariantError(f"variant {self.label!r} ({basis} basis) has no term "
                                   f"{', '.join(map(repr, missing))} to {what}; its terms: {', '.join(present)}")
        params = self.param_values
        replaced = {n: parse_expression(e, params, where=f"variant {self.label!r}: replacement of {n!r}")
                    for n, e in self.replace.items()}
        try:
            return ode.build_system(self.closure_obj.term, scale=self.scale, basis=basis, removed=self.ablate,
                                    replaced=replaced, params=params, spread=self.spread)
        except ode.AssemblyError as exc:
            raise VariantError(f"variant {self.label!r}: {exc}") from None


_TABLE_KEYS = ("closure", "kappa", "scale", "ablate", "replace", "params", "doc", "spread")


def _variant_from_table(name: str, table: Mapping[str, Any], kappa: float | None, scale: bool) -> Variant:
    bad = [k for k in table if k not in _TABLE_KEYS]
    if bad:
        raise VariantError(f"[ode.custom.{name}]: unknown key(s) {', '.join(bad)}; valid keys: "
                           f"{', '.join(_TABLE_KEYS)}")
    params = dict(table.get("params", {}))
    closure: "str | Closure" = table.get("closure", name)
    if not isinstance(closure, str):
        raise VariantError(f"[ode.custom.{name}] closure must be a closure name or an expression string")
    if closure not in CLOSURES:
        if _IDENT.match(closure):
            raise VariantError(f"[ode.custom.{name}]: {CLOSURES.unknown_message(closure)} (or give an expression "
                               f"for r_i)")
        closure = make_closure(name, closure, params, table.get("doc", ""))
    return Variant(closure, kappa=table.get("kappa", kappa), scale=bool(table.get("scale", scale)),
                   ablate=tuple(table.get("ablate", ())), replace=dict(table.get("replace", {})), params=params,
                   name=name, spread=bool(table.get("spread", False)))


#: Suffix of a built-in closure name that asks for its spread-aware flow (``"lazy+spread"``, ``"second_order+spread"``).
SPREAD_SUFFIX = "+spread"

#: The variant name of :func:`featureode.ode.replay.replay` (driven by measurements; not an ODE closure).
REPLAY = "replay"

#: The variant name of :func:`featureode.ode.meanfield.meanfield_trajectory` (the reduced per-neuron mean-field
#: flow; parameter-free, but not a closure: :func:`featureode.ode.solve.solve_config` runs it in its place).
MEANFIELD = "meanfield"
#: ``meanfield`` whose loss adds the modes in the target's directions that the basis leaves out
#: (:meth:`featureode.ode.meanfield.ReducedFlow.tail_loss`): the infinite-width test loss up to modes outside T.
MEANFIELD_TAIL = MEANFIELD + "+tail"
#: ``meanfield+tail`` whose neurons are driven by the whole residual ``y − P_T f`` on the target's directions, every
#: degree included, as the gradient flow of the loss drives them, instead of by the basis' modes only
#: (``ReducedFlow(drive="whole")``).
MEANFIELD_WHOLE = MEANFIELD + "+whole"
#: The names :func:`featureode.ode.solve.solve_config` runs as the mean-field flow.
MEANFIELD_NAMES = (MEANFIELD, MEANFIELD_TAIL, MEANFIELD_WHOLE)


def meanfield_checkpoint_name(name: str) -> str:
    """The file of a run folder in which :func:`featureode.ode.solve.solve_config` keeps the place of the mean-field
    variant ``name`` while it runs (``checkpoint_meanfield_whole.npz``; :meth:`ReducedFlow.run`'s checkpoint, removed
    when the run ends): the same command on the same folder goes on from it."""
    return f"checkpoint_{name.replace('+', '_')}.npz"


#: The checkpoint files of :data:`MEANFIELD_NAMES` in a run folder (:func:`meanfield_checkpoint_name`).
MEANFIELD_CHECKPOINTS = tuple(meanfield_checkpoint_name(n) for n in MEANFIELD_NAMES)


def variants_from_config(cfg: ODEConfig, allow_replay: bool = False) -> list[Variant]:
    """The variants of an ``[ode]`` config table (:class:`featureode.config.ODEConfig`), in the listed order.

    ``replay`` (:data:`REPLAY`) is not an ODE variant: it needs a simulation. With ``allow_replay`` (a caller that
    has one, e.g. compare, and adds :func:`featureode.ode.replay.replay_run`) it is skipped; otherwise it is an error.
    ``meanfield``, ``meanfield+tail`` and ``meanfield+whole`` (:data:`MEANFIELD_NAMES`) are not closures either:
    they are skipped here, and :func:`featureode.ode.solve.solve_config` follows them (:mod:`featureode.ode.meanfield`);
    they take no ablation."""
    custom = dict(cfg.custom or {})
    out = []
    for name in cfg.variants:
        if name in MEANFIELD_NAMES and name not in custom:
            continue
        if name == REPLAY and name not in custom:
            if allow_replay:
                continue
            raise VariantError("[ode] variants: 'replay' drives the kernel flow with the measured λ_β(t) of a "
                               "simulation, so only compare can compute it (featureode.ode.replay.replay_run on the "
                               "run folder); remove it from the variants given to solve (derive and compare accept it)")
        if name in custom:
            if not isinstance(custom[name], Mapping):
                raise VariantError(f"[ode.custom.{name}] must be a table")
            out.append(_variant_from_table(name, custom[name], cfg.kappa, cfg.scale))
        elif name in CLOSURES:
            out.append(Variant(name, kappa=cfg.kappa, scale=cfg.scale))
        elif name.endswith(SPREAD_SUFFIX) and name[:-len(SPREAD_SUFFIX)] in CLOSURES:
            out.append(Variant(name[:-len(SPREAD_SUFFIX)], kappa=cfg.kappa, scale=cfg.scale, spread=True))
        else:
            raise VariantError(f"[ode] variants: unknown variant {name!r}; valid: built-in closures "
                               f"{', '.join(closure_names())} (each also as NAME{SPREAD_SUFFIX}), {MEANFIELD}, "
                               f"{MEANFIELD_TAIL}, {MEANFIELD_WHOLE}"
                               + (f" or custom tables {', '.join(custom)}" if custom else ""))
    unused = [n for n in custom if n not in cfg.variants]
    if unused:
        raise VariantError(f"[ode.custom] tables {', '.join(unused)} are not listed in [ode] variants")
    ablate = list(cfg.ablate or [])
    for term in ablate:
        if term not in term_names() + [t for v in out for t in v.term_names(cfg.basis)]:
            raise VariantError(f"[ode] ablate: unknown term {term!r}; valid terms: {', '.join(term_names())}")
        if not any(term in v.term_names(cfg.basis) for v in out):
            raise VariantError(f"[ode] ablate: no listed variant has term {term!r} ({cfg.basis} basis)")
    return [dataclasses.replace(
        v, ablate=tuple(v.ablate) + tuple(t for t in ablate if t in v.term_names(cfg.basis) and t not in v.ablate),
        name=(v.name + "".join(f"-no-{t}" for t in ablate if t in v.term_names(cfg.basis))) if v.name else None)
        for v in out]
