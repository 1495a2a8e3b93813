"""The reference network of DESIGN §3 ("meanfield") trained by SGD on fresh Gaussian samples, and measured in the
units of the feature ODE (``featureode.sim.measure``).

Model, for one run with richness ``γ`` and width ``N`` (inputs in eigen-coordinates, ``x_i = sqrt(g_i) z_i``), with
the output scale ``c``, learning-rate scale ``q`` and readout variance of the config's parametrization
(:mod:`featureode.kernel.parametrization`; meanfield: ``c = 1/(γN)``, ``q = γ² N``, ``E[a²] = 1``)::

    f(x) = c Σ_k a_k σ(w_k·x + b_k) − f_init(x),   a_k ~ N(0, E[a²]), w_k ~ N(0, I_d), b_k ~ N(0, σ_b²),

where ``f_init`` is the same network with the frozen initial parameters ``(a⁰, w⁰, b⁰)`` (the output is centred on
the network at init, so ``f = 0`` at ``t = 0``), and ``σ`` is the activation registry's torch function.

Training: plain SGD on the batch mean of ``½ (f − y)²``, ``y = f*(x)``, with learning rate ``η q`` and fresh
samples every step; ``t = Σ η`` is gradient-flow time, in which ``df/dt = −E_{x'}[Θ(x, x') (f − y)(x')]`` with the
NTK ``Θ = q ∇_θ f·∇_θ f'`` (O(1) and γ-independent for meanfield). With ``∂f/∂a_k = c σ_k``,
``∂f/∂w_k = c a_k σ'_k x``, ``∂f/∂b_k = c a_k σ'_k`` the step is

    a_k −= (η q c/B) Σ_b r_b σ_bk,   w_k −= (η q c/B) Σ_b r_b a_k σ'_bk x_b,   b_k −= (η q c/B) Σ_b r_b a_k σ'_bk,

``r_b = f(x_b) − y_b`` (``q c = γ`` for meanfield): exactly SGD with rate ``η q`` (checked against autograd in the
tests), written out so that ``σ`` and ``σ'`` come from one forward-mode pass (``torch.func.jvp``) and the sums over
samples are matmuls.

The simulator is split by job: :mod:`featureode.sim.schedule` (pure Python) plans the steps — ``η = min(eta_max,
eta_safety/λ_top)``, ``λ_top`` the top eigenvalue of the empirical NTK ``q J Jᵀ/P`` on a fixed probe set of
``P = ntk_probe`` samples (``J`` = per-sample parameter gradients from ``torch.func.vmap(torch.func.grad(f))``, all
``N`` neurons), re-measured every ``ntk_every`` steps; the step before a measurement time shortened to land on it
exactly; the stop conditions ``t_max``, ``max_steps`` (incomplete, with a warning) and ``stop_loss`` — and decides
divergence (:class:`~featureode.sim.schedule.DivergenceMonitor`); :class:`MeanFieldBatch` holds the networks and their
kernels; :class:`Recorder` collects the measurements of a run into a :class:`~featureode.results.trajectory.Trajectory`;
:class:`Checkpoint` saves and restores a batch; :class:`Simulation` is the loop that ties them together.

Several runs (seeds, targets, richness values, spectra; same ``d``, ``N``, batch, activation, dtype, device) train
together in one process (:func:`simulate_batch`): parameters carry a leading run axis. On a GPU every step is one set
of batched matmuls over all runs (``torch.bmm``); on a CPU the runs are stepped one after another, because there
batching adds no arithmetic efficiency and multiplies the working set (measured: 0.4–0.5× the throughput of separate
runs at N = 1024, B = 2048; see ``benchmarks/results/mlp_benchmark.md``). Either way the samples of a step are
processed in chunks whose gradient sums are accumulated before the update (256 samples on a CPU, so the activations
stay in cache: 2× faster than whole-batch steps). Each run keeps its own step size, clock, samples and measurement
times, so its trajectory does not depend on the batch it is in; finished runs stop costing time on a CPU (on a GPU
they stay in the batch with ``η = 0``). With ``[training] compile = true`` (default) the chunk kernels are compiled by
``torch.compile`` (fused elementwise work and reductions, ≈ 5× faster than eager on a CPU; a few seconds of compilation
per process, cached on disk; eager fallback with a warning when compilation fails).

Randomness: one seed per run fixes everything, through independent streams derived from it: ``init`` (parameters),
``train`` (the fresh samples), ``test`` (the test set), ``probe`` (the NTK probe set); all are drawn on the CPU, so a
run's samples do not depend on the device.

Public API: :func:`simulate_config`, :func:`simulate_batch` (both return :class:`~featureode.results.trajectory.Trajectory`
objects, kind ``"mlp"``), :func:`estimate_memory`, and the errors :class:`MLPError`, :class:`DivergenceError`,
:class:`SimulationInterrupted`.
"""
from __future__ import annotations

import io
import math
import os
import signal
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from featureode.calculus.activations import get_activation
from featureode.config import MLP_SECTIONS, Config
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.sim.measure import (JACKKNIFE_GROUPS, ChunkSums, GroupSums, Measurement, TestSet, finish_measurement,
                      jackknife_groups, make_test_set, ntk_factor)
from featureode.results.metrics import crossing_time, in_support_loss
from featureode.kernel.parametrization import PARTS, Parametrization, get_parametrization
from featureode.sim.schedule import DivergenceMonitor, Schedule, Step, measurement_times, refresh_due
from featureode.calculus.targets import Target
from featureode.results.trajectory import Status, Trajectory, write_bytes

STREAMS = ("init", "train", "test", "probe")
CPU_CHUNK = 256           # samples per kernel call on a CPU (activations of a chunk stay in cache)
GPU_MEASURE_CHUNK = 8192  # test samples per kernel call on a GPU at most (training steps take the whole batch)
CHECKPOINT_VERSION = 3    # 3: schedule, divergence window and diagnostics records (2: neuron-major step kernel)
SMALL_BATCH = 64          # below this batch size a divergence message also suggests a larger batch
BATCH_KEYS = {"data": ("dim",), "network": ("activation", "width", "parametrization"),
               "training": ("batch", "device", "dtype", "ntk_every", "checkpoint_every", "threads", "compile")}


class MLPError(RuntimeError):
    """A simulation that cannot run as configured (incompatible batch, foreign or damaged checkpoint, too little
    memory)."""


