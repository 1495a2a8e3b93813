"""Measurements of a trained network in the units of the feature ODE (theory §4–6).

All quantities are estimated on a fixed, seeded test set ``{x_p}``, ``p = 1…n`` (``x_i = sqrt(g_i) z_i``,
``z ~ N(0, I_d)``) and use the centred network output ``f`` of theory §3:

* test loss ``L = ½ mean_p (f(x_p) − f*(x_p))²`` and ``L/L(0)``;
* projections ``f_β = mean_p h_β(z_p) f(x_p)`` with standard error ``std_p(h_β f)/sqrt(n)``;
* in-support loss ``Σ_{β ∈ supp v} (v_β − f_β)² / Σ_β v_β²``;
* effective-covariance growth ``r_i = ⟨ŵ_{ki}²⟩_k / g_i = ⟨w_{ki}²⟩_k`` (whitened first-layer weights
  ``ŵ_{ki} = sqrt(g_i) w_{ki}``; ``r_i = 1`` in expectation at init);
* readout growth ``a2 = ⟨a_k²⟩(t)/⟨a_k²⟩(0)`` and the joint moments ``joint_i = ⟨a_k² ŵ_{ki}²⟩ / (⟨a²⟩(0) g_i)
  = ⟨a_k² w_{ki}²⟩ / ⟨a_k²⟩(0)`` of the directions ``i`` in the target's support (averages over neurons ``k``; the
  ``0`` is the initial network of the same run);
* eNTK Rayleigh quotients ``λ_β = E_{x,x'}[h_β(x) Θ(x, x') h_β(x')] = q |∇_θ E_x[h_β f]|²`` of the current
  empirical NTK ``Θ(x, x') = q ∇_θ f(x)·∇_θ f(x')``, ``q`` = the parametrization's learning-rate scale (``γ² N``
  for meanfield), estimated without finite-sample bias: with ``g_p = h_β(x_p) ∇_θ f(x_p)`` (inner product
  ``q ⟨·,·⟩``) the estimator is the U-statistic ``λ̂_β = Σ_{p≠q} g_p·g_q / (n(n−1)) = n/(n−1) · (|mean_p g_p|² −
  Σ_p |g_p|² / n²)``, which is the inner product of the gradients of two independent half-sample means averaged
  over all splits into halves. ``|g_p|² = h_β(x_p)² Θ(x_p, x_p)`` needs only the diagonal of the kernel;
* the same U-statistic split by parameter group, like the Gram of theory §4: ``readout`` (``∂/∂a``: the NNGP part
  ``σσ'``), ``weights`` (``∂/∂w``: ``a² σ'σ' x·x'``) and ``bias`` (``∂/∂b``: ``a² σ'σ'``); they sum to ``λ_β``;
* the eNTK Gram ``K_{αβ} = E[h_α Θ h_β]`` on the measured modes, the same U-statistic with ``g_p^α·g_q^β``
  (its diagonal is ``λ``);
* the second moment of the spectral measure of each mode, ``‖Kφ_β‖² = E_x[(Kφ_β)(x)²]`` with
  ``(Kφ_β)(x) = E_{x'}[Θ(x, x') h_β(x')] = q ∇_θ f(x)·∇_θ E_{x'}[h_β f]`` (:class:`SpreadSums`; its variance
  ``‖Kφ_β‖² − λ_β²`` is the spread of ``φ_β`` over the kernel's eigen-directions), by a half-split estimator
  without finite-sample bias: the jackknife groups are split into the even ones ``E`` and the odd ones ``O``; at
  every test sample ``p`` two Jacobian–vector products give ``a_p`` (``(Kφ_β)(x_p)`` estimated from the samples of
  ``E`` other than ``p``) and ``b_p`` (the same from ``O``), independent given ``x_p``, and
  ``‖Kφ_β‖²^ = mean_p a_p b_p``; its delete-a-group jackknife is exact (deleting a group changes one of the two
  directions; the change is a dot product with the vector–Jacobian products ``Σ_p b_p ∇_θ f(x_p)`` and
  ``Σ_p a_p ∇_θ f(x_p)`` accumulated per group);
* with per-group learning rates ``(η_a, η_w, η_b)`` (``[training] lr_scale``) gradient flow follows the weighted
  kernel ``Θ = q Σ_g η_g ∇_g f·∇_g f'``, so each part above is multiplied by its group's ``η_g`` and ``λ_β``, the Gram
  and ``Θ(x, x)`` are their weighted sums (``weights`` of :func:`finish_measurement`; plain SGD keeps the unweighted
  arithmetic, bit for bit);
* standard errors of ``λ_β`` and of each part: the delete-a-group jackknife over up to :data:`JACKKNIFE_GROUPS`
  groups of test chunks (:func:`jackknife_groups`), ``se² = (G−1)/G Σ_j (λ̂_(−j) − mean_j λ̂_(−j))²`` with ``λ̂_(−j)`` the U-statistic without group
  ``j`` (test-set noise only, at the current parameters).

With the output scale ``c`` (``1/(γN)`` for meanfield) the parameter gradients are ``∂f/∂a_k = c σ(u_k)``,
``∂f/∂w_k = c a_k σ'(u_k) x``, ``∂f/∂b_k = c a_k σ'(u_k)``, so with ``κ = q c²`` (``1/N`` for meanfield)
``q |∇_θ E[h f]|² = κ Σ_k (E[h σ_k]² + a_k² (|E[h σ'_k x]|² + E[h σ'_k]²))`` and
``Θ(x, x) = κ Σ_k (σ_k² + a_k² σ'_k² (|x|² + 1))``. The network code (``featureode.sim.mlp``) accumulates the sums
over test-set chunks (:class:`ChunkSums`, per jackknife group in :class:`GroupSums`); :func:`finish_measurement`
turns them into the quantities above.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.kernel.parametrization import Parametrization
from featureode.calculus.targets import Target


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


JACKKNIFE_GROUPS = 16        # groups of test chunks for the standard errors of λ and its parts
JACKKNIFE_MEMORY = 2**28     # bytes the float64 group sums may take; fewer groups (at least 2) beyond that


def jackknife_groups(n_chunks: int, modes: int, width: int, dim: int) -> int:
    """Jackknife groups for a test set of ``n_chunks`` chunks: :data:`JACKKNIFE_GROUPS`, fewer when there are fewer
    chunks or when the group sums (``8 · M · N · (d + 2)`` bytes each) would exceed :data:`JACKKNIFE_MEMORY`."""
    fit = JACKKNIFE_MEMORY // (8 * modes * width * (dim + 2))
    return max(1, min(JACKKNIFE_GROUPS, n_chunks, max(2, fit)))


def ntk_factor(parametrization: Parametrization, gamma: float, width: int) -> float:
    """``κ = q c²``: the factor of the per-neuron sums in ``Θ`` (``lr_scale × output_scale²``; ``1/N`` for
    meanfield)."""
    return parametrization.lr_scale(gamma, width) * parametrization.output_scale(gamma, width) ** 2


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


@dataclass
class GroupSums:
    """Float64 sums over the samples of one jackknife group (or of the whole test set), per part of ``Θ``:
    ``hs``, ``hd`` (M, N), ``hdx`` (M, N, d) as in :class:`ChunkSums`; ``diag`` (3, M): ``Σ_p H_pj² κ⁻¹Θ_part(x_p,
    x_p)`` for the parts readout ``Σ_k S_pk²``, weights ``|x_p|² Σ_k a_k² D_pk²``, bias ``Σ_k a_k² D_pk²``;
    ``gram_diag`` (M, M): ``Σ_p H_pα H_pβ κ⁻¹Θ(x_p, x_p)``; ``n``: the number of samples."""

    hs: torch.Tensor
    hd: torch.Tensor
    hdx: torch.Tensor
    diag: torch.Tensor
    gram_diag: torch.Tensor
    n: int

    @classmethod
    def of_chunk(cls, sums: ChunkSums, h: torch.Tensor, x_sq: torch.Tensor, s_sq: torch.Tensor,
                 slope_sq: torch.Tensor, n: int,
                 weights: "tuple[float, float, float] | None" = None) -> "GroupSums":
        """From one chunk's sums, its mode values ``h`` (C, M), ``|x|²``, ``Σ_k S_pk²`` and ``Σ_k a_k² D_pk²`` (C,),
        ``n`` real samples; ``weights``: the part weights ``(η_a, η_w, η_b)`` of ``Θ`` in ``gram_diag`` (``diag``
        stays per part, unweighted)."""
        h, x_sq, s_sq, slope_sq = h.double(), x_sq.double(), s_sq.double(), slope_sq.double()
        h2 = (h * h).T
        diag = torch.stack([h2 @ s_sq, h2 @ (x_sq * slope_sq), h2 @ slope_sq])
        if weights is None:
            theta = s_sq + (x_sq + 1) * slope_sq
        else:
            wa, ww, wb = weights
            theta = wa * s_sq + (ww * x_sq + wb) * slope_sq
        return cls(sums.hs.double(), sums.hd.double(), sums.hdx.double(), diag, (h.T * theta) @ h, n)

    def __add__(self, other: "GroupSums") -> "GroupSums":
        return GroupSums(*(getattr(self, k) + getattr(other, k) for k in self.__dataclass_fields__))

    def __sub__(self, other: "GroupSums") -> "GroupSums":
        return GroupSums(*(getattr(self, k) - getattr(other, k) for k in self.__dataclass_fields__))


def _parts(g: GroupSums, a2: torch.Tensor, kappa: float, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The U-statistics of the three parts of ``λ`` (3, M) from sums over ``g.n`` samples (each multiplied by its
    group's weight when ``weights`` (3, 1) is given)."""
    n = g.n
    mean_sq = torch.stack([((g.hs / n) ** 2).sum(1), (a2 * ((g.hdx / n) ** 2).sum(2)).sum(1),
                           (a2 * (g.hd / n) ** 2).sum(1)])
    out = n / max(n - 1, 1) * kappa * (mean_sq - g.diag / n**2)
    return out if weights is None else weights * out


