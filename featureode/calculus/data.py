"""Anisotropic Gaussian data (theory §1): covariance spectra, whitening, seeded sampling.

``x ~ N(0, Σ)`` is handled in the eigenbasis of Σ, ``Σ = diag(g_0, …, g_{d-1})`` with ``g`` descending, and whitened
coordinates ``z_i = x_i / sqrt(g_i)``. A full covariance is diagonalised and its rotation kept (``rotation``: columns
are the eigenvectors, so ``x_eigen = rotation.T @ x_user``) so that targets written in the user's x-coordinates can
be rotated with it.
"""
from __future__ import annotations

import functools
import re

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import sympy as sp

from featureode.core.errors import FeatureODEError


EXACT_MAX_DIM = 64  # power-law spectra keep an exact SymPy form up to this dimension
#: the largest input dimension: the spectrum, each weight vector and each sample hold d numbers (8 bytes each)
MAX_DIM = 10_000_000
#: Explicit eigenvalues must lie in this range: beyond it sums, products and powers of g leave double precision.
EIG_RANGE = (1e-100, 1e100)
_RATIONAL_TEXT = re.compile(r"\s*\+?(\d+(\.\d*)?|\.\d+)(/\d+)?\s*", re.ASCII)


class DataError(FeatureODEError, ValueError):
    """Invalid covariance or spectrum."""