class DivergenceError(MLPError):
    """Training diverged (see :class:`~featureode.sim.schedule.DivergenceMonitor`)."""


class SimulationInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; the message says where the checkpoint is and how to continue."""


# ----------------------------------------------------------------------------------------------------------------
# setup
# ----------------------------------------------------------------------------------------------------------------
def resolve_device(name: str) -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise MLPError(f"[training] device = {name!r} but CUDA is not available; use device = 'auto' or 'cpu'")
    return torch.device(name)


def stream(seed: int, name: str) -> torch.Generator:
    """The CPU generator of the named random stream (:data:`STREAMS`) of a run with this seed."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, STREAMS.index(name)]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


@dataclass(frozen=True)
class RunSpec:
    """Everything fixed about one run: its config, spectrum, target, measured modes and measurement times.

    ``modes`` lists the target's modes first, then any extra modes; ``v`` holds ``v_β`` on ``modes`` (0 outside the
    target's support); ``times`` are the measurement times (``t = 0`` first); ``support`` the input dimensions the
    target's modes use (sorted), whose joint moments are measured.
    """

    cfg: Config
    spectrum: Spectrum
    target: Target
    modes: tuple[Mode, ...]
    v: np.ndarray
    times: np.ndarray

    @classmethod
    def build(cls, cfg: Config, extra_modes: "Sequence[Mode | str] | None" = None) -> "RunSpec":
        """The spec of ``cfg``: the target's modes, then ``extra_modes`` not already among them."""
        spectrum = cfg.spectrum()
        target = cfg.target_obj(spectrum)
        modes = list(target.modes)
        for m in extra_modes or ():
            mode = m if isinstance(m, Mode) else Mode.parse(m)
            mode.check_dim(spectrum.dim)
            if mode not in modes:
                modes.append(mode)
        coeff = target.as_dict()
        tr = cfg.training
        return cls(cfg, spectrum, target, tuple(modes), np.array([coeff.get(m, 0.0) for m in modes]),
                   measurement_times(tr.t_min, tr.t_max, tr.n_points))

    @property
    def gamma(self) -> float:
        """The richness γ of the run."""
        return float(self.cfg.network.richness)

    @property
    def parametrization(self) -> Parametrization:
        """The run's parametrization (``[network] parametrization``)."""
        return get_parametrization(self.cfg.network.parametrization)

    @property
    def support(self) -> tuple[int, ...]:
        """The input dimensions used by the target's modes."""
        return tuple(sorted({i for m in self.target.modes for i in m.support}))

    @property
    def digest(self) -> str:
        """Digest of the config sections that define the simulation."""
        return self.cfg.digest(MLP_SECTIONS)


def _check_batch(specs: Sequence[RunSpec]) -> None:
    """Runs share one set of stacked tensors: the keys of :data:`BATCH_KEYS` must agree."""
    first = specs[0].cfg
    for i, s in enumerate(specs[1:], 1):
        for sec, keys in BATCH_KEYS.items():
            for key in keys:
                a, b = getattr(getattr(first, sec), key), getattr(getattr(s.cfg, sec), key)
                if a != b:
                    raise MLPError(f"runs 0 and {i} differ in [{sec}] {key} ({a!r} vs {b!r}); a batch of runs must "
                                   f"share {', '.join(f'[{k}] ' + ', '.join(v) for k, v in BATCH_KEYS.items())}")


def _measure_chunk(n_test: int, on_gpu: bool) -> int:
    """Test samples per measurement kernel call: :data:`CPU_CHUNK` on a CPU; on a GPU up to
    :data:`GPU_MEASURE_CHUNK`, small enough to give :data:`JACKKNIFE_GROUPS` chunks (a multiple of 256)."""
    if not on_gpu:
        return CPU_CHUNK
    return min(GPU_MEASURE_CHUNK, 256 * max(1, math.ceil(n_test / JACKKNIFE_GROUPS / 256)))


def estimate_memory(specs: Sequence[RunSpec], device: torch.device, batched: bool) -> dict[str, float]:
    """Bytes the simulation of ``specs`` needs on ``device``, by item (an estimate of the large tensors, made before
    anything is allocated): ``parameters`` (trained and initial), ``samples`` (one step's fresh inputs, drawn on the
    CPU and moved), ``step`` (the activations of one chunk of a step), ``test sets``, ``measurement`` (one test
    chunk's activations, the mode sums and the jackknife groups) and ``NTK probe`` (per-sample Jacobians)."""
    tr, net = specs[0].cfg.training, specs[0].cfg.network
    runs, n, d, batch = len(specs), net.width, specs[0].spectrum.dim, tr.batch
    item = torch.finfo(getattr(torch, tr.dtype)).bits // 8
    on_gpu = device.type == "cuda"
    modes = max(len(s.modes) for s in specs)
    chunk = batch if on_gpu else min(batch, CPU_CHUNK)
    chunk_runs = runs if batched else 1
    n_test = max(s.cfg.training.n_test for s in specs)
    m_chunk = min(n_test, _measure_chunk(n_test, on_gpu))
    probe = max(s.cfg.training.ntk_probe for s in specs)
    return {"parameters": 2.0 * runs * n * (d + 2) * item,
            "samples": 3.0 * runs * batch * (d + 1) * item,
            "step": 7.0 * chunk_runs * chunk * n * item + chunk_runs * n * d * item,
            "test sets": runs * n_test * (d + modes + 3) * item + n_test * (d + modes) * 8.0 * 2,
            "measurement": (6.0 * m_chunk * n + 3 * modes * n * d) * item
                           + (jackknife_groups(JACKKNIFE_GROUPS, modes, n, d) + 2) * modes * n * (d + 2) * 8.0,
            "NTK probe": 3.0 * probe * n * (d + 2) * item + probe * probe * 8.0}


