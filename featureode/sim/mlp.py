"""The reference network of theory §3 ("meanfield") trained by SGD on fresh Gaussian samples, and measured in the
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
processed in chunks whose gradient sums are accumulated before the update (256 samples on a CPU, 128 in the ReLU
step below, so the activations stay in cache: 2× faster than whole-batch steps). Each run keeps its own step size,
clock, samples and measurement times, so its trajectory does not depend on the batch it is in; finished runs stop
costing time on a CPU (on a GPU they stay in the batch with ``η = 0``). With ``[training] compile = true`` (default) the chunk kernels are compiled by
TorchInductor, traced once per chunk shape and called without ``torch.compile``'s guards (fused elementwise work and
reductions, ≈ 10× faster than eager on a CPU; a few seconds of compilation per process, cached on disk; ``torch.compile``
and then eager execution as fallbacks, with a warning when compilation fails). A compiled ReLU run on a CPU takes its
step from one product per chunk for all three gradients and two numba passes instead (outputs and residuals, then
the masked residuals; the generic kernel's sums in another float order, ≈ 2e-7 relative in float32; 1.7× faster
steps, 0.8 of the matrix-product bound; see ``benchmarks/results/mlp_benchmark.md``).

Randomness: one seed per run fixes everything, through independent streams derived from it: ``init`` (parameters),
``train`` (the fresh samples), ``test`` (the test set), ``probe`` (the NTK probe set); all are drawn on the CPU, so a
run's samples do not depend on the device.

Public API: :func:`simulate_config`, :func:`simulate_batch` (both return :class:`~featureode.results.trajectory.Trajectory`
objects, kind ``"mlp"``), :func:`estimate_memory`, and the errors :class:`MLPError`, :class:`DivergenceError`,
:class:`SimulationInterrupted`.

Layout: :mod:`~featureode.sim.spec` (devices, streams, :class:`RunSpec`, memory), :mod:`~featureode.sim.batch` (the
batched network and its kernels), :mod:`~featureode.sim.recorder` (checkpoint, recorder); this module holds the
simulation loop and the public API.
"""
from __future__ import annotations

import math
import signal
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from featureode.core.provenance import provenance
from featureode.calculus.hermite import Mode
from featureode.config import Config, require_config
from featureode.kernel.population import (PopulationError, centred_neurons, has_exact_population_loss,
                                          population_loss)