@dataclass(frozen=True)
class Spectrum:
    """Eigenvalues ``g`` (descending, positive) of the data covariance, with an optional exact SymPy form.

    ``exact`` holds SymPy numbers equal to ``g`` when the spectrum was given exactly (rational eigenvalues, or a
    power law with rational exponent and offset); targets written in x-coordinates then decompose exactly.
    """

    g: np.ndarray
    exact: "tuple[sp.Expr, ...] | None" = field(default=None, compare=False)
    rotation: np.ndarray | None = field(default=None, compare=False)
    description: str = ""   # how it was given, in words (without d: say d = dim next to it)
    #: the exact form built on first use of :attr:`exact` (power laws: SymPy costs 10 ms–1 s; numbers need none)
    exact_factory: "Callable[[], tuple[sp.Expr, ...]] | None" = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        g = np.array(self.g, dtype=float)  # a private copy, read-only: spectra are shared (power laws are cached)
        if g.ndim != 1 or g.size == 0:
            raise DataError(f"the spectrum must be a non-empty 1-d list of eigenvalues, got shape {g.shape}")
        if not np.all(np.isfinite(g)) or np.any(g <= 0):
            bad = [(i, float(v)) for i, v in enumerate(g) if not (np.isfinite(v) and v > 0)]
            raise DataError(f"covariance eigenvalues must be finite and > 0; bad entries (index, value): {bad}")
        if np.any(np.diff(g) > 0):
            i = int(np.flatnonzero(np.diff(g) > 0)[0])
            raise DataError(f"eigenvalues must be in descending order (g_0 ≥ g_1 ≥ …), but g_{i + 1} = {g[i + 1]:.6g} "
                            f"> g_{i} = {g[i]:.6g}")
        g.flags.writeable = False
        object.__setattr__(self, "g", g)

    def __getattribute__(self, name: str) -> Any:
        if name == "exact":
            factory = object.__getattribute__(self, "exact_factory")
            if factory is not None:  # built once, on first use (the SymPy form is for display and exact targets)
                object.__setattr__(self, "exact", factory())
                object.__setattr__(self, "exact_factory", None)
        return object.__getattribute__(self, name)

    @property
    def dim(self) -> int:
        """``d``, the number of eigenvalues."""
        return int(self.g.size)

    # constructors -----------------------------------------------------------------------------------------------
    @classmethod
    def power_law(cls, dim: int, exponent: float = 1.5, offset: float = 3.0, normalize: bool = True) -> "Spectrum":
        """``g_i ∝ (i + offset)^(-exponent)``, ``i = 0…d-1``, normalised to ``Σ g_i = 1`` by default."""
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not 1 <= dim <= MAX_DIM:
            raise DataError(f"dim must be an integer in [1, {MAX_DIM:.0e}] (the spectrum, each weight vector and each "
                            f"sample hold d numbers), got {dim!r}")
        if not np.isfinite(exponent) or exponent < 0:
            raise DataError(f"exponent must be finite and ≥ 0, got {exponent!r}")
        if not np.isfinite(offset) or offset <= 0:
            raise DataError(f"offset must be > 0 (so that (i + offset) > 0 for i = 0), got {offset!r}")
        return _power_law(int(dim), float(exponent), float(offset), bool(normalize))

    @classmethod
    def _build_power_law(cls, dim: int, exponent: float, offset: float, normalize: bool) -> "Spectrum":
        """:meth:`power_law` after its checks (cached by :func:`_power_law`). ``g`` is computed in NumPy
        (:func:`power_law_values`); up to ``EXACT_MAX_DIM`` the exact SymPy form (rational exponent and offset) is
        built only when :attr:`exact` is first read (a target in x-coordinates, exact display)."""
        desc = f"power law g_i ∝ (i + {offset:g})^(-{exponent:g})" + (", normalised to Σg = 1" if normalize else "")
        if dim > EXACT_MAX_DIM:  # the exact form costs seconds beyond this; floats only
            g = (np.arange(dim) + float(offset)) ** (-float(exponent))
            return cls(g / g.sum() if normalize else g, None, description=desc)
        return cls(power_law_values(dim, exponent, offset, normalize), description=desc,
                   exact_factory=functools.partial(power_law_exact, dim, exponent, offset, normalize))

    @classmethod
    def from_eigenvalues(cls, eigenvalues: Sequence[Any]) -> "Spectrum":
        """Explicit eigenvalues ``g_0 ≥ g_1 ≥ … > 0``, in the user's order, which must be descending (theory §1):
        ``x_i`` and ``z_i`` are then the user's coordinates, the same ones a diagonal covariance gives. Numbers,
        and strings like ``"1/2"``; rationals (ints, strings) stay exact."""
        if isinstance(eigenvalues, (str, bytes)) or not isinstance(eigenvalues, Sequence):
            raise DataError(f"eigenvalues must be a list of numbers, got {eigenvalues!r}")
        vals = list(eigenvalues)
        if not vals:
            raise DataError("eigenvalues must be a non-empty list")
        exact, bad = [], []
        for i, v in enumerate(vals):
            try:
                if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, str, np.integer, np.floating)):
                    raise TypeError
                if isinstance(v, str) and not _RATIONAL_TEXT.fullmatch(v):
                    raise ValueError   # only exact rationals as text ("1/3", "0.25"), not "pi" or "1e400"
                v = v.item() if isinstance(v, (np.integer, np.floating)) else v
                e = sp.nsimplify(v, rational=True) if isinstance(v, (str, int)) else sp.Float(v)
                ok = bool(e.is_number and e.is_real and e.is_finite and EIG_RANGE[0] <= e <= EIG_RANGE[1])
            except (sp.SympifyError, TypeError, ValueError, SyntaxError):
                ok = False
            if not ok:
                bad.append((i, v))
            else:
                exact.append(e)
        if bad:
            raise DataError(f"eigenvalues must be numbers in [{EIG_RANGE[0]:g}, {EIG_RANGE[1]:g}] (or exact "
                            f"rationals as text, e.g. \"1/3\"); bad entries (index, value): {bad}")
        floats = np.array([float(v) for v in exact])
        rise = np.flatnonzero(np.diff(floats) > 0)
        if rise.size:
            i = int(rise[0])
            raise DataError(f"eigenvalues must be in descending order (g_0 ≥ g_1 ≥ …), but entry {i + 1} "
                            f"({vals[i + 1]!r}) > entry {i} ({vals[i]!r}); sort them and number the target's "
                            "coordinates to match, or give covariance = the diagonal matrix to keep this order")
        all_exact = all(v.is_Rational for v in exact)
        return cls(floats, tuple(exact) if all_exact else None, description="explicit eigenvalues")

    @classmethod
    def from_covariance(cls, cov: Any, atol: float = 1e-10) -> "Spectrum":
        """Diagonalise a symmetric positive definite covariance matrix; the rotation is kept."""
        rows = cov.tolist() if isinstance(cov, np.ndarray) else cov
        if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)) or not rows:
            raise DataError(f"covariance must be a non-empty square matrix (a list of rows), got {cov!r}")
        sizes = [len(r) if isinstance(r, Sequence) and not isinstance(r, (str, bytes)) else None for r in rows]
        if any(n != len(rows) for n in sizes):
            i = next(k for k, n in enumerate(sizes) if n != len(rows))
            what = "is not a list" if sizes[i] is None else f"has {sizes[i]} entries"
            raise DataError(f"covariance must be a square matrix: it has {len(rows)} rows but row {i} {what}")
        bad = [(i, j, v) for i, r in enumerate(rows) for j, v in enumerate(r)
               if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not np.isfinite(v)]
        if bad:
            raise DataError(f"covariance entries must be finite numbers; bad entries (row, column, value): {bad[:5]}")
        c = np.array(rows, dtype=float)
        asym = np.abs(c - c.T)
        if asym.max() > atol * max(1.0, float(np.max(np.abs(c)))):
            i, j = (int(x) for x in np.unravel_index(np.argmax(asym), asym.shape))
            raise DataError(f"covariance is not symmetric: Σ[{i},{j}] = {c[i, j]:.6g} but Σ[{j},{i}] = {c[j, i]:.6g} "
                            f"(max |Σ - Σᵀ| = {asym.max():.3g})")
        w, v = np.linalg.eigh((c + c.T) / 2)
        if np.min(w) <= 0:
            raise DataError(f"covariance is not positive definite (smallest eigenvalue {np.min(w):.3g}); "
                            "every direction needs positive variance")
        order = np.argsort(-w, kind="stable")
        return cls(w[order], None, rotation=v[:, order], description="full covariance, diagonalised")

    # numerics ---------------------------------------------------------------------------------------------------
    def sample_z(self, n: int, seed: int | np.random.Generator | None = 0) -> np.ndarray:
        """``n`` whitened samples ``z ~ N(0, I_d)`` (NumPy, float64), seeded."""
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return rng.standard_normal((n, self.dim))

    def sample_z_torch(self, n: int, generator: Any = None, device: Any = "cpu", dtype: Any = None) -> Any:
        """``n`` whitened samples as a torch tensor, drawn with the given ``torch.Generator``."""
        import torch

        return torch.randn(n, self.dim, generator=generator, device=device, dtype=dtype or torch.float32)

    def to_x(self, z: Any) -> Any:
        """Eigenbasis inputs ``x_i = sqrt(g_i) z_i`` (NumPy or torch, broadcast over leading axes)."""
        scale = np.sqrt(self.g)
        if hasattr(z, "new_tensor"):
            scale = z.new_tensor(scale)
        return z * scale

    def to_z(self, x: Any) -> Any:
        """Whitened coordinates ``z_i = x_i / sqrt(g_i)``."""
        scale = np.sqrt(self.g)
        if hasattr(x, "new_tensor"):
            scale = x.new_tensor(scale)
        return x / scale

    def sqrt_exact(self, i: int) -> sp.Expr:
        """``sqrt(g_i)`` exactly when the spectrum is exact, else as a SymPy Float."""
        return sp.sqrt(self.exact[i]) if self.exact is not None else sp.Float(np.sqrt(self.g[i]), 17)