def _available_memory(device: torch.device) -> float:
    """Free bytes on ``device`` (CUDA: ``mem_get_info``; CPU: ``MemAvailable`` of ``/proc/meminfo``, else the free
    physical pages)."""
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def check_memory(specs: Sequence[RunSpec], device: torch.device, batched: bool) -> None:
    """Refuse, before allocating, a simulation whose :func:`estimate_memory` exceeds the free memory of ``device``."""
    need = estimate_memory(specs, device, batched)
    total, free = sum(need.values()), _available_memory(device)
    if total > free:
        gib = 2.0**30
        top = ", ".join(f"{k} {v / gib:.3g}" for k, v in sorted(need.items(), key=lambda kv: -kv[1])[:3])
        tr = specs[0].cfg.training
        raise MLPError(f"[network] width = {specs[0].cfg.network.width} with [training] batch = {tr.batch} "
                       f"(n_test = {tr.n_test}, {len(specs)} run(s), d = {specs[0].spectrum.dim}) needs about "
                       f"{total / gib:.3g} GiB ({top} GiB), more than the {free / gib:.3g} GiB free on {device}; "
                       "reduce width or batch")


# ----------------------------------------------------------------------------------------------------------------
# the batched network and its kernels
# ----------------------------------------------------------------------------------------------------------------
def _kernels(act: Callable[[torch.Tensor], torch.Tensor]) -> tuple[Callable, Callable]:
    """The SGD step and the measurement-chunk statistics for activation ``act``, as pure tensor functions.

    Shapes: ``w, w0`` (R, N, d); ``b, b0, a, a0`` (R, N); ``x`` (R, C, d) and ``y`` (R, C) for a chunk of C samples;
    ``scale`` = the output scale ``c`` (R, 1).
    """

    def features(w: torch.Tensor, b: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor,
                 x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``σ(u)``, ``σ'(u)`` of the trained neurons and ``σ(u⁰)`` of the frozen initial ones, neuron-major: shape
        (R, N, C), ``u_kb = w_k·x_b + b_k`` (this layout makes both the forward product ``w xᵀ`` and the weight
        gradient ``g x`` plain contiguous matrix products: ≈ 1.6× faster on a CPU than sample-major)."""
        xt = x.transpose(1, 2)
        u = torch.baddbmm(b.unsqueeze(2), w, xt)
        u0 = torch.baddbmm(b0.unsqueeze(2), w0, xt)
        s, ds = torch.func.jvp(act, (u,), (torch.ones_like(u),))
        return s, ds, act(u0)

    def output(s: torch.Tensor, s0: torch.Tensor, a: torch.Tensor, a0: torch.Tensor,
               scale: torch.Tensor) -> torch.Tensor:
        """Centred output ``c (Σ_k a_k σ_k − Σ_k a⁰_k σ⁰_k)``, shape (R, C) (a reduction the compiler fuses with
        the activation, not a matrix-vector product)."""
        return (s * a.unsqueeze(2) - s0 * a0.unsqueeze(2)).sum(1) * scale

    def gradients(w: torch.Tensor, b: torch.Tensor, a: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor,
                  a0: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                  scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sums over the chunk: ``Σ_b r_b a_k σ'_bk x_b`` (R, N, d), ``Σ_b r_b a_k σ'_bk`` (R, N), ``Σ_b r_b σ_bk``
        (R, N) and ``Σ_b r_b²`` (R,), with ``r = f − y`` (the gradients of ``½ Σ_b r_b²`` divided by ``c``)."""
        s, ds, s0 = features(w, b, w0, b0, x)
        r = output(s, s0, a, a0, scale) - y
        g = ds * a.unsqueeze(2) * r.unsqueeze(1)
        return torch.bmm(g, x), g.sum(2), (s * r.unsqueeze(1)).sum(2), (r * r).sum(1)

    def chunk_sums(w: torch.Tensor, b: torch.Tensor, a: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor,
                   a0: torch.Tensor, x: torch.Tensor, y: torch.Tensor, h: torch.Tensor, x_sq: torch.Tensor,
                   weight: torch.Tensor, scale: torch.Tensor, kappa: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The fields of :class:`~featureode.sim.measure.ChunkSums` for one run (R = 1) over one chunk, then the
        per-sample ``Σ_k σ_k²`` and ``Σ_k a_k² σ'_k²`` (C,); ``x`` (1, C, d), ``y`` (1, C), ``h`` (C, M), ``x_sq``
        and ``weight`` (C,), ``kappa`` = :func:`~featureode.sim.measure.ntk_factor` (a 0-d tensor)."""
        s, ds, s0 = features(w, b, w0, b0, x)
        f = output(s, s0, a, a0, scale)[0]
        s, ds, xc, hc = s[0].T, ds[0].T, x[0], h
        s_sq, slope_sq = (s * s).sum(1), (ds * ds) @ (a[0] * a[0])
        theta = (s_sq + (x_sq + 1) * slope_sq) * kappa
        hx = (hc.unsqueeze(2) * xc.unsqueeze(1)).reshape(xc.shape[0], -1)             # (C, M·d)
        hdx = (hx.T @ ds).reshape(hc.shape[1], xc.shape[1], s.shape[1]).transpose(1, 2)  # (M, N, d)
        return ((weight * (f - y[0]).square()).sum(), hc.T @ f, (hc * hc).T @ (f * f), hc.T @ s, hc.T @ ds, hdx,
                (hc * hc).T @ theta, s_sq, slope_sq)

    return gradients, chunk_sums


class _Compiled:
    """A tensor function run through ``torch.compile`` (static shapes: the callers use at most two chunk shapes),
    falling back to eager execution with a warning."""

    def __init__(self, fn: Callable, enabled: bool):
        self.fn = fn
        self.compiled = torch.compile(fn, dynamic=False) if enabled else None

    def __call__(self, *args: Any) -> Any:
        if self.compiled is not None:
            try:
                return self.compiled(*args)
            except Exception as exc:  # compiler missing or unsupported op: keep going, slower
                warnings.warn(f"torch.compile failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                              "running eagerly (set [training] compile = false to skip compilation)")
                self.compiled = None
        return self.fn(*args)


PARAMS = ("w", "b", "a", "w0", "b0", "a0")


class MeanFieldBatch:
    """``R`` independent two-layer networks of width ``N`` on ``d`` inputs (DESIGN §3), parameters stacked on a
    leading run axis.

    ``params``: ``w`` (R, N, d), ``b`` (R, N), ``a`` (R, N) trained; ``w0``, ``b0``, ``a0`` the frozen initial copy
    that defines ``f_init``. ``gamma``: the richness of each run (R,); ``parametrization``: the output scale ``c``,
    learning-rate scale ``q`` and readout variance (shared by the runs).

    Execution: with ``batched`` every step processes all runs in one set of batched matmuls (the GPU layout); otherwise
    runs are stepped one after another (on a CPU this is faster: batching adds no arithmetic efficiency there and
    multiplies the working set). Either way the samples of a step are processed in chunks of ``chunk`` samples whose
    gradient sums are accumulated before the update, so the activations of a chunk stay cache-sized on a CPU.
    """

    def __init__(self, params: dict[str, torch.Tensor], gamma: Sequence[float], activation: str, compile: bool,
                 batched: bool, chunk: int, parametrization: Parametrization):
        self.params = params
        w = params["w"]
        self.runs, self.width, self.dim = w.shape
        self.gamma = torch.tensor(list(gamma), dtype=torch.float64)
        out = [parametrization.output_scale(g, self.width) for g in gamma]
        self.out_scale = out
        self.lr_scale = [parametrization.lr_scale(g, self.width) for g in gamma]
        self.kappa = [ntk_factor(parametrization, g, self.width) for g in gamma]
        self.scale = torch.tensor(out, dtype=torch.float64).to(w).unsqueeze(1)
        self.kappa_t = torch.tensor(self.kappa, dtype=torch.float64).to(w)  # a tensor: no recompilation per value
        # the update factor q c of each run (γ for meanfield), float64 until it is cast with the step sizes
        self.step_factor = torch.tensor([q * c for q, c in zip(self.lr_scale, out)], dtype=torch.float64)
        self.act = get_activation(activation).torch()
        self.batched, self.chunk = batched, chunk
        grads, sums = _kernels(self.act)
        self._grads = _Compiled(grads, compile)
        self._sums = _Compiled(sums, compile)

    @classmethod
    def initialize(cls, specs: Sequence[RunSpec], device: torch.device, dtype: torch.dtype, compile: bool,
                   batched: bool, chunk: int) -> "MeanFieldBatch":
        """Draw ``a ~ N(0, E[a²])``, ``w ~ N(0, I_d)``, ``b ~ N(0, σ_b²)`` per run from its ``init`` stream (float64
        on the CPU, then cast, so the draw does not depend on device or dtype)."""
        n, d = specs[0].cfg.network.width, specs[0].spectrum.dim
        param = specs[0].parametrization
        a_std = math.sqrt(param.readout_variance)
        cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("w", "b", "a")}
        for s in specs:
            gen = stream(s.cfg.training.seed, "init")
            cols["a"].append(torch.randn(n, generator=gen, dtype=torch.float64) * a_std)
            cols["w"].append(torch.randn(n, d, generator=gen, dtype=torch.float64))
            cols["b"].append(torch.randn(n, generator=gen, dtype=torch.float64) * s.cfg.network.bias_std)
        params = {k: torch.stack(v).to(device=device, dtype=dtype) for k, v in cols.items()}
        params.update({k + "0": v.clone() for k, v in params.items()})
        return cls(params, [s.gamma for s in specs], specs[0].cfg.network.activation, compile, batched, chunk, param)

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: Sequence[float], runs: Sequence[int]) -> list[float]:
        """One SGD step of ``runs`` (all runs when ``batched``) with gradient-flow increments ``lr = η`` (0 freezes a
        run) on samples ``x`` (len(runs), B, d), ``y`` (len(runs), B); the SGD rate is ``η q``. Returns the batch
        losses ``½ mean_b r_b²`` before the step."""
        if self.batched:
            if list(runs) != list(range(self.runs)):
                raise MLPError("a batched step takes every run (give finished runs lr = 0)")
            return self._step_group(slice(0, self.runs), x, y, lr)
        return [loss for j, i in enumerate(runs)
                for loss in self._step_group(slice(i, i + 1), x[j:j + 1], y[j:j + 1], lr[j:j + 1])]

    def _step_group(self, runs: slice, x: torch.Tensor, y: torch.Tensor, lr: Sequence[float]) -> list[float]:
        """Accumulate the chunk gradient sums of the runs ``runs`` (a slice, so parameters are updated through
        views), then ``θ −= (η q c / B) Σ_b …`` (``∂f/∂θ`` carries ``c``, the rate is ``η q``)."""
        p = [self.params[k][runs] for k in PARAMS]
        scale, batch = self.scale[runs], x.shape[1]
        total: tuple[torch.Tensor, ...] | None = None
        for lo in range(0, batch, self.chunk):
            part = self._grads(*p, x[:, lo:lo + self.chunk], y[:, lo:lo + self.chunk], scale)
            total = part if total is None else tuple(u + v for u, v in zip(total, part))
        grad_w, grad_b, grad_a, sq = total
        coef = (torch.tensor(list(lr), dtype=torch.float64) * self.step_factor[runs] / batch).to(x).unsqueeze(1)
        p[0].sub_(coef.unsqueeze(-1) * grad_w)
        p[1].sub_(coef * grad_b)
        p[2].sub_(coef * grad_a)
        return (0.5 * sq / batch).tolist()

    def output(self, x: torch.Tensor) -> torch.Tensor:
        """Centred outputs ``f(x)`` of every run, ``x`` (R, B, d) → (R, B) (eager; for checks and tests)."""
        p = self.params
        u = torch.baddbmm(p["b"].unsqueeze(1), x, p["w"].transpose(1, 2))
        u0 = torch.baddbmm(p["b0"].unsqueeze(1), x, p["w0"].transpose(1, 2))
        out = torch.bmm(self.act(u), p["a"].unsqueeze(-1)) - torch.bmm(self.act(u0), p["a0"].unsqueeze(-1))
        return out.squeeze(-1) * self.scale

    def measure(self, run: int, test: TestSet, support: Sequence[int]) -> Measurement:
        """Test loss, projections, eNTK Rayleigh quotients (with their parts, Gram and standard errors), ``r_i``,
        ``⟨a²⟩`` and the joint moments of the dimensions ``support`` of one run on its test set (all samples, all
        neurons; see :mod:`featureode.sim.measure`)."""
        args, scale, kappa = [self.params[k][run:run + 1] for k in PARAMS], self.scale[run:run + 1], self.kappa[run]
        kappa_t = self.kappa_t[run]
        total: ChunkSums | None = None
        n_chunks = math.ceil(test.x.shape[0] / test.chunk)
        n_groups = jackknife_groups(n_chunks, test.h.shape[1], self.width, self.dim)
        groups: list[GroupSums | None] = [None] * n_groups
        with torch.no_grad():
            for c, (x, y, h, x_sq, weight) in enumerate(test.chunks()):
                *fields, s_sq, slope_sq = self._sums(*args, x[None], y[None], h, x_sq, weight, scale, kappa_t)
                part = ChunkSums(*fields)
                if total is None:
                    total = part
                else:
                    total += part
                g, real = c * n_groups // n_chunks, int(weight.sum())
                piece = GroupSums.of_chunk(part, h, x_sq, s_sq, slope_sq, real)
                groups[g] = piece if groups[g] is None else groups[g] + piece
            p = self.params
            return finish_measurement(total, [g for g in groups if g is not None], test.n, p["a"][run], p["w"][run],
                                      p["a0"][run], kappa, support)

    def ntk_top(self, run: int, probe: torch.Tensor) -> float:
        """Top eigenvalue of the empirical NTK ``q J Jᵀ / P`` of one run on the probe inputs (P, d), with ``J`` the
        per-sample gradients of ``f`` with respect to the trained ``(a, w, b)`` (all neurons)."""
        p = self.params
        theta = {k: p[k][run] for k in ("a", "w", "b")}
        inverse_scale = 1.0 / self.out_scale[run]  # f = (Σ_k a_k σ_k) / (1/c)

        def f_single(th: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            return (th["a"] * self.act(th["w"] @ x + th["b"])).sum() / inverse_scale

        jac = torch.func.vmap(torch.func.grad(f_single), in_dims=(None, 0))(theta, probe)
        j = torch.cat([jac[k].reshape(probe.shape[0], -1) for k in ("a", "w", "b")], dim=1)
        gram = (self.lr_scale[run] / probe.shape[0]) * (j @ j.T)
        return float(torch.linalg.eigvalsh(gram.double())[-1])


# ----------------------------------------------------------------------------------------------------------------
# checkpoint, recorder
# ----------------------------------------------------------------------------------------------------------------
class Checkpoint:
    """The checkpoint file of a batch of runs (``None`` path: no checkpoint).

    The state (a dict of tensors, lists and numbers) is written atomically — ``torch.save`` into memory, then a temp
    file in the same folder renamed over the old one — so a crash or ``kill -9`` leaves the previous checkpoint or the
    new one, never a torn file. :meth:`load` checks the format version and that the checkpoint belongs to the same
    configs and modes; a file that does not unpickle is reported as damaged, with the fix.
    """

    def __init__(self, path: "str | Path | None"):
        self.path = Path(path) if path is not None else None

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` (plus the format version) atomically."""
        if self.path is None:
            return
        buf = io.BytesIO()
        torch.save({"version": CHECKPOINT_VERSION, **state}, buf)
        write_bytes(self.path, buf.getvalue())

    def exists(self) -> bool:
        """Whether there is a checkpoint file to resume from."""
        return self.path is not None and self.path.exists()

    def load(self, digests: Sequence[str], modes: Sequence[Sequence[str]]) -> dict[str, Any]:
        """The saved state, after checking version, config digests and mode lists; raises :class:`MLPError` with the
        fix for a damaged, foreign or outdated file."""
        path = self.path
        try:
            st = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(st, dict):
                raise TypeError(f"holds a {type(st).__name__}, not a checkpoint")
        except Exception as exc:  # any unpickling/zip failure means the same thing: the file cannot be used
            first = (str(exc).splitlines() or [""])[0][:120]
            raise MLPError(f"{path} is damaged ({type(exc).__name__}: {first}); delete it, or rerun without --resume, "
                           "to start the run afresh") from exc
        if st.get("version") != CHECKPOINT_VERSION:
            raise MLPError(f"{path}: checkpoint format {st.get('version')!r}, this featureode writes and resumes "
                           f"{CHECKPOINT_VERSION}; delete the checkpoint (or choose another --out) to start the run "
                           "afresh")
        if st.get("digests") != list(digests) or st.get("modes") != [list(m) for m in modes]:
            raise MLPError(f"{path} was written for a different configuration or mode set; delete it or "
                           "run without resume")
        return st


class Recorder:
    """The measurements of one run, as columns of JSON-ready lists (so a checkpoint can hold them), turned into a
    :class:`~featureode.results.trajectory.Trajectory` at the end."""

    COLUMNS = ("t", "loss", "f", "f_stderr", "lambda", "lambda_stderr", "r", "eta", "lambda_top", "steps", "a2",
               "joint", "gram") + tuple(f"lambda_parts/{p}" for p in PARTS) + tuple(
                   f"lambda_parts_stderr/{p}" for p in PARTS)

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.columns: dict[str, list] = {k: [] for k in self.COLUMNS}

    def __len__(self) -> int:
        return len(self.columns["t"])

    @property
    def last_t(self) -> float | None:
        """The last measured time (``None`` before the first measurement)."""
        return self.columns["t"][-1] if len(self) else None

    def add(self, m: Measurement, clock: Schedule) -> None:
        """Append one measurement taken at the clock's current time."""
        row: dict[str, Any] = {"t": clock.t, "loss": m.loss, "f": m.f.tolist(), "f_stderr": m.f_stderr.tolist(),
                               "lambda": m.lam.tolist(), "lambda_stderr": m.lam_stderr.tolist(), "r": m.r.tolist(),
                               "eta": clock.eta, "lambda_top": clock.lambda_top, "steps": clock.steps, "a2": m.a2,
                               "joint": m.joint.tolist(), "gram": m.gram.tolist()}
        for k, p in enumerate(PARTS):
            row[f"lambda_parts/{p}"] = m.parts[k].tolist()
            row[f"lambda_parts_stderr/{p}"] = m.parts_stderr[k].tolist()
        for key, val in row.items():
            self.columns[key].append(val)

    def state(self) -> dict[str, list]:
        """The columns (for checkpoints)."""
        return self.columns

    def restore(self, columns: dict[str, list]) -> None:
        """Set the columns from :meth:`state`."""
        self.columns = {k: list(columns[k]) for k in self.COLUMNS}

    def trajectory(self, clock: Schedule, meta: dict[str, Any]) -> Trajectory:
        """The run's :class:`~featureode.results.trajectory.Trajectory` (kind ``"mlp"``): DESIGN §6 fields, t50/t10 of the
        test loss, the diagnostics as named arrays, ``meta`` plus the support directions of ``joint``."""
        spec, col = self.spec, self.columns
        t = np.asarray(col["t"], float)
        loss = np.asarray(col["loss"], float)
        ratio = loss / loss[0]
        f = np.asarray(col["f"], float)
        arrays = {"loss_ratio": ratio, "eta": np.asarray(col["eta"], float),
                  "lambda_top": np.asarray(col["lambda_top"], float), "steps": np.asarray(col["steps"], np.int64),
                  "lambda_stderr": np.asarray(col["lambda_stderr"], float), "a2": np.asarray(col["a2"], float),
                  "joint": np.asarray(col["joint"], float).reshape(len(t), len(spec.support)),
                  "gram": np.asarray(col["gram"], float)}
        arrays.update({k: np.asarray(col[k], float) for k in self.COLUMNS if k.startswith("lambda_parts")})
        meta = {**meta, "joint_directions": [f"z{i}" for i in spec.support],
                "lambda_parts_estimator": "U-statistic per parameter group (readout ∂/∂a, weights ∂/∂w, bias ∂/∂b); "
                                          f"stderr: delete-a-group jackknife over up to {JACKKNIFE_GROUPS} groups "
                                          "of test chunks (test-set noise at fixed parameters)"}
        return Trajectory("mlp", "mlp", tuple(str(m) for m in spec.modes), spec.v.copy(), t, loss, f=f,
                          lam=np.asarray(col["lambda"], float), r=np.asarray(col["r"], float),
                          in_support_loss=in_support_loss(f, spec.v), f_stderr=np.asarray(col["f_stderr"], float),
                          t50=crossing_time(t, ratio, 0.5), t10=crossing_time(t, ratio, 0.1), arrays=arrays,
                          meta=meta, status=Status(clock.complete, clock.t))


# ----------------------------------------------------------------------------------------------------------------
# the simulation loop
# ----------------------------------------------------------------------------------------------------------------
@contextmanager
def _interrupt_flag() -> Iterator[dict[str, bool]]:
    """Turn the first Ctrl-C into a flag the loop checks between steps (so the checkpoint is consistent); a second
    Ctrl-C interrupts at once. Outside the main thread no handler is installed."""
    flag = {"set": False}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: Any) -> None:
        if flag["set"]:
            raise KeyboardInterrupt
        flag["set"] = True

    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


class Simulation:
    """Trains a batch of runs to their ``t_max`` (or ``max_steps``), measuring at each run's measurement times: the
    loop over :class:`MeanFieldBatch` (network), :class:`~featureode.sim.schedule.Schedule` (clock),
    :class:`~featureode.sim.schedule.DivergenceMonitor`, :class:`Recorder` and :class:`Checkpoint`."""

    def __init__(self, specs: Sequence[RunSpec], checkpoint: "str | Path | None", progress: bool,
                 batched: bool | None = None):
        """``batched``: step all runs in one set of batched matmuls (default: on CUDA), else run by run."""
        self.specs = list(specs)
        _check_batch(self.specs)
        tr = self.specs[0].cfg.training
        self.device = resolve_device(tr.device)
        self.dtype = getattr(torch, tr.dtype)
        self.batch = tr.batch
        self.checkpoint = Checkpoint(checkpoint)
        self.progress = progress
        on_gpu = self.device.type == "cuda"
        batched = on_gpu if batched is None else batched
        check_memory(self.specs, self.device, batched)
        self.net = MeanFieldBatch.initialize(self.specs, self.device, self.dtype, tr.compile, batched,
                                             self.batch if on_gpu else _even_chunk(self.batch, CPU_CHUNK))
        self.tests = [make_test_set(s.spectrum, s.target, s.modes, s.cfg.training.n_test, stream(s.cfg.training.seed,
                                    "test"), self.device, self.dtype, _measure_chunk(s.cfg.training.n_test, on_gpu))
                      for s in self.specs]
        self.probes = [s.spectrum.to_x(torch.randn(s.cfg.training.ntk_probe, s.spectrum.dim, dtype=torch.float64,
                                                   generator=stream(s.cfg.training.seed, "probe")))
                       .to(self.device, self.dtype) for s in self.specs]
        self.sqrt_g = torch.tensor(np.sqrt(np.stack([s.spectrum.g for s in self.specs])),
                                   dtype=self.dtype).unsqueeze(1).to(self.device)
        self.gens = [stream(s.cfg.training.seed, "train") for s in self.specs]
        self.clocks = [Schedule.for_training(s.times, s.cfg.training) for s in self.specs]
        self.initial_loss = [t.initial_loss for t in self.tests]
        self.monitors = [DivergenceMonitor(l0, self.batch) for l0 in self.initial_loss]
        self.recorders = [Recorder(s) for s in self.specs]
        self.step_count = 0
        self.wall = 0.0

    # checkpoints ------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically: parameters, generator states, clocks, divergence windows,
        measurements."""
        return {"digests": [s.digest for s in self.specs], "modes": [[str(m) for m in s.modes] for s in self.specs],
                "params": {k: v.detach().cpu().clone() for k, v in self.net.params.items()},
                "generators": [g.get_state() for g in self.gens], "step": self.step_count, "wall_s": self.wall,
                "runs": [{"clock": c.state(), "monitor": m.state(), "records": r.state()}
                         for c, m, r in zip(self.clocks, self.monitors, self.recorders)]}

    def save(self) -> None:
        """Write :meth:`state` to the checkpoint (if any)."""
        self.checkpoint.save(self.state())

    def resume(self) -> None:
        """Continue from the checkpoint when one exists (checked by :meth:`Checkpoint.load`)."""
        if not self.checkpoint.exists():
            return
        st = self.checkpoint.load([s.digest for s in self.specs], [[str(m) for m in s.modes] for s in self.specs])
        try:
            for k, v in st["params"].items():
                self.net.params[k].copy_(v)
            for g, s in zip(self.gens, st["generators"]):
                g.set_state(s)
            for run, c, m, r in zip(st["runs"], self.clocks, self.monitors, self.recorders):
                c.restore(run["clock"])
                m.restore(run["monitor"])
                r.restore(run["records"])
            self.step_count, self.wall = st["step"], st["wall_s"]
        except (KeyError, TypeError, RuntimeError, ValueError) as exc:
            raise MLPError(f"{self.checkpoint.path} is damaged ({type(exc).__name__}: {exc}); delete it, or rerun "
                           "without --resume, to start the run afresh") from exc

    # pieces of the loop -----------------------------------------------------------------------------------------
    def _record(self, i: int) -> None:
        """Measure run ``i`` at its current time and append to its records; a test loss far above ``L(0)`` is a
        divergence."""
        m = self.net.measure(i, self.tests[i], self.specs[i].support)
        self.recorders[i].add(m, self.clocks[i])
        why = self.monitors[i].observe_test(m.loss)
        if why is not None:
            self._diverged(i, why)

    def _refresh_eta(self) -> None:
        """``λ_top`` on the probe set and ``η = min(eta_max, eta_safety/λ_top)`` for every active run."""
        for i, clock in enumerate(self.clocks):
            if clock.active:
                clock.set_lambda_top(self.net.ntk_top(i, self.probes[i]))

    def _sample(self, runs: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh ``z ~ N(0, I_d)`` for each of ``runs`` (default all) from its ``train`` stream; returns ``x``
        (len(runs), B, d) and ``y = f*`` (len(runs), B)."""
        runs = range(len(self.specs)) if runs is None else runs
        z = torch.empty(len(runs), self.batch, self.net.dim, dtype=self.dtype)
        for j, i in enumerate(runs):
            z[j].normal_(generator=self.gens[i])
        y = torch.stack([self.specs[i].target.evaluate(z[j]) for j, i in enumerate(runs)])
        return z.to(self.device) * self.sqrt_g[list(runs)], y.to(self.device)

    def _diverged(self, i: int, why: str) -> None:
        """Raise :class:`DivergenceError` for run ``i`` with the reason and the advice that fits it."""
        tr, clock = self.specs[i].cfg.training, self.clocks[i]
        advice = (f"use a smaller [training] eta_safety (now {tr.eta_safety:g}, try {tr.eta_safety / 2:g}) or eta_max "
                  f"(now {tr.eta_max:g}), or a smaller ntk_every (now {tr.ntk_every})")
        if tr.batch < SMALL_BATCH:
            advice += (f"; with batch = {tr.batch} the SGD noise is large at this step size, so a larger [training] "
                       "batch also helps")
        raise DivergenceError(
            f"run {i} (seed {tr.seed}, target {self.specs[i].cfg.target.expr!r}, γ = {self.specs[i].gamma}) "
            f"diverged at step {self.step_count}, t = {clock.t:.6g} (η = {clock.eta:.3g}, λ_top = "
            f"{clock.lambda_top:.3g}): {why}; {advice}")

    def _advance(self) -> None:
        """One synchronous step of all active runs, landing exactly on measurement times."""
        if refresh_due(self.step_count, self.specs[0].cfg.training.ntk_every):
            self._refresh_eta()
        stepped = [i for i, c in enumerate(self.clocks) if c.active or self.net.batched]
        steps: list[Step] = [self.clocks[i].plan() for i in stepped]
        x, y = self._sample(stepped)
        losses = self.net.step(x, y, [s.h for s in steps], stepped)
        moved = [(i, loss, s) for i, loss, s in zip(stepped, losses, steps) if self.clocks[i].active]
        for i, loss, _ in moved:
            why = self.monitors[i].observe(loss)
            if why is not None:
                self._diverged(i, why)
        self.step_count += 1
        for i, _, step in moved:
            clock = self.clocks[i]
            clock.advance(step)
            if step.lands:
                self._record(i)
                clock.measured(self.recorders[i].columns["loss"][-1], self.recorders[i].columns["loss"][0])
            if clock.out_of_steps:
                self._stop_early(i)

    def _stop_early(self, i: int) -> None:
        """Run ``i`` ran out of steps: measure where it stopped, mark it incomplete, warn."""
        clock, tr = self.clocks[i], self.specs[i].cfg.training
        if self.recorders[i].last_t != clock.t:
            self._record(i)
        clock.stop()
        warnings.warn(f"run {i} (seed {tr.seed}, target {self.specs[i].cfg.target.expr!r}): t_max = {tr.t_max:g} "
                      f"not reached within max_steps = {tr.max_steps}; stopped at t = {clock.t:.6g} (λ_top = "
                      f"{clock.lambda_top:.3g}, η = {clock.eta:.3g}). Raise [training] max_steps (or eta_max / "
                      "eta_safety, at the cost of accuracy).")

    def _interrupted(self, saved: bool) -> SimulationInterrupted:
        """The exception for Ctrl-C: where the checkpoint is (``saved``: written just now) and how to go on (the
        CLI prints it as ``featureode: interrupted: …``)."""
        where = f"at step {self.step_count}"
        again = "rerun with --resume (compare and validate resume by themselves)"
        if self.checkpoint.path is None:
            return SimulationInterrupted(f"{where}; no output folder, nothing saved")
        if saved:
            return SimulationInterrupted(f"{where}; checkpoint saved at {self.checkpoint.path}; {again}")
        if self.checkpoint.exists():
            return SimulationInterrupted(f"{where} (second Ctrl-C: no new checkpoint); the last checkpoint is kept at "
                                         f"{self.checkpoint.path}; {again}")
        return SimulationInterrupted(f"{where} (second Ctrl-C) before any checkpoint; nothing saved")

    def run(self) -> None:
        """Train until every run is complete or out of steps; checkpoints every ``checkpoint_every`` steps, at the
        end, and on Ctrl-C (then raises :class:`SimulationInterrupted`)."""
        from tqdm import tqdm

        if self.step_count == 0 and not len(self.recorders[0]):
            self._refresh_eta()
            for i in range(len(self.specs)):
                self._record(i)
        every = self.specs[0].cfg.training.checkpoint_every
        t_max = max(float(s.times[-1]) for s in self.specs)
        bar = tqdm(total=t_max, disable=not self.progress, unit="t", dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| t = {n:.4g}/{total:.4g} [{elapsed}<{remaining}{postfix}]")
        start = time.perf_counter() - self.wall
        last_shown = 0.0
        try:
            with _interrupt_flag() as interrupted:
                while any(c.active for c in self.clocks):
                    self._advance()
                    self.wall = time.perf_counter() - start
                    if every > 0 and self.step_count % every == 0:
                        self.save()
                    if interrupted["set"]:
                        self.save()
                        raise self._interrupted(saved=True)
                    if self.progress and self.wall - last_shown > 0.5:
                        last_shown = self.wall
                        self._show(bar)
        except SimulationInterrupted:
            raise
        except KeyboardInterrupt:
            raise self._interrupted(saved=False) from None
        finally:
            self._show(bar)
            bar.close()
        self.save()

    def _show(self, bar: Any) -> None:
        """Progress: the clock of the slowest active run, its last L/L(0) and η, the global step count."""
        active = [i for i, c in enumerate(self.clocks) if c.active] or list(range(len(self.clocks)))
        i = min(active, key=lambda j: self.clocks[j].t)
        lead, loss = self.clocks[i], self.recorders[i].columns["loss"]
        bar.n = min(lead.t, bar.total)
        ratio = loss[-1] / self.initial_loss[i] if loss else float("nan")
        bar.set_postfix_str(f"step {self.step_count}, L/L(0) = {ratio:.3g}, η = {lead.eta:.3g}", refresh=True)

    # results ------------------------------------------------------------------------------------------------------
    def trajectory(self, i: int) -> Trajectory:
        """Run ``i``'s :class:`~featureode.results.trajectory.Trajectory`: DESIGN §6 fields and diagnostics; ``meta`` holds
        ``t_max``, ``device``, ``dtype``, ``compiled``, ``wall_s``, ``batch_runs``, ``n_test``, ``digest``."""
        spec = self.specs[i]
        tr = spec.cfg.training
        meta = {"t_max": tr.t_max, "device": str(self.device), "dtype": tr.dtype, "compiled": tr.compile,
                "wall_s": self.wall, "batch_runs": len(self.specs), "n_test": tr.n_test, "digest": spec.digest}
        return self.recorders[i].trajectory(self.clocks[i], meta)

    def write(self, i: int, folder: Path) -> Trajectory:
        """``folder/mlp.json`` and ``folder/mlp.npz`` (the trajectory and the final parameters ``a``, ``w``, ``b``)
        of run ``i``, written atomically; returns the trajectory."""
        traj = self.trajectory(i)
        traj.save(folder, "mlp", extra_arrays={k: self.net.params[k][i].cpu().numpy() for k in ("a", "w", "b")})
        return traj


def _even_chunk(n: int, target: int) -> int:
    """Chunk size ``≤ target`` that splits ``n`` into equal chunks (up to one shorter last chunk)."""
    return math.ceil(n / math.ceil(n / target))


@contextmanager
def _threads(n: int) -> Iterator[None]:
    """Use ``n`` CPU threads inside the block (0: leave torch's default)."""
    previous = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# ----------------------------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------------------------
def simulate_batch(cfgs: Sequence[Config], out_dir: "str | Path | None" = None, resume: bool = False,
                   progress: bool = True, modes: "Sequence[Mode | str] | Sequence[Sequence[Mode | str]] | None" = None,
                   run_dirs: "Sequence[str | Path] | None" = None, batched: bool | None = None) -> list[Trajectory]:
    """Simulate several runs together in one process; one :class:`~featureode.results.trajectory.Trajectory` (kind
    ``"mlp"``) per config.

    The configs must agree on ``[data] dim``, ``[network] activation, width, parametrization`` and ``[training]
    batch, device, dtype, ntk_every, checkpoint_every, threads, compile``; everything else (seed, target, richness,
    bias_std, spectrum, t_max, step-size rule, test set, measurement times) may differ per run. ``modes``: extra
    modes measured besides each target's own (one list for all runs, or one list per run). With ``out_dir`` the
    batch checkpoint is ``out_dir/checkpoint.pt`` and run ``i`` writes ``mlp.json``/``mlp.npz`` to ``run_dirs[i]``
    (default ``out_dir/run_<i>``, or ``out_dir`` itself for a single run). ``resume`` continues from the checkpoint
    (a missing checkpoint starts afresh). ``batched``: all runs in one set of batched matmuls per step (default: only
    on CUDA; on a CPU run by run is faster). Raises :class:`DivergenceError` when a run diverges,
    :class:`SimulationInterrupted` on Ctrl-C, :class:`MLPError` for a configuration that cannot run.
    """
    if not cfgs:
        raise MLPError("simulate_batch needs at least one config")
    per_run = (modes if modes and not isinstance(modes[0], (str, Mode)) else [modes] * len(cfgs))
    if len(per_run) != len(cfgs):
        raise MLPError(f"got {len(per_run)} mode lists for {len(cfgs)} configs")
    specs = [RunSpec.build(c, m) for c, m in zip(cfgs, per_run)]
    out = Path(out_dir) if out_dir is not None else None
    if run_dirs is not None and len(run_dirs) != len(cfgs):
        raise MLPError(f"got {len(run_dirs)} run_dirs for {len(cfgs)} configs")
    with _threads(cfgs[0].training.threads):
        sim = Simulation(specs, out / "checkpoint.pt" if out is not None else None, progress, batched)
        if resume:
            sim.resume()
        sim.run()
        if out is None and run_dirs is None:
            return [sim.trajectory(i) for i in range(len(specs))]
        return [sim.write(i, Path(run_dirs[i]) if run_dirs is not None else (
                out if len(specs) == 1 else out / f"run_{i}")) for i in range(len(specs))]


def simulate_config(cfg: Config, out_dir: "str | Path | None" = None, resume: bool = False, progress: bool = True,
                    modes: "Sequence[Mode | str] | None" = None) -> Trajectory:
    """Simulate the MLP of one config (DESIGN §3, §6); writes ``out_dir/mlp.json``, ``mlp.npz`` and
    ``checkpoint.pt`` when ``out_dir`` is given. Returns the run's :class:`~featureode.results.trajectory.Trajectory`
    (kind ``"mlp"``): ``t``, ``loss`` (test loss), ``f``, ``f_stderr``, ``lam``, ``r``, ``in_support_loss``, ``t50``,
    ``t10``, ``status``; ``arrays``: ``loss_ratio``, ``eta``, ``lambda_top``, ``steps``, ``lambda_stderr``, ``a2``,
    ``joint``, ``gram``, ``lambda_parts/{readout,weights,bias}`` and their ``lambda_parts_stderr/…``; ``meta``:
    ``t_max``, ``device``, ``dtype``, ``compiled``, ``wall_s``, ``batch_runs``, ``n_test``, ``digest``,
    ``joint_directions``, ``lambda_parts_estimator``."""
    return simulate_batch([cfg], out_dir, resume=resume, progress=progress, modes=modes)[0]