from featureode.results.trajectory import Trajectory
from featureode.sim.batch import MeanFieldBatch, even_chunk
from featureode.sim.measure import make_test_set
from featureode.sim.recorder import Checkpoint, Recorder
from featureode.sim.schedule import DivergenceMonitor, Schedule, Step, refresh_due
from featureode.sim.spec import (
    BATCH_KEYS,  # noqa: F401  (re-exported)
    CPU_CHUNK,
    SMALL_BATCH,
    DivergenceError,
    MLPError,
    RunSpec,
    SimulationInterrupted,
    _check_batch,
    _measure_chunk,
    check_memory,
    resolve_device,
    stream,
)


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
                 batched: bool | None = None, spread: bool = False):
        """``batched``: step all runs in one set of batched matmuls (default: on CUDA), else run by run;
        ``spread``: also measure the second moment ``‖Kφ_β‖²`` of every measured mode (a second pass over the test
        set at each measurement; it changes neither the training nor any other measurement)."""
        self.specs = list(specs)
        _check_batch(self.specs)
        for k, s in enumerate(self.specs):
            if s.cfg.training.exact_loss and not has_exact_population_loss(s.cfg.network.activation):
                raise MLPError(f"run {k}: [training] exact_loss needs closed-form pair moments (relu, erf), not "
                               f"{s.cfg.network.activation!r}; set exact_loss = false and raise [training] n_test "
                               "for a more precise test-set loss")
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
                                             self.batch if on_gpu else even_chunk(self.batch, CPU_CHUNK))
        self.net.spread = bool(spread)
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
        self.recorders[i].add(m, self.clocks[i], self._exact_loss(i))
        why = self.monitors[i].observe_test(m.loss)
        if why is not None:
            self._diverged(i, why)

    def _stop_reading(self, i: int) -> tuple[float, float]:
        """``(L, L(0))`` that ``stop_loss`` reads for run ``i``: the exact population loss where it is recorded and
        certified (``[training] exact_loss``; the report's MLP times come from it too), else the test set's."""
        cols = self.recorders[i].columns
        exact = cols.get("loss_exact")
        if exact and math.isfinite(exact[-1]) and math.isfinite(exact[0]) and exact[0] > 0:
            return exact[-1], exact[0]
        return cols["loss"][-1], cols["loss"][0]

    def _exact_loss(self, i: int) -> float | None:
        """The exact population loss ``½ E[(f − f*)²]`` of run ``i`` when its config asks for it (``[training]
        exact_loss``): :func:`featureode.kernel.population.population_loss` of its ``2N`` centred neurons, in
        float64."""
        spec = self.specs[i]
        if not spec.cfg.training.exact_loss:
            return None
        p = {k: v[i].detach().to("cpu", torch.float64).numpy() for k, v in self.net.params.items()}
        if not all(np.all(np.isfinite(v)) for v in p.values()):
            return float("nan")   # a diverged network: the test loss's divergence check reports it
        neurons = centred_neurons(p["a"], p["w"], p["b"], p["a0"], p["w0"], p["b0"], self.net.out_scale[i],
                                  spec.spectrum.g)
        try:
            return population_loss(spec.cfg.network.activation, *neurons, spec.target).loss
        except PopulationError as exc:   # an uncertified value is not recorded; the training goes on
            warnings.warn(f"run {i} at t = {self.clocks[i].t:.6g}: exact loss not recorded (NaN): {exc}",
                          RuntimeWarning, stacklevel=2)
            return float("nan")

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
                clock.measured(*self._stop_reading(i))
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
        from tqdm.auto import tqdm

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
        """Run ``i``'s :class:`~featureode.results.trajectory.Trajectory`: theory §6 fields and diagnostics; ``meta`` holds
        ``t_max``, ``device``, ``dtype``, ``compiled``, ``wall_s``, ``batch_runs``, ``n_test``, ``digest``,
        ``provenance`` (:func:`featureode.core.provenance.provenance`, not part of the digest)."""
        spec = self.specs[i]
        tr = spec.cfg.training
        meta = {"t_max": tr.t_max, "device": str(self.device), "dtype": tr.dtype, "compiled": tr.compile,
                "wall_s": self.wall, "batch_runs": len(self.specs), "n_test": tr.n_test, "digest": spec.digest,
                "provenance": provenance(str(self.device))}
        return self.recorders[i].trajectory(self.clocks[i], meta)

    def write(self, i: int, folder: Path) -> Trajectory:
        """``folder/mlp.json`` and ``folder/mlp.npz`` (the trajectory and the final parameters ``a``, ``w``, ``b``)
        of run ``i``, written atomically; returns the trajectory."""
        traj = self.trajectory(i)
        traj.save(folder, "mlp", extra_arrays={k: self.net.params[k][i].cpu().numpy() for k in ("a", "w", "b")})
        return traj


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
                   run_dirs: "Sequence[str | Path] | None" = None, batched: bool | None = None,
                   spread: bool = False) -> list[Trajectory]:
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
    :class:`SimulationInterrupted` on Ctrl-C, :class:`MLPError` for a configuration that cannot run. ``spread``:
    also record ``lambda_second_moment`` (``‖Kφ_β‖²`` of the eNTK for every measured mode) and its jackknife
    ``lambda_second_moment_stderr`` (:class:`~featureode.sim.measure.SpreadSums`; measured: 2–4× the time of a
    measurement without it, on a CPU; the training and every other measurement are unchanged).
    """
    if not cfgs:
        raise MLPError("simulate_batch needs at least one config")
    per_run = (modes if modes and not isinstance(modes[0], (str, Mode)) else [modes] * len(cfgs))
    if len(per_run) != len(cfgs):
        raise MLPError(f"got {len(per_run)} mode lists for {len(cfgs)} configs")
    specs = [RunSpec.build(c, m) for c, m in zip(cfgs, per_run)]  # type: ignore[arg-type]  # per_run holds one mode list per config
    out = Path(out_dir) if out_dir is not None else None
    if run_dirs is not None and len(run_dirs) != len(cfgs):
        raise MLPError(f"got {len(run_dirs)} run_dirs for {len(cfgs)} configs")
    with _threads(cfgs[0].training.threads):
        sim = Simulation(specs, out / "checkpoint.pt" if out is not None else None, progress, batched, spread)
        if resume:
            sim.resume()
        sim.run()
        if out is None and run_dirs is None:
            return [sim.trajectory(i) for i in range(len(specs))]
        return [sim.write(i, Path(run_dirs[i]) if run_dirs is not None else (  # type: ignore[arg-type]  # out is set when run_dirs is not
                out if len(specs) == 1 else out / f"run_{i}")) for i in range(len(specs))]  # type: ignore[operator]  # out is set when run_dirs is not


def simulate_config(cfg: Config, out_dir: "str | Path | None" = None, resume: bool = False, progress: bool = True,
                    modes: "Sequence[Mode | str] | None" = None, spread: bool = False) -> Trajectory:
    """Simulate the MLP of one config (theory §3, §6); writes ``out_dir/mlp.json``, ``mlp.npz`` and
    ``checkpoint.pt`` when ``out_dir`` is given. Returns the run's :class:`~featureode.results.trajectory.Trajectory`
    (kind ``"mlp"``): ``t``, ``loss`` (test loss), ``f``, ``f_stderr``, ``lam``, ``r``, ``in_support_loss``, ``t50``,
    ``t10``, ``status``; ``arrays``: ``loss_ratio``, ``eta``, ``lambda_top``, ``steps``, ``lambda_stderr``, ``a2``,
    ``joint``, ``gram``, ``lambda_parts/{readout,weights,bias}`` and their ``lambda_parts_stderr/…``; ``meta``:
    ``t_max``, ``device``, ``dtype``, ``compiled``, ``wall_s``, ``batch_runs``, ``n_test``, ``digest``,
    ``joint_directions``, ``lambda_parts_estimator``; with ``spread``: ``lambda_second_moment`` and its stderr;
    with ``[training] exact_loss``: ``loss_exact`` and ``loss_exact_ratio`` (the exact population loss,
    :mod:`featureode.kernel.population`) and ``meta`` ``t50_exact``, ``t10_exact`` (see :func:`simulate_batch`)."""
    cfg = require_config(cfg, "simulate_config", MLPError)
    return simulate_batch([cfg], out_dir, resume=resume, progress=progress, modes=modes, spread=spread)[0]