@dataclass(frozen=True)
class Measurement:
    """One measurement of one run (float64 NumPy): test loss, projections ``f_β`` with standard errors, eNTK
    Rayleigh quotients ``λ_β`` on the same modes with their jackknife standard errors, their split ``parts`` (3, M:
    readout, weights, bias; :data:`featureode.kernel.parametrization.PARTS`) with ``parts_stderr``, the Gram ``gram`` (M, M), the growth ``r_i`` per
    input dimension, ``a2 = ⟨a²⟩/⟨a²⟩(0)`` and the joint moments ``joint`` of the support directions."""

    loss: float
    f: np.ndarray
    f_stderr: np.ndarray
    lam: np.ndarray
    r: np.ndarray
    lam_stderr: np.ndarray
    parts: np.ndarray
    parts_stderr: np.ndarray
    gram: np.ndarray
    a2: float
    joint: np.ndarray
    second_moment: np.ndarray | None = None
    second_moment_stderr: np.ndarray | None = None


def finish_measurement(sums: ChunkSums, groups: Sequence[GroupSums], n: int, a: torch.Tensor, w: torch.Tensor,
                       a0: torch.Tensor, kappa: float, support: Sequence[int],
                       weights: "tuple[float, float, float] | None" = None) -> Measurement:
    """Turn chunk sums over ``n`` test samples (``sums``; ``groups``: the same per jackknife group) into a
    :class:`Measurement` (see the module docstring for the formulas); ``a`` (N,) and ``w`` (N, d) are the run's
    current second- and first-layer weights, ``a0`` the initial ones, ``kappa`` = :func:`ntk_factor`, ``support``
    the dimensions of the joint moments; ``weights``: the part weights ``(η_a, η_w, η_b)`` of the gradient-flow
    kernel (``None``: plain SGD; the groups' ``gram_diag`` must have been summed with the same weights)."""
    s = {k: getattr(sums, k).double() for k in sums.__dataclass_fields__}
    a2 = a.double() ** 2
    f = s["hf"] / n
    var = (s["hf_sq"] / n - f**2).clamp_min(0) * n / max(n - 1, 1)
    growth = (w.double() ** 2).mean(0)

    total = groups[0]
    for g in groups[1:]:
        total = total + g
    wt = None if weights is None else torch.tensor(weights, dtype=torch.float64, device=a2.device)[:, None]
    parts = _parts(total, a2, kappa, wt)
    if weights is None:
        mean_sq = ((s["hs"] / n) ** 2).sum(1) * kappa  # κ Σ_k E[h σ_k]²
        mean_sq = mean_sq + (a2 * (((s["hdx"] / n) ** 2).sum(2) + (s["hd"] / n) ** 2)).sum(1) * kappa
        lam = n / max(n - 1, 1) * (mean_sq - s["h_theta"] / n**2)
    else:  # the weighted sum of the parts (the same U-statistic, from the float64 group sums)
        lam = parts.sum(0)
    if len(groups) > 1:  # delete-a-group jackknife
        left_out = torch.stack([_parts(total - g, a2, kappa, wt) for g in groups])  # (G, 3, M)
        scale = (len(groups) - 1) / len(groups)
        parts_se = (scale * ((left_out - left_out.mean(0)) ** 2).sum(0)).sqrt()
        lam_out = left_out.sum(1)
        lam_se = (scale * ((lam_out - lam_out.mean(0)) ** 2).sum(0)).sqrt()
    else:
        parts_se, lam_se = torch.full_like(parts, float("nan")), torch.full_like(lam, float("nan"))
    hs = total.hs / total.n
    ax = ((total.hdx / total.n) * a.double()[None, :, None]).flatten(1)
    ab = total.hd / total.n * a.double()
    if weights is None:
        outer = hs @ hs.T + ax @ ax.T + ab @ ab.T
    else:
        wa, ww, wb = weights
        outer = wa * (hs @ hs.T) + ww * (ax @ ax.T) + wb * (ab @ ab.T)
    gram = total.n / max(total.n - 1, 1) * kappa * (outer - total.gram_diag / total.n**2)
    a0_sq = float((a0.double() ** 2).mean())
    joint = (a2[:, None] * w.double()[:, list(support)] ** 2).mean(0) / a0_sq
    return Measurement(float(0.5 * s["sq_residual"] / n), f.cpu().numpy(), (var / n).sqrt().cpu().numpy(),
                       lam.cpu().numpy(), growth.cpu().numpy(), lam_se.cpu().numpy(), parts.cpu().numpy(),
                       parts_se.cpu().numpy(), gram.cpu().numpy(), float(a2.mean()) / a0_sq, joint.cpu().numpy())