@functools.lru_cache(maxsize=256)
def _power_law(dim: int, exponent: float, offset: float, normalize: bool) -> Spectrum:
    """One :class:`Spectrum` per power law (its ``g`` is read-only, so sharing it is safe)."""
    return Spectrum._build_power_law(dim, exponent, offset, normalize)


def power_law_values(dim: int, exponent: float, offset: float, normalize: bool = True) -> np.ndarray:
    """``g_i = (i + offset)^(−exponent)`` (divided by ``Σ_j g_j`` when ``normalize``), ``i = 0…dim−1``, in NumPy.

    Evaluated in extended precision (``numpy.longdouble``: 64-bit mantissa on x86) and rounded once to float64, so
    the result is the correctly rounded value of the exact number in all but rare ties (at most 1 ulp off; where
    ``longdouble`` is plain float64, a few ulps): equal to ``float`` of :func:`power_law_exact` to ≲ 1e-15
    relative, in microseconds instead of SymPy's 10 ms–1 s."""
    base = np.arange(dim, dtype=np.longdouble) + np.longdouble(offset)
    raw = base ** (-np.longdouble(exponent))
    return np.asarray(raw / raw.sum() if normalize else raw, dtype=float)


def power_law_exact(dim: int, exponent: float, offset: float, normalize: bool = True) -> tuple[sp.Expr, ...]:
    """The exact SymPy form of :func:`power_law_values`: ``(i + o)^(−a)`` with ``a``, ``o`` the rationals equal to
    the given floats (``nsimplify``), normalised by their exact sum."""
    a, o = sp.nsimplify(exponent, rational=True), sp.nsimplify(offset, rational=True)
    raw = [(sp.Integer(i) + o) ** (-a) for i in range(dim)]
    return tuple(r / sp.Add(*raw) for r in raw) if normalize else tuple(raw)
