"""Floating-point forms of the activations' SymPy expressions: ``(1 + e^v)^{-n} → logistic(-v)^n`` and
``log(1 + e^v) → softplus(v)`` (``_stable``), and the NumPy and torch namespaces ``sympy.lambdify`` prints them into
(``_numpy_namespace``, ``_torch_namespace``: no overflow, and no NaN gradients in float32). Used by
:class:`~featureode.calculus.activation_calculus.Activation` and :mod:`featureode.kernel.spread`.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp

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
    overflow-free floating-point evaluation (the symbols ``_logistic``/``_softplus`` map to stable numerics); then
    ``logistic(w)^n e^{−m w} → logistic(−w)^m logistic(w)^{n−m}`` (``1 ≤ m ≤ n``), so that the derivatives of
    softplus and silu, whose terms pair ``logistic(−u)^n`` with ``e^{nu}``, do not overflow to ``inf · 0`` at large
    ``|u|``."""
    expr = expr.replace(lambda e: isinstance(e, sp.log) and _one_plus_exp(e.args[0]) is not None,
                        lambda e: _SOFTPLUS(_one_plus_exp(e.args[0])))
    expr = expr.replace(
        lambda e: e.is_Pow and e.exp.is_Integer and e.exp < 0 and _one_plus_exp(e.base) is not None,
        lambda e: _LOGISTIC(-_one_plus_exp(e.base)) ** (-e.exp))  # type: ignore[operator]  # the query above ensures it is not None
    return expr.replace(lambda e: e.is_Mul and e.has(_LOGISTIC) and e.has(sp.exp), _cancel_exponentials)


def _cancel_exponentials(term: sp.Expr) -> sp.Expr:
    """One product with every ``logistic(w)^n e^{−m w}`` (``1 ≤ m ≤ n``) as ``logistic(−w)^m logistic(w)^{n−m}``
    (``logistic(w) e^{−w} = logistic(−w)``)."""
    factors = list(term.args)
    changed = True
    while changed:
        changed = False
        for i, f in enumerate(factors):
            if not isinstance(f, sp.exp):
                continue
            for j, g in enumerate(factors):
                base, n = (g.base, g.exp) if g.is_Pow else (g, sp.S.One)
                if not (isinstance(base, _LOGISTIC) and n.is_Integer and n > 0):
                    continue
                w = base.args[0]
                m = sp.cancel(-f.args[0] / w)
                if m.is_Integer and 1 <= m <= n:
                    factors[j] = _LOGISTIC(-w) ** m * base ** (n - m)
                    factors[i] = sp.S.One
                    changed = True
                    break
            if changed:
                break
    return sp.Mul(*factors)


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


def out_array(out: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """The array a function writes its result of ``shape`` into: ``out`` when given (it must be a C-contiguous
    float64 array of that shape, else a ValueError naming both), a new one when None. For callers that evaluate
    large grids again and again and keep one array (the mean-field flow's whole drive)."""
    if out is None:
        return np.empty(shape)
    if out.shape != tuple(shape) or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float64 array of shape {tuple(shape)}, got {out.dtype} "
                         f"{out.shape}")
    return out
