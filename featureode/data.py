"""Anisotropic Gaussian data (DESIGN §1): covariance spectra, whitening, seeded sampling.

``x ~ N(0, Σ)`` is handled in the eigenbasis of Σ, ``Σ = diag(g_0, …, g_{d-1})`` with ``g`` descending, and whitened
coordinates ``z_i = x_i / sqrt(g_i)``. A full covariance is diagonalised and its rotation kept (``rotation``: columns
are the eigenvectors, so ``x_eigen = rotation.T @ x_user``) so that targets written in the user's x-coordinates can
be rotated with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import sympy as sp


EXACT_MAX_DIM = 64  # power-law spectra keep an exact SymPy form up to this dimension


class DataError(ValueError):
    """Invalid covariance or spectrum."""


@dataclass(frozen=True)
class Spectrum:
    """Eigenvalues ``g`` (descending, positive) of the data covariance, with an optional exact SymPy form.

    ``exact`` holds SymPy numbers equal to ``g`` when the spectrum was given exactly (rational eigenvalues, or a
    power law with rational exponent and offset); targets written in x-coordinates then decompose exactly.
    """

    g: np.ndarray
    exact: tuple[sp.Expr, ...] | None = None
    rotation: np.ndarray | None = field(default=None, compare=False)
    description: str = ""

    def __post_init__(self) -> None:
        g = np.asarray(self.g, dtype=float)
        if g.ndim != 1 or g.size == 0:
            raise DataError(f"the spectrum must be a non-empty 1-d list of eigenvalues, got shape {g.shape}")
        if not np.all(np.isfinite(g)) or np.any(g <= 0):
            bad = [(i, float(v)) for i, v in enumerate(g) if not (np.isfinite(v) and v > 0)]
            raise DataError(f"covariance eigenvalues must be finite and > 0; bad entries (index, value): {bad}")
        if np.any(np.diff(g) > 0):
            raise DataError("eigenvalues must be sorted in descending order (g_0 ≥ g_1 ≥ …); "
                            "use Spectrum.from_eigenvalues, which sorts them")
        object.__setattr__(self, "g", g)

    @property
    def dim(self) -> int:
        """``d``, the number of eigenvalues."""
        return int(self.g.size)

    # constructors -----------------------------------------------------------------------------------------------
    @classmethod
    def power_law(cls, dim: int, exponent: float = 1.5, offset: float = 3.0, normalize: bool = True) -> "Spectrum":
        """``g_i ∝ (i + offset)^(-exponent)``, ``i = 0…d-1``, normalised to ``Σ g_i = 1`` by default."""
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise DataError(f"dim must be a positive integer, got {dim!r}")
        if not np.isfinite(exponent) or exponent < 0:
            raise DataError(f"exponent must be finite and ≥ 0, got {exponent!r}")
        if not np.isfinite(offset) or offset <= 0:
            raise DataError(f"offset must be > 0 (so that (i + offset) > 0 for i = 0), got {offset!r}")
        desc = f"power law (i + {offset})^(-{exponent}), d = {dim}" + (", normalised to Σg = 1" if normalize else "")
        if dim > EXACT_MAX_DIM:  # the exact form costs seconds beyond this; floats only
            g = (np.arange(dim) + float(offset)) ** (-float(exponent))
            return cls(g / g.sum() if normalize else g, None, description=desc)
        a, o = sp.nsimplify(exponent, rational=True), sp.nsimplify(offset, rational=True)
        raw = [(sp.Integer(i) + o) ** (-a) for i in range(dim)]
        exact = tuple(r / sp.Add(*raw) for r in raw) if normalize else tuple(raw)
        g = np.array([float(v) for v in exact])
        return cls(g, exact,
                   description=desc)

    @classmethod
    def from_eigenvalues(cls, eigenvalues: Sequence[Any]) -> "Spectrum":
        """Explicit eigenvalues (sorted descending here). Rationals/ints/strings like ``"1/2"`` stay exact."""
        vals = list(eigenvalues)
        if not vals:
            raise DataError("eigenvalues must be a non-empty list")
        try:
            exact = [sp.nsimplify(v, rational=True) if isinstance(v, (str, int)) else sp.sympify(v)
                     for v in vals]
        except (sp.SympifyError, TypeError) as exc:
            raise DataError(f"cannot read eigenvalues {vals!r}: {exc}") from None
        bad = [(i, v) for i, (v, e) in enumerate(zip(vals, exact)) if not (e.is_number and e.is_real)]
        if bad:
            raise DataError(f"eigenvalues must be real numbers; bad entries (index, value): {bad}")
        floats = np.array([float(v) for v in exact])
        order = np.argsort(-floats, kind="stable")
        all_exact = all(v.is_Rational for v in exact)
        return cls(floats[order], tuple(exact[i] for i in order) if all_exact else None,
                   description=f"explicit eigenvalues, d = {len(vals)}")

    @classmethod
    def from_covariance(cls, cov: Any, atol: float = 1e-10) -> "Spectrum":
        """Diagonalise a symmetric positive definite covariance matrix; the rotation is kept."""
        c = np.asarray(cov, dtype=float)
        if c.ndim != 2 or c.shape[0] != c.shape[1]:
            raise DataError(f"covariance must be a square matrix, got shape {c.shape}")
        if c.size == 0 or not np.all(np.isfinite(c)):
            raise DataError(f"covariance must be a non-empty matrix of finite numbers, got {c.tolist()}")
        asym = np.abs(c - c.T)
        if asym.max() > atol * max(1.0, float(np.max(np.abs(c)))):
            i, j = np.unravel_index(np.argmax(asym), asym.shape)
            raise DataError(f"covariance is not symmetric: Σ[{i},{j}] = {c[i, j]:.6g} but Σ[{j},{i}] = {c[j, i]:.6g} "
                            f"(max |Σ - Σᵀ| = {asym.max():.3g})")
        w, v = np.linalg.eigh((c + c.T) / 2)
        if np.min(w) <= 0:
            raise DataError(f"covariance is not positive definite (smallest eigenvalue {np.min(w):.3g}); "
                            "every direction needs positive variance")
        order = np.argsort(-w, kind="stable")
        return cls(w[order], None, rotation=v[:, order], description=f"full covariance, d = {c.shape[0]}")

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
