"""The reference network of DESIGN §3 ("meanfield") trained by SGD on fresh Gaussian samples, and measured in the
units of the feature ODE (``featureode.measure``).

Model, for one run with richness ``γ`` and width ``N`` (inputs in eigen-coordinates, ``x_i = sqrt(g_i) z_i``)::

    f(x) = (1/(γN)) Σ_k a_k σ(w_k·x + b_k) − f_init(x),   a_k ~ N(0, 1), w_k ~ N(0, I_d), b_k ~ N(0, σ_b²),

where ``f_init`` is the same network with the frozen initial parameters ``(a⁰, w⁰, b⁰)`` (the output is centred on
the network at init, so ``f = 0`` at ``t = 0``), and ``σ`` is the activation registry's torch function.

Training: plain SGD on the batch mean of ``½ (f − y)²``, ``y = f*(x)``, with learning rate ``η γ² N`` and fresh
samples every step; ``t = Σ η`` is gradient-flow time, in which ``df/dt = −E_{x'}[Θ(x, x') (f − y)(x')]`` with the
O(1), γ-independent NTK ``Θ = γ² N ∇_θ f·∇_θ f'``. With ``∂f/∂a_k = σ_k/(γN)``, ``∂f/∂w_k = a_k σ'_k x/(γN)``,
``∂f/∂b_k = a_k σ'_k/(γN)`` the step is

    a_k −= (η γ/B) Σ_b r_b σ_bk,   w_k −= (η γ/B) Σ_b r_b a_k σ'_bk x_b,   b_k −= (η γ/B) Σ_b r_b a_k σ'_bk,

``r_b = f(x_b) − y_b``: exactly SGD with rate ``η γ² N`` (checked against autograd in the tests), written out so
that ``σ`` and ``σ'`` come from one forward-mode pass (``torch.func.jvp``) and the sums over samples are matmuls.

Step size: ``η = min(eta_max, eta_safety/λ_top)``, with ``λ_top`` the top eigenvalue of the empirical NTK
``γ² N J Jᵀ/P`` on a fixed probe set of ``P = ntk_probe`` samples (``J`` = per-sample parameter gradients from
``torch.func.vmap(torch.func.grad(f))``, all ``N`` neurons), re-measured every ``ntk_every`` steps; the last step
before a measurement time is shortened to land on it exactly. A run ends at ``t_max``; at ``max_steps`` (marked
incomplete, with a warning); or, when ``[training] stop_loss > 0``, at the first measurement with
``L/L(0) ≤ stop_loss`` (marked complete: its curve ends there).

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

Public API: :func:`simulate_config`, :func:`simulate_batch` (and :class:`DivergenceError`, :class:`MLPError`).
"""
from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from .activations import get_activation
from .config import MLP_SECTIONS, Config
from .data import Spectrum
from .hermite import Mode
from .measure import ChunkSums, Measurement, TestSet, finish_measurement, make_test_set, measurement_times
from .metrics import crossing_time, in_support_loss
from .targets import Target

STREAMS = ("init", "train", "test", "probe")
CPU_CHUNK = 256           # samples per kernel call on a CPU (activations of a chunk stay in cache)
GPU_MEASURE_CHUNK = 8192  # test samples per kernel call on a GPU (training steps take the whole batch at once)
DIVERGENCE_FACTOR = 10.0  # a batch loss above this × L(0) counts as divergence
CHECKPOINT_VERSION = 2  # 2: neuron-major step kernel (other float rounding than version 1)
_BATCH_KEYS = {"data": ("dim",), "network": ("activation", "width"),
               "training": ("batch", "device", "dtype", "ntk_every", "checkpoint_every", "threads", "compile")}


class MLPError(RuntimeError):
    """A simulation that cannot run as configured (incompatible batch, foreign checkpoint)."""


class DivergenceError(MLPError):
    """Training diverged: a non-finite value or a batch loss above ``DIVERGENCE_FACTOR × L(0)``."""


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
    target's support); ``times`` are the measurement times (``t = 0`` first).
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
    def digest(self) -> str:
        """Digest of the config sections that define the simulation."""
        return self.cfg.digest(MLP_SECTIONS)


