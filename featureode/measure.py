"""Measurements of a trained network in the units of the feature ODE (DESIGN §4–6).

All quantities are estimated on a fixed, seeded test set ``{x_p}``, ``p = 1…n`` (``x_i = sqrt(g_i) z_i``,
``z ~ N(0, I_d)``) and use the centred network output ``f`` of DESIGN §3:

* test loss ``L = ½ mean_p (f(x_p) − f*(x_p))²`` and ``L/L(0)``;
* projections ``f_β = mean_p h_β(z_p) f(x_p)`` with standard error ``std_p(h_β f)/sqrt(n)``;
* in-support loss ``Σ_{β ∈ supp v} (v_β − f_β)² / Σ_β v_β²``;
* effective-covariance growth ``r_i = ⟨ŵ_{ki}²⟩_k / g_i = ⟨w_{ki}²⟩_k`` (whitened first-layer weights
  ``ŵ_{ki} = sqrt(g_i) w_{ki}``; ``r_i = 1`` in expectation at init);
* eNTK Rayleigh quotients ``λ_β = E_{x,x'}[h_β(x) Θ(x, x') h_β(x')] = γ² N |∇_θ E_x[h_β f]|²`` of the current
  empirical NTK ``Θ(x, x') = γ² N ∇_θ f(x)·∇_θ f(x')``, estimated without finite-sample bias: with
  ``g_p = h_β(x_p) ∇_θ f(x_p)`` (inner product ``γ² N ⟨·,·⟩``) the estimator is the U-statistic
  ``λ̂_β = Σ_{p≠q} g_p·g_q / (n(n−1)) = n/(n−1) · (|mean_p g_p|² − Σ_p |g_p|² / n²)``, which is the inner product of
  the gradients of two independent half-sample means averaged over all splits into halves (the same estimator
  with less variance). ``|g_p|² = h_β(x_p)² Θ(x_p, x_p)`` needs only the diagonal of the kernel.

For the meanfield network ``f = (1/(γN)) Σ_k a_k σ(u_k) − f_init``, ``u_k = w_k·x + b_k``, the parameter gradients
are ``∂f/∂a_k = σ(u_k)/(γN)``, ``∂f/∂w_k = a_k σ'(u_k) x/(γN)``, ``∂f/∂b_k = a_k σ'(u_k)/(γN)``, so
``γ² N |∇_θ E[h f]|² = (1/N) Σ_k (E[h σ_k]² + a_k² (|E[h σ'_k x]|² + E[h σ'_k]²))`` and
``Θ(x, x) = (1/N) Σ_k (σ_k² + a_k² σ'_k² (|x|² + 1))``. The network code (``featureode.mlp``) accumulates the sums
over test-set chunks (:class:`ChunkSums`); :func:`finish_measurement` turns them into the quantities above.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from .data import Spectrum
from .hermite import Mode
from .targets import Target


@dataclass(frozen=True)
class TestSet:
    """A fixed test set of one run, zero-padded to whole chunks: inputs ``x`` (n_pad, d), targets ``y = f*(x)``,
    mode values ``h`` (n_pad, M) with ``h[p, j] = h_{β_j}(z_p)``, ``|x_p|²``, and ``weight`` (1 for the ``n`` real
    samples, 0 for padding; padded rows also have ``h = 0``, so they add nothing to any sum)."""

    x: torch.Tensor
    y: torch.Tensor
    h: torch.Tensor
    x_sq: torch.Tensor
    weight: torch.Tensor
    n: int
    chunk: int

    @property
    def initial_loss(self) -> float:
        """``L(0) = ½ mean_p y_p²`` (the centred network starts at ``f = 0``)."""
        return float(0.5 * (self.y.double() ** 2).sum() / self.n)

    def chunks(self) -> Iterator[tuple[torch.Tensor, ...]]:
        """``(x, y, h, x_sq, weight)`` slices of ``chunk`` rows each (all of the same shape)."""
        for lo in range(0, self.x.shape[0], self.chunk):
            hi = lo + self.chunk
            yield self.x[lo:hi], self.y[lo:hi], self.h[lo:hi], self.x_sq[lo:hi], self.weight[lo:hi]


def make_test_set(spectrum: Spectrum, target: Target, modes: Sequence[Mode], n: int, generator: torch.Generator,
                  device: Any, dtype: torch.dtype, chunk: int = 4096) -> TestSet:
    """Draw ``n`` samples ``z ~ N(0, I_d)`` with ``generator`` (float64 on the CPU, so the set does not depend on the
    device or dtype), evaluate ``x``, ``f*`` and every ``h_β`` in float64, pad to a multiple of the chunk size
    ``min(chunk, n)`` and cast to ``dtype``."""
    z = torch.randn(n, spectrum.dim, generator=generator, dtype=torch.float64)
    x = spectrum.to_x(z)
    h = torch.stack([m.evaluate(z) for m in modes], dim=1)
    size = min(chunk, n)
    pad = -n % size

    def put(t: torch.Tensor) -> torch.Tensor:
        t = torch.cat([t, t.new_zeros(pad, *t.shape[1:])]) if pad else t
        return t.to(device=device, dtype=dtype).contiguous()

    return TestSet(put(x), put(target.evaluate(z)), put(h), put((x * x).sum(1)), put(torch.ones(n, dtype=z.dtype)),
                   n, size)


@dataclass
class ChunkSums:
    """Sums over test samples ``p`` of one run (``S_pk = σ(u_k(x_p))``, ``D_pk = σ'(u_k(x_p))``, ``H_pj = h_j(z_p)``):

    ``sq_residual = Σ_p weight_p (f − y)²``; ``hf = Σ_p H_pj f_p``; ``hf_sq = Σ_p H_pj² f_p²``; ``hs = Σ_p H_pj S_pk``;
    ``hd = Σ_p H_pj D_pk``; ``hdx = Σ_p H_pj D_pk x_pi`` (shape M, N, d); ``h_theta = Σ_p H_pj² Θ(x_p, x_p)``.
    """

    sq_residual: torch.Tensor
    hf: torch.Tensor
    hf_sq: torch.Tensor
    hs: torch.Tensor
    hd: torch.Tensor
    hdx: torch.Tensor
    h_theta: torch.Tensor

    def __iadd__(self, other: "ChunkSums") -> "ChunkSums":
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


@dataclass(frozen=True)
class Measurement:
    """One measurement of one run (float64 NumPy): test loss, projections ``f_β`` with standard errors, eNTK
    Rayleigh quotients ``λ_β`` on the same modes, and the growth ``r_i`` per input dimension."""

    loss: float
    f: np.ndarray
    f_stderr: np.ndarray
    lam: np.ndarray
    r: np.ndarray


def finish_measurement(sums: ChunkSums, n: int, a: torch.Tensor, w: torch.Tensor) -> Measurement:
    """Turn chunk sums over ``n`` test samples into a :class:`Measurement` (see the module docstring for the
    formulas); ``a`` (N,) and ``w`` (N, d) are the run's current second- and first-layer weights."""
    s = {k: getattr(sums, k).double() for k in sums.__dataclass_fields__}
    a2 = a.double() ** 2
    width = a.shape[0]
    f = s["hf"] / n
    var = (s["hf_sq"] / n - f**2).clamp_min(0) * n / max(n - 1, 1)
    mean_sq = ((s["hs"] / n) ** 2).sum(1) / width  # (1/N) Σ_k E[h σ_k]²
    mean_sq = mean_sq + (a2 * (((s["hdx"] / n) ** 2).sum(2) + (s["hd"] / n) ** 2)).sum(1) / width
    lam = n / max(n - 1, 1) * (mean_sq - s["h_theta"] / n**2)
    growth = (w.double() ** 2).mean(0)
    return Measurement(float(0.5 * s["sq_residual"] / n), f.cpu().numpy(), (var / n).sqrt().cpu().numpy(),
                       lam.cpu().numpy(), growth.cpu().numpy())


def measurement_times(t_min: float, t_max: float, n_points: int) -> np.ndarray:
    """``t = 0`` followed by ``n_points`` log-spaced times from ``t_min`` to ``t_max`` (just ``[0, t_max]`` when
    ``t_min ≥ t_max`` or ``n_points ≤ 1``)."""
    if n_points <= 1 or not 0 < t_min < t_max:
        return np.array([0.0, float(t_max)])
    grid = np.geomspace(t_min, t_max, n_points)
    grid[-1] = t_max
    return np.concatenate([[0.0], grid])