# ----------------------------------------------------------------------------------------------------------------
# the second moment ‖Kφ_β‖² of the spectral measure (half-split estimator, exact delete-a-group jackknife)
# ----------------------------------------------------------------------------------------------------------------
def _dot(hs: torch.Tensor, hd: torch.Tensor, hdx: torch.Tensor, R: torch.Tensor, Dd: torch.Tensor, Dx: torch.Tensor,
         a2: torch.Tensor) -> torch.Tensor:
    """Per mode, the parameter-space inner product of a direction given by its sums ``(hs, hd, hdx)`` (readout
    ``Σ h σ_k``, bias ``Σ h σ'_k``, weights ``Σ h σ'_k x``; the ``a_k`` factors of the gradient are in ``a2``) with a
    vector given the same way by ``(R, Dd, Dx)``: ``Σ_k hs R + a_k² (hd Dd + hdx·Dx)``, shape (M,)."""
    return (hs * R).sum(1) + (a2 * (hd * Dd + (hdx * Dx).sum(2))).sum(1)


class SpreadSums:
    """Accumulates the half-split estimate of ``‖Kφ_β‖²`` over the test chunks of one measurement (module
    docstring), given the first pass's per-group sums (:class:`GroupSums`; ``group_of`` maps a group index to its
    position, groups ``c`` with ``c % 2 = 0`` forming ``E``).

    Per chunk of group ``c`` (:meth:`add`): ``a_p = (κ ∇f_p·S_E − [c ∈ E] h_p Θ(x_p, x_p)) / (n_E − [c ∈ E])``
    and ``b_p`` likewise with ``O`` (``S_H = Σ_{p ∈ H} h_p ∇f_p``, the first pass's sums); ``Q_c += Σ_p a_p b_p``;
    the vector–Jacobian products ``Σ_p a_p ∇f_p`` and ``Σ_p b_p ∇f_p`` are added to the totals of ``c``'s half, and
    the one the jackknife needs for ``c`` (``b`` for ``c ∈ E``, ``a`` for ``c ∈ O``) to ``c``'s own."""

    def __init__(self, groups: Sequence[GroupSums], a: torch.Tensor, kappa: float):
        self.groups = list(groups)
        self.kappa = float(kappa)
        self.a2 = a.double() ** 2
        G = len(self.groups)
        self.ok = G >= 2
        m, n_w, d = self.groups[0].hdx.shape
        self.n_half = [sum(g.n for c, g in enumerate(self.groups) if c % 2 == e) for e in (0, 1)]

        def total(e: int, name: str) -> torch.Tensor:
            parts = [getattr(g, name) for c, g in enumerate(self.groups) if c % 2 == e]
            return sum(parts[1:], parts[0]) if parts else torch.zeros_like(getattr(self.groups[0], name))

        # directions of the two halves, stacked (2M, …): E first, then O
        self.hs = torch.cat([total(0, "hs"), total(1, "hs")]) if self.ok else None
        self.hd = torch.cat([total(0, "hd"), total(1, "hd")]) if self.ok else None
        self.hdx = torch.cat([total(0, "hdx"), total(1, "hdx")]) if self.ok else None
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=a.device)  # noqa: E731
        self.Q = zeros(G, m)
        # VJP totals per half e and per variable (0: a, 1: b): R (M, N), Dd (M, N), Dx (M, N, d)
        self.W = {(e, y): [zeros(m, n_w), zeros(m, n_w), zeros(m, n_w, d)] for e in (0, 1) for y in (0, 1)}
        self.own = [[zeros(m, n_w), zeros(m, n_w), zeros(m, n_w, d)] for _ in range(G)]
        self.m = m

    def _directions(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The stacked half directions ``(hs, hd, hdx)`` (hdx flattened to (2M, N·d)) in ``dtype``, cast once."""
        cached = getattr(self, "_dirs", None)
        if cached is None or cached[0].dtype != dtype:
            cached = self._dirs = (self.hs.to(dtype), self.hd.to(dtype), self.hdx.reshape(2 * self.m, -1).to(dtype))  # type: ignore[union-attr]  # the half directions are set before they are read
        return cached

    def add(self, c: int, s: torch.Tensor, ds: torch.Tensor, x: torch.Tensor, h: torch.Tensor, theta: torch.Tensor,
            weight: torch.Tensor) -> None:
        """One chunk of group ``c``: ``s = σ(u)``, ``ds = σ'(u)`` (C, N), inputs ``x`` (C, d), mode values ``h``
        (C, M), ``theta = Θ(x_p, x_p)`` and ``weight`` (C,)."""
        if not self.ok:
            return
        low = s.dtype                                                      # the run's dtype for the big products
        m, e = self.m, c % 2
        C, n_w = s.shape
        d = x.shape[1]
        dirs = self._directions(low)
        ad = ds * self.a2.to(low)                                          # a_k² σ'_k
        u = s @ dirs[0].T + ad @ dirs[1].T
        u = u + (ad.unsqueeze(2) * x.unsqueeze(1)).reshape(C, -1) @ dirs[2].T
        u = u.double() * self.kappa                                        # (C, 2M): κ ∇f_p·S_E, κ ∇f_p·S_O
        h, theta, w = h.double(), theta.double(), weight.double()
        own = h * theta.unsqueeze(1)
        ab = []
        for half in (0, 1):
            mine = 1 if half == e else 0
            val = (u[:, half * m:(half + 1) * m] - mine * own) / (self.n_half[half] - mine)
            ab.append(val * w.unsqueeze(1))
        a_val, b_val = ab
        self.Q[c] += (a_val * b_val).sum(0)
        y = torch.cat([a_val, b_val], dim=1)                               # (C, 2M)
        scale = float(y.abs().max()) or 1.0                                # keep the low-precision products in range
        yl = (y / scale).to(low)
        R, Dd = (yl.T @ s).double() * scale, (yl.T @ ds).double() * scale
        Dx = ((yl.unsqueeze(2) * x.unsqueeze(1)).reshape(C, -1).T @ ds).double().reshape(2 * m, d, n_w)
        Dx = Dx.transpose(1, 2) * scale
        for var in (0, 1):
            sl = slice(var * m, (var + 1) * m)
            for k, t in enumerate((R[sl], Dd[sl], Dx[sl])):
                self.W[(e, var)][k] += t
        keep = 1 if e == 0 else 0                                          # c ∈ E needs b, c ∈ O needs a
        sl = slice(keep * m, (keep + 1) * m)
        for k, t in enumerate((R[sl], Dd[sl], Dx[sl])):
            self.own[c][k] += t

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """``‖Kφ_β‖²`` per mode and its delete-a-group jackknife standard error (NaN with fewer than 2 groups)."""
        if not self.ok:
            nan = np.full(self.groups[0].hs.shape[0], np.nan)
            return nan, nan.copy()
        n_c = [g.n for g in self.groups]
        n = sum(n_c)
        Qh = [sum(self.Q[c] for c in range(len(n_c)) if c % 2 == e) for e in (0, 1)]
        est = (Qh[0] + Qh[1]) / n
        left = []
        for j, gj in enumerate(self.groups):
            H = j % 2                       # the half whose direction loses group j
            other = 1 - H
            yvar = other                    # the variable of the other half (b for H = E, a for H = O)
            nH = self.n_half[H]
            wy_h = [t - o for t, o in zip(self.W[(H, yvar)], self.own[j])]
            wy_o = self.W[(other, yvar)]
            dot_h = _dot(gj.hs, gj.hd, gj.hdx, *wy_h, self.a2) * self.kappa  # type: ignore[call-arg]  # wy_h holds three tensors
            dot_o = _dot(gj.hs, gj.hd, gj.hdx, *wy_o, self.a2) * self.kappa  # type: ignore[call-arg]  # wy_o holds three tensors
            same = ((Qh[H] - self.Q[j]) * (nH - 1) - dot_h) / (nH - n_c[j] - 1)
            cross = (Qh[other] * nH - dot_o) / (nH - n_c[j])
            left.append((same + cross) / (n - n_c[j]))
        left_t = torch.stack(left)
        G = len(n_c)
        se = ((G - 1) / G * ((left_t - left_t.mean(0)) ** 2).sum(0)).sqrt()
        return est.cpu().numpy(), se.cpu().numpy()  # type: ignore[union-attr]  # est is a tensor (a sum over modes)