def _check_batch(specs: Sequence[RunSpec]) -> None:
    """Runs share one set of stacked tensors: the keys of :data:`_BATCH_KEYS` must agree."""
    first = specs[0].cfg
    for i, s in enumerate(specs[1:], 1):
        for sec, keys in _BATCH_KEYS.items():
            for key in keys:
                a, b = getattr(getattr(first, sec), key), getattr(getattr(s.cfg, sec), key)
                if a != b:
                    raise MLPError(f"runs 0 and {i} differ in [{sec}] {key} ({a!r} vs {b!r}); a batch of runs must "
                                   f"share {', '.join(f'[{k}] ' + ', '.join(v) for k, v in _BATCH_KEYS.items())}")


# ----------------------------------------------------------------------------------------------------------------
# the batched network and its kernels
# ----------------------------------------------------------------------------------------------------------------
def _kernels(act: Callable[[torch.Tensor], torch.Tensor]) -> tuple[Callable, Callable]:
    """The SGD step and the measurement-chunk statistics for activation ``act``, as pure tensor functions.

    Shapes: ``w, w0`` (R, N, d); ``b, b0, a, a0`` (R, N); ``x`` (R, C, d) and ``y`` (R, C) for a chunk of C samples;
    ``scale = 1/(γN)`` (R, 1).
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
        """Centred output ``(Σ_k a_k σ_k − Σ_k a⁰_k σ⁰_k)/(γN)``, shape (R, C) (a reduction the compiler fuses with
        the activation, not a matrix-vector product)."""
        return (s * a.unsqueeze(2) - s0 * a0.unsqueeze(2)).sum(1) * scale

    def gradients(w: torch.Tensor, b: torch.Tensor, a: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor,
                  a0: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                  scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sums over the chunk: ``Σ_b r_b a_k σ'_bk x_b`` (R, N, d), ``Σ_b r_b a_k σ'_bk`` (R, N), ``Σ_b r_b σ_bk``
        (R, N) and ``Σ_b r_b²`` (R,), with ``r = f − y`` (the gradients of ``½ Σ_b r_b²`` times ``γN``)."""
        s, ds, s0 = features(w, b, w0, b0, x)
        r = output(s, s0, a, a0, scale) - y
        g = ds * a.unsqueeze(2) * r.unsqueeze(1)
        return torch.bmm(g, x), g.sum(2), (s * r.unsqueeze(1)).sum(2), (r * r).sum(1)

    def chunk_sums(w: torch.Tensor, b: torch.Tensor, a: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor,
                   a0: torch.Tensor, x: torch.Tensor, y: torch.Tensor, h: torch.Tensor, x_sq: torch.Tensor,
                   weight: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The fields of :class:`~featureode.measure.ChunkSums` for one run (R = 1) over one chunk; ``x`` (1, C, d),
        ``y`` (1, C), ``h`` (C, M), ``x_sq`` and ``weight`` (C,)."""
        s, ds, s0 = features(w, b, w0, b0, x)
        f = output(s, s0, a, a0, scale)[0]
        s, ds, xc, hc = s[0].T, ds[0].T, x[0], h
        width = s.shape[1]
        theta = ((s * s).sum(1) + (x_sq + 1) * ((ds * ds) @ (a[0] * a[0]))) / width
        hx = (hc.unsqueeze(2) * xc.unsqueeze(1)).reshape(xc.shape[0], -1)             # (C, M·d)
        hdx = (hx.T @ ds).reshape(hc.shape[1], xc.shape[1], width).transpose(1, 2)      # (M, N, d)
        return ((weight * (f - y[0]).square()).sum(), hc.T @ f, (hc * hc).T @ (f * f), hc.T @ s, hc.T @ ds, hdx,
                (hc * hc).T @ theta)

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
    """``R`` independent meanfield networks of width ``N`` on ``d`` inputs, parameters stacked on a leading run axis.

    ``params``: ``w`` (R, N, d), ``b`` (R, N), ``a`` (R, N) trained; ``w0``, ``b0``, ``a0`` the frozen initial copy
    that defines ``f_init``. ``gamma``: the richness of each run (R,).

    Execution: with ``batched`` every step processes all runs in one set of batched matmuls (the GPU layout); otherwise
    runs are stepped one after another (on a CPU this is faster: batching adds no arithmetic efficiency there and
    multiplies the working set). Either way the samples of a step are processed in chunks of ``chunk`` samples whose
    gradient sums are accumulated before the update, so the activations of a chunk stay cache-sized on a CPU.
    """

    def __init__(self, params: dict[str, torch.Tensor], gamma: Sequence[float], activation: str, compile: bool,
                 batched: bool, chunk: int):
        self.params = params
        w = params["w"]
        self.runs, self.width, self.dim = w.shape
        self.gamma = torch.tensor(list(gamma), dtype=torch.float64)
        self.scale = (1.0 / (self.gamma * self.width)).to(w).unsqueeze(1)
        self.act = get_activation(activation).torch()
        self.batched, self.chunk = batched, chunk
        grads, sums = _kernels(self.act)
        self._grads = _Compiled(grads, compile)
        self._sums = _Compiled(sums, compile)

    @classmethod
    def initialize(cls, specs: Sequence[RunSpec], device: torch.device, dtype: torch.dtype, compile: bool,
                   batched: bool, chunk: int) -> "MeanFieldBatch":
        """Draw ``a ~ N(0,1)``, ``w ~ N(0, I_d)``, ``b ~ N(0, σ_b²)`` per run from its ``init`` stream (float64 on
        the CPU, then cast, so the draw does not depend on device or dtype)."""
        n, d = specs[0].cfg.network.width, specs[0].spectrum.dim
        cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("w", "b", "a")}
        for s in specs:
            gen = stream(s.cfg.training.seed, "init")
            cols["a"].append(torch.randn(n, generator=gen, dtype=torch.float64))
            cols["w"].append(torch.randn(n, d, generator=gen, dtype=torch.float64))
            cols["b"].append(torch.randn(n, generator=gen, dtype=torch.float64) * s.cfg.network.bias_std)
        params = {k: torch.stack(v).to(device=device, dtype=dtype) for k, v in cols.items()}
        params.update({k + "0": v.clone() for k, v in params.items()})
        return cls(params, [s.gamma for s in specs], specs[0].cfg.network.activation, compile, batched, chunk)

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: Sequence[float], runs: Sequence[int]) -> list[float]:
        """One SGD step of ``runs`` (all runs when ``batched``) with gradient-flow increments ``lr = η`` (0 freezes a
        run) on samples ``x`` (len(runs), B, d), ``y`` (len(runs), B); the SGD rate is ``η γ² N``. Returns the batch
        losses ``½ mean_b r_b²`` before the step."""
        if self.batched:
            if list(runs) != list(range(self.runs)):
                raise MLPError("a batched step takes every run (give finished runs lr = 0)")
            return self._step_group(slice(0, self.runs), x, y, lr)
        return [loss for j, i in enumerate(runs)
                for loss in self._step_group(slice(i, i + 1), x[j:j + 1], y[j:j + 1], lr[j:j + 1])]

    def _step_group(self, runs: slice, x: torch.Tensor, y: torch.Tensor, lr: Sequence[float]) -> list[float]:
        """Accumulate the chunk gradient sums of the runs ``runs`` (a slice, so parameters are updated through
        views), then ``θ −= (η γ / B) Σ_b …`` (``∂f/∂θ`` carries ``1/(γN)``, the rate ``η γ² N``)."""
        p = [self.params[k][runs] for k in PARAMS]
        scale, batch = self.scale[runs], x.shape[1]
        total: tuple[torch.Tensor, ...] | None = None
        for lo in range(0, batch, self.chunk):
            part = self._grads(*p, x[:, lo:lo + self.chunk], y[:, lo:lo + self.chunk], scale)
            total = part if total is None else tuple(u + v for u, v in zip(total, part))
        grad_w, grad_b, grad_a, sq = total
        coef = (torch.tensor(list(lr), dtype=torch.float64) * self.gamma[runs] / batch).to(x).unsqueeze(1)
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

    def measure(self, run: int, test: TestSet) -> Measurement:
        """Test loss, projections, eNTK Rayleigh quotients and ``r_i`` of one run on its test set (all samples, all
        neurons; see :mod:`featureode.measure`)."""
        args, scale = [self.params[k][run:run + 1] for k in PARAMS], self.scale[run:run + 1]
        total: ChunkSums | None = None
        with torch.no_grad():
            for x, y, h, x_sq, weight in test.chunks():
                part = ChunkSums(*self._sums(*args, x[None], y[None], h, x_sq, weight, scale))
                if total is None:
                    total = part
                else:
                    total += part
        return finish_measurement(total, test.n, self.params["a"][run], self.params["w"][run])

    def ntk_top(self, run: int, probe: torch.Tensor) -> float:
        """Top eigenvalue of the empirical NTK ``γ² N J Jᵀ / P`` of one run on the probe inputs (P, d), with
        ``J`` the per-sample gradients of ``f`` with respect to the trained ``(a, w, b)`` (all neurons)."""
        p = self.params
        theta = {k: p[k][run] for k in ("a", "w", "b")}
        gamma, width = float(self.gamma[run]), self.width

        def f_single(th: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            return (th["a"] * self.act(th["w"] @ x + th["b"])).sum() / (gamma * width)

        jac = torch.func.vmap(torch.func.grad(f_single), in_dims=(None, 0))(theta, probe)
        j = torch.cat([jac[k].reshape(probe.shape[0], -1) for k in ("a", "w", "b")], dim=1)
        gram = (gamma**2 * width / probe.shape[0]) * (j @ j.T)
        return float(torch.linalg.eigvalsh(gram.double())[-1])


# ----------------------------------------------------------------------------------------------------------------
# the simulation loop
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class _RunState:
    """Mutable per-run state: clock ``t``, step size ``eta``, ``lambda_top``, index of the next measurement time,
    SGD steps taken, whether it still trains, and its measurements so far."""

    t: float = 0.0
    eta: float = 0.0
    lambda_top: float = float("nan")
    next_index: int = 1
    steps: int = 0
    active: bool = True
    complete: bool = False
    records: dict[str, list] = field(default_factory=lambda: {k: [] for k in (
        "t", "loss", "f", "f_stderr", "lambda", "r", "eta", "lambda_top", "steps")})


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


class _Simulation:
    """Trains a batch of runs to their ``t_max`` (or ``max_steps``), measuring at each run's measurement times."""

    def __init__(self, specs: Sequence[RunSpec], checkpoint: Path | None, progress: bool,
                 batched: bool | None = None):
        """``batched``: step all runs in one set of batched matmuls (default: on CUDA), else run by run."""
        self.specs = list(specs)
        _check_batch(self.specs)
        tr = self.specs[0].cfg.training
        self.device = resolve_device(tr.device)
        self.dtype = getattr(torch, tr.dtype)
        self.batch = tr.batch
        self.checkpoint = checkpoint
        self.progress = progress
        on_gpu = self.device.type == "cuda"
        self.net = MeanFieldBatch.initialize(self.specs, self.device, self.dtype, tr.compile,
                                             on_gpu if batched is None else batched,
                                             self.batch if on_gpu else _even_chunk(self.batch, CPU_CHUNK))
        measure_chunk = GPU_MEASURE_CHUNK if on_gpu else CPU_CHUNK
        self.tests = [make_test_set(s.spectrum, s.target, s.modes, s.cfg.training.n_test, stream(s.cfg.training.seed,
                                    "test"), self.device, self.dtype, measure_chunk) for s in self.specs]
        self.probes = [s.spectrum.to_x(torch.randn(s.cfg.training.ntk_probe, s.spectrum.dim, dtype=torch.float64,
                                                   generator=stream(s.cfg.training.seed, "probe")))
                       .to(self.device, self.dtype) for s in self.specs]
        self.sqrt_g = torch.tensor(np.sqrt(np.stack([s.spectrum.g for s in self.specs])),
                                   dtype=self.dtype).unsqueeze(1).to(self.device)
        self.gens = [stream(s.cfg.training.seed, "train") for s in self.specs]
        self.runs = [_RunState() for _ in self.specs]
        self.initial_loss = [t.initial_loss for t in self.tests]
        self.step_count = 0
        self.wall = 0.0

    # checkpoints ------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically: parameters, generator states, clocks, measurements."""
        return {"version": CHECKPOINT_VERSION, "digests": [s.digest for s in self.specs],
                "modes": [[str(m) for m in s.modes] for s in self.specs],
                "params": {k: v.detach().cpu().clone() for k, v in self.net.params.items()},
                "generators": [g.get_state() for g in self.gens], "step": self.step_count, "wall_s": self.wall,
                "runs": [{k: getattr(r, k) for k in r.__dataclass_fields__} for r in self.runs]}

    def save(self) -> None:
        """Write :meth:`state` atomically to the checkpoint path (if any)."""
        if self.checkpoint is None:
            return
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint.with_suffix(".tmp")
        torch.save(self.state(), tmp)
        os.replace(tmp, self.checkpoint)

    def load(self, path: Path) -> None:
        """Restore a checkpoint written by :meth:`save` for the same configs and modes."""
        st = torch.load(path, map_location="cpu", weights_only=True)
        if st.get("version") != CHECKPOINT_VERSION:
            raise MLPError(f"{path}: checkpoint format {st.get('version')!r}, this featureode writes and resumes "
                           f"{CHECKPOINT_VERSION}; delete the checkpoint (or choose another --out) to start the run "
                           "afresh")
        if st["digests"] != [s.digest for s in self.specs] or st["modes"] != [[str(m) for m in s.modes]
                                                                            for s in self.specs]:
            raise MLPError(f"{path} was written for a different configuration or mode set; delete it or "
                           "run without resume")
        for k, v in st["params"].items():
            self.net.params[k].copy_(v)
        for g, s in zip(self.gens, st["generators"]):
            g.set_state(s)
        self.step_count, self.wall = st["step"], st["wall_s"]
        self.runs = [_RunState(**r) for r in st["runs"]]

    # pieces of the loop -----------------------------------------------------------------------------------------
    def _record(self, i: int) -> None:
        """Measure run ``i`` at its current time and append to its records."""
        run, m = self.runs[i], self.net.measure(i, self.tests[i])
        rec = run.records
        for key, val in (("t", run.t), ("loss", m.loss), ("f", m.f.tolist()), ("f_stderr", m.f_stderr.tolist()),
                         ("lambda", m.lam.tolist()), ("r", m.r.tolist()), ("eta", run.eta),
                         ("lambda_top", run.lambda_top), ("steps", run.steps)):
            rec[key].append(val)

    def _refresh_eta(self) -> None:
        """``λ_top`` on the probe set and ``η = min(eta_max, eta_safety/λ_top)`` for every active run."""
        for i, run in enumerate(self.runs):
            if run.active:
                tr = self.specs[i].cfg.training
                run.lambda_top = self.net.ntk_top(i, self.probes[i])
                run.eta = min(tr.eta_max, tr.eta_safety / run.lambda_top if run.lambda_top > 0 else math.inf)

    def _sample(self, runs: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh ``z ~ N(0, I_d)`` for each of ``runs`` (default all) from its ``train`` stream; returns ``x``
        (len(runs), B, d) and ``y = f*`` (len(runs), B)."""
        runs = range(len(self.specs)) if runs is None else runs
        z = torch.empty(len(runs), self.batch, self.net.dim, dtype=self.dtype)
        for j, i in enumerate(runs):
            z[j].normal_(generator=self.gens[i])
        y = torch.stack([self.specs[i].target.evaluate(z[j]) for j, i in enumerate(runs)])
        return z.to(self.device) * self.sqrt_g[list(runs)], y.to(self.device)

    def _check(self, i: int, loss: float, lr: float) -> None:
        """Raise :class:`DivergenceError` when run ``i``'s batch loss is non-finite or above 10× its ``L(0)``."""
        if not (math.isfinite(loss) and loss <= DIVERGENCE_FACTOR * self.initial_loss[i]):
            tr, run = self.specs[i].cfg.training, self.runs[i]
            raise DivergenceError(
                f"run {i} (seed {tr.seed}, target {self.specs[i].cfg.target.expr!r}, γ = {self.specs[i].gamma}) "
                f"diverged at step {self.step_count}, t = {run.t:.6g} (η = {lr:.3g}, λ_top = {run.lambda_top:.3g}): "
                f"batch loss {loss:.3g} vs L(0) = {self.initial_loss[i]:.3g}; use a smaller [training] eta_safety "
                f"(now {tr.eta_safety:g}, try {tr.eta_safety / 2:g}) or eta_max (now {tr.eta_max:g}), or a smaller "
                f"ntk_every (now {tr.ntk_every})")

    def _advance(self) -> None:
        """One synchronous step of all active runs, landing exactly on measurement times."""
        if self.step_count % self.specs[0].cfg.training.ntk_every == 0 and self.step_count > 0:
            self._refresh_eta()
        stepped = [i for i, r in enumerate(self.runs) if r.active or self.net.batched]
        lr, landing = [], []
        for i in stepped:
            run = self.runs[i]
            gap = float(self.specs[i].times[run.next_index]) - run.t if run.active else 0.0
            landing.append(run.active and gap <= run.eta * (1 + 1e-9))
            lr.append(gap if landing[-1] or not run.active else run.eta)
        x, y = self._sample(stepped)
        losses = self.net.step(x, y, lr, stepped)
        moved = [(i, loss, h, land) for i, loss, h, land in zip(stepped, losses, lr, landing) if self.runs[i].active]
        for i, loss, h, _ in moved:
            self._check(i, loss, h)
        self.step_count += 1
        for i, _, h, land in moved:
            run, times = self.runs[i], self.specs[i].times
            run.steps += 1
            run.t = float(times[run.next_index]) if land else run.t + h
            if land:
                self._record(i)
                run.next_index += 1
                floor = self.specs[i].cfg.training.stop_loss
                if run.next_index == len(times) or run.records["loss"][-1] <= floor * run.records["loss"][0]:
                    run.active, run.complete = False, True
            if run.active and run.steps >= self.specs[i].cfg.training.max_steps:
                self._stop_early(i)

    def _stop_early(self, i: int) -> None:
        """Run ``i`` ran out of steps: measure where it stopped, mark it incomplete, warn."""
        run, tr = self.runs[i], self.specs[i].cfg.training
        if run.records["t"][-1] != run.t:
            self._record(i)
        run.active = False
        warnings.warn(f"run {i} (seed {tr.seed}, target {self.specs[i].cfg.target.expr!r}): t_max = {tr.t_max:g} "
                      f"not reached within max_steps = {tr.max_steps}; stopped at t = {run.t:.6g} (λ_top = "
                      f"{run.lambda_top:.3g}, η = {run.eta:.3g}). Raise [training] max_steps (or eta_max / eta_safety, at "
                      "the cost of accuracy).")

    def run(self) -> None:
        """Train until every run is complete or out of steps; checkpoints every ``checkpoint_every`` steps, at the
        end, and on Ctrl-C (then re-raises ``KeyboardInterrupt``)."""
        from tqdm import tqdm

        if self.step_count == 0 and not self.runs[0].records["t"]:
            self._refresh_eta()
            for i in range(len(self.runs)):
                self._record(i)
        every = self.specs[0].cfg.training.checkpoint_every
        t_max = max(float(s.times[-1]) for s in self.specs)
        bar = tqdm(total=t_max, disable=not self.progress, unit="t", dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| t = {n:.4g}/{total:.4g} [{elapsed}<{remaining}{postfix}]")
        start = time.perf_counter() - self.wall
        last_shown = 0.0
        try:
            with _interrupt_flag() as interrupted:
                while any(r.active for r in self.runs):
                    self._advance()
                    self.wall = time.perf_counter() - start
                    if every > 0 and self.step_count % every == 0:
                        self.save()
                    if interrupted["set"]:
                        self.save()
                        where = f"; checkpoint saved to {self.checkpoint}" if self.checkpoint else ""
                        raise KeyboardInterrupt(f"simulation interrupted at step {self.step_count}{where} "
                                                "(continue with resume=True / --resume)")
                    if self.progress and self.wall - last_shown > 0.5:
                        last_shown = self.wall
                        self._show(bar)
        finally:
            self._show(bar)
            bar.close()
        self.save()

    def _show(self, bar: Any) -> None:
        """Progress: the clock of the slowest active run, its last L/L(0) and η, the global step count."""
        active = [r for r in self.runs if r.active] or self.runs
        lead = min(active, key=lambda r: r.t)
        i = self.runs.index(lead)
        bar.n = min(lead.t, bar.total)
        ratio = lead.records["loss"][-1] / self.initial_loss[i] if lead.records["loss"] else float("nan")
        bar.set_postfix_str(f"step {self.step_count}, L/L(0) = {ratio:.3g}, η = {lead.eta:.3g}", refresh=True)

    # results ------------------------------------------------------------------------------------------------------
    def result(self, i: int) -> dict[str, Any]:
        """The run's trajectory with the keys of DESIGN §6 plus diagnostics (JSON-ready lists and floats)."""
        spec, run = self.specs[i], self.runs[i]
        rec = run.records
        loss = np.asarray(rec["loss"], float)
        ratio = loss / loss[0]
        tr = spec.cfg.training
        return {"modes": [str(m) for m in spec.modes], "target": spec.v.tolist(), "t": list(rec["t"]),
                "loss": loss.tolist(), "loss_ratio": ratio.tolist(),
                "in_support_loss": in_support_loss(np.asarray(rec["f"]), spec.v).tolist(),
                "t50": crossing_time(rec["t"], ratio, 0.5), "t10": crossing_time(rec["t"], ratio, 0.1),
                "f": rec["f"], "f_stderr": rec["f_stderr"], "lambda": rec["lambda"], "r": rec["r"],
                "eta": rec["eta"], "lambda_top": rec["lambda_top"], "steps": rec["steps"],
                "reached_t": run.t, "complete": run.complete, "t_max": tr.t_max,
                "device": str(self.device), "dtype": tr.dtype, "compiled": tr.compile, "wall_s": self.wall,
                "batch_runs": len(self.specs), "n_test": tr.n_test, "digest": spec.digest}

    def write(self, i: int, folder: Path) -> None:
        """``folder/mlp.json`` and ``folder/mlp.npz`` (trajectory arrays and the final parameters) of run ``i``."""
        folder.mkdir(parents=True, exist_ok=True)
        res = self.result(i)
        (folder / "mlp.json").write_text(json.dumps(_json_ready(res), indent=1))
        arrays = {k: np.asarray(res[k], float) for k in ("t", "loss", "loss_ratio", "in_support_loss", "f",
                                                         "f_stderr", "lambda", "r", "eta", "lambda_top", "target")}
        arrays.update({k: self.net.params[k][i].cpu().numpy() for k in ("a", "w", "b")})
        np.savez(folder / "mlp.npz", modes=np.array(res["modes"]), steps=np.asarray(res["steps"]), **arrays)


def _even_chunk(n: int, target: int) -> int:
    """Chunk size ``≤ target`` that splits ``n`` into equal chunks (up to one shorter last chunk)."""
    return math.ceil(n / math.ceil(n / target))


def _json_ready(obj: Any) -> Any:
    """Replace non-finite floats by ``None`` (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_ready(v) for v in obj]
    return obj


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
                   run_dirs: "Sequence[str | Path] | None" = None, batched: bool | None = None) -> list[dict[str, Any]]:
    """Simulate several runs together in one process; one result dict per config.

    The configs must agree on ``[data] dim``, ``[network] activation, width`` and ``[training] batch, device, dtype,
    ntk_every, checkpoint_every, threads, compile``; everything else (seed, target, richness, bias_std, spectrum,
    t_max, step-size rule, test set, measurement times) may differ per run. ``modes``: extra modes measured besides
    each target's own (one list for all runs, or one list per run). With ``out_dir`` the batch checkpoint is
    ``out_dir/checkpoint.pt`` and run ``i`` writes ``mlp.json``/``mlp.npz`` to ``run_dirs[i]`` (default
    ``out_dir/run_<i>``, or ``out_dir`` itself for a single run). ``resume`` continues from the checkpoint (a
    missing checkpoint starts afresh). ``batched``: all runs in one set of batched matmuls per step (default: only on
    CUDA; on a CPU run by run is faster). Raises :class:`DivergenceError` when a run diverges.
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
        sim = _Simulation(specs, out / "checkpoint.pt" if out is not None else None, progress, batched)
        if resume and sim.checkpoint is not None and sim.checkpoint.exists():
            sim.load(sim.checkpoint)
        sim.run()
        if out is not None or run_dirs is not None:
            for i in range(len(specs)):
                folder = Path(run_dirs[i]) if run_dirs is not None else (
                    out if len(specs) == 1 else out / f"run_{i}")
                sim.write(i, folder)
        return [_json_ready(sim.result(i)) for i in range(len(specs))]


def simulate_config(cfg: Config, out_dir: "str | Path | None" = None, resume: bool = False, progress: bool = True,
                    modes: "Sequence[Mode | str] | None" = None) -> dict[str, Any]:
    """Simulate the MLP of one config (DESIGN §3, §6); writes ``out_dir/mlp.json``, ``mlp.npz`` and
    ``checkpoint.pt`` when ``out_dir`` is given. Returns the result dict: ``modes``, ``t``, ``loss``,
    ``in_support_loss``, ``t50``, ``t10``, ``f``, ``f_stderr``, ``lambda``, ``r`` (lists indexed [time][mode or
    dimension]), plus ``target``, ``loss_ratio``, ``eta``, ``lambda_top``, ``steps``, ``reached_t``, ``complete``,
    ``t_max``, ``device``, ``dtype``, ``compiled``, ``wall_s``, ``batch_runs``, ``n_test``, ``digest``."""
    return simulate_batch([cfg], out_dir, resume=resume, progress=progress, modes=modes)[0]
