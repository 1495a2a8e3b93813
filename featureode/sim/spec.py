"""Simulator set-up: devices, seeded random streams, :class:`RunSpec` (one training of a batch) and memory checks."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from featureode.core.errors import FeatureODEError
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.calculus.targets import Target
from featureode.config import MLP_SECTIONS, Config
from featureode.kernel.parametrization import Parametrization, parametrization_of
from featureode.sim.measure import JACKKNIFE_GROUPS, jackknife_groups
from featureode.sim.schedule import measurement_times

STREAMS = ("init", "train", "test", "probe")
CPU_CHUNK = 256           # samples per kernel call on a CPU (activations of a chunk stay in cache)
GPU_MEASURE_CHUNK = 8192  # test samples per kernel call on a GPU at most (training steps take the whole batch)
CHECKPOINT_VERSION = 3    # 3: schedule, divergence window and diagnostics records (2: neuron-major step kernel)
SMALL_BATCH = 64          # below this batch size a divergence message also suggests a larger batch
BATCH_KEYS = {"data": ("dim",), "network": ("activation", "width", "parametrization"),
               "training": ("batch", "device", "dtype", "ntk_every", "checkpoint_every", "threads", "compile")}
class MLPError(FeatureODEError, RuntimeError):
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
        """The run's parametrization (``[network] parametrization`` with the per-group learning rates ``[training]
        lr_scale``)."""
        return parametrization_of(self.cfg)

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




