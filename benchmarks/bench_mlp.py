"""Throughput of the MLP simulator's SGD step (featureode.sim.mlp) against a plain PyTorch loop, and batched vs sequential runs.

What is timed: one SGD step of the meanfield network of theory §3 (fresh samples ``z ~ N(0, I_d)``, target
``staircase(2)``, the frozen init network subtracted, rate ``η γ² N``), i.e. sampling + forward + gradient + update;
no measurements or NTK refreshes (those are reported by a full ``simulate_config`` run, see ``--full``).

* ``plain loop (torch.relu)``: the single-run loop a user would write in PyTorch: parameters with
  ``requires_grad``, ``torch.relu``, autograd ``backward()``, manual SGD update;
* ``plain loop (registry σ)``: the same loop with the activation registry's torch function (the one the simulator
  must use);
* ``simulator, eager`` / ``simulator, compiled``: ``MeanFieldBatch.step`` with one run;
* 8 runs (seeds) in one simulation, in its CPU layout (run by run, cache-sized sample chunks) and in its GPU layout
  (all runs in one set of batched matmuls), against the same 8 runs as 8 separate single-run simulations stepped one
  after the other; in run-steps per second;
* ``matmuls alone``: only the matrix products one SGD step of one run cannot avoid, at the simulator's chunk size C:
  per chunk the pre-activations of the trained and of the initial network (two N×d by d×C products, bias added)
  and the weight gradient (an N×C by C×d product), 6·B·N·d FLOPs per step, on preallocated buffers, with no
  activation, reduction, sampling or update; once for one run and once for 8 runs in batched matmuls. A batched
  step does at least the batched products, so "matmuls alone, 8 runs batched" over the sequential rate bounds what
  the batched layout can gain on this machine.

Each figure is the median over ``--repeats`` rounds in which every case takes ``--steps`` steps in turn (round-robin,
so a busy phase of a shared machine affects all cases alike), after a warm-up that includes compilation (reported
separately). Usage: ``python benchmarks/bench_mlp.py [--threads 2] [--full]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Callable

import torch

from featureode.calculus.activations import get_activation
from featureode.config import load_config
from featureode.sim.mlp import CPU_CHUNK, RunSpec, Simulation, simulate_config


def interleaved(cases: dict[str, tuple[Callable[[], object], int]], calls: int, repeats: int,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median run-steps per second of each case ``name: (step function, runs per call)``, timing ``calls`` calls per
    case in round-robin order for ``repeats`` rounds (so a slow phase of a shared machine hits every case alike), by
    ``clock`` (wall time, or ``time.process_time``: the CPU time of this process, all its threads)."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (fn, runs) in cases.items():
            t0 = clock()
            for _ in range(calls):
                fn()
            rates[name].append(calls * runs / (clock() - t0))
    return {name: statistics.median(r) for name, r in rates.items()}


def plain_loop(cfg, act: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], float]:
    """A plain single-run PyTorch training step (autograd), the baseline."""
    spec = RunSpec.build(cfg)
    n, d, batch = cfg.network.width, cfg.data.dim, cfg.training.batch
    gamma, eta = cfg.network.richness, 0.5
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, generator=gen).requires_grad_()
    w = torch.randn(n, d, generator=gen).requires_grad_()
    b = (0.5 * torch.randn(n, generator=gen)).requires_grad_()
    a0, w0, b0 = a.detach().clone(), w.detach().clone(), b.detach().clone()
    sqrt_g = torch.tensor(spec.spectrum.g, dtype=torch.float32).sqrt()
    lr = eta * gamma**2 * n

    def step() -> float:
        z = torch.randn(batch, d, generator=gen)
        x, y = z * sqrt_g, spec.target.evaluate(z)
        with torch.no_grad():
            f0 = act(x @ w0.T + b0) @ a0
        f = (act(x @ w.T + b) @ a - f0) / (gamma * n)
        loss = 0.5 * ((f - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in (a, w, b):
                p -= lr * p.grad
                p.grad = None
        return float(loss)

    return step


def simulator_step(cfg, runs: int, batched: bool) -> Callable[[], None]:
    """``runs`` seeds of ``cfg`` in one :class:`~featureode.sim.mlp.MeanFieldBatch` (batched matmuls or run by run);
    one call = sample + step of every run."""
    sim = Simulation([RunSpec.build(cfg.replace(training={"seed": s})) for s in range(runs)], None, False, batched)
    every = list(range(runs))

    def step() -> None:
        x, y = sim._sample(every)
        sim.net.step(x, y, [0.5] * runs, every)

    return step


def matmul_floor(cfg, runs: int, chunk: int = CPU_CHUNK) -> Callable[[], None]:
    """The three matrix products of one SGD step of ``runs`` runs (see the module docstring) on random data of the
    step's shapes, in the simulator's neuron-major layout: plain matrix products for one run, batched matmuls over
    the run axis for several."""
    n, d, batch = cfg.network.width, cfg.data.dim, cfg.training.batch
    gen = torch.Generator().manual_seed(0)
    w, w0 = torch.randn(runs, n, d, generator=gen), torch.randn(runs, n, d, generator=gen)
    b = torch.randn(runs, n, 1, generator=gen)
    x = torch.randn(runs, chunk, d, generator=gen)
    xt = x.transpose(1, 2).contiguous()
    u, u0, gw = torch.empty(runs, n, chunk), torch.empty(runs, n, chunk), torch.empty(runs, n, d)
    addmm: Any
    mm: Any
    if runs == 1:
        w, w0, b, x, xt, u, u0, gw = (t[0] for t in (w, w0, b, x, xt, u, u0, gw))
        addmm, mm = torch.addmm, torch.mm
    else:
        addmm, mm = torch.baddbmm, torch.bmm

    def step() -> None:
        for _ in range(0, batch, chunk):
            addmm(b, w, xt, out=u)
            addmm(b, w0, xt, out=u0)
            mm(u, x, out=gw)

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--full", action="store_true", help="also time the default staircase(2) run to t_max = 300")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the process's CPU time (time.process_time) instead of wall time (a shared machine)")
    ap.add_argument("--cases", default="", help="only the cases whose name contains one of these comma-separated "
                    "words (e.g. 'simulator,matmuls alone'); the ratios that need a missing case are skipped")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = load_config().replace(data={"dim": args.dim}, network={"width": args.width},
                                 training={"batch": args.batch, "device": "cpu"})
    eager, compiled = base.replace(training={"compile": False}), base.replace(training={"compile": True})
    print(f"MLP step throughput: d = {args.dim}, N = {args.width}, B = {args.batch}, relu, float32, "
          f"{args.threads} CPU thread(s), torch {torch.__version__}; median of {args.repeats} × {args.steps} steps")
    relu = get_activation("relu").torch()

    def sequential() -> Callable[[], None]:
        sims = [simulator_step(compiled.replace(training={"seed": s}), 1, False) for s in range(8)]

        def step() -> None:
            for one in sims:
                one()
        return step

    makers: dict[str, tuple[Callable[[], Callable[[], object]], int]] = {
        "plain loop (torch.relu), 1 run": (lambda: plain_loop(base, torch.relu), 1),
        "plain loop (registry σ), 1 run": (lambda: plain_loop(base, relu), 1),
        "simulator, eager, 1 run": (lambda: simulator_step(eager, 1, False), 1),
        "simulator, compiled, 1 run": (lambda: simulator_step(compiled, 1, False), 1),
        "8 runs in one simulation, run by run": (lambda: simulator_step(compiled, 8, False), 8),
        "8 runs in one simulation, batched bmm": (lambda: simulator_step(compiled, 8, True), 8),
        "8 runs as 8 separate simulations": (sequential, 8),
        "matmuls alone, 1 run": (lambda: matmul_floor(base, 1), 1),
        "matmuls alone, 8 runs batched": (lambda: matmul_floor(base, 8), 8)}
    if args.cases:
        words = [w.strip() for w in args.cases.split(",") if w.strip()]
        makers = {name: m for name, m in makers.items() if any(w in name for w in words)}
    cases: dict[str, tuple[Callable[[], object], int]] = {}
    for name, (make, runs) in makers.items():
        t0 = time.perf_counter()
        fn = make()
        fn()
        fn()
        cases[name] = (fn, runs)
        print(f"  set-up + 2 warm-up steps of {name!r}: {time.perf_counter() - t0:.1f} s (includes compilation)")
    rates = interleaved(cases, args.steps, args.repeats, time.process_time if args.cpu_time else time.perf_counter)
    for name, rate in rates.items():
        print(f"  {name:<40} {rate:8.1f} run-steps/s ({'CPU' if args.cpu_time else 'wall'} time)")
    print(f"load average (1, 5, 15 min) after timing: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if "simulator, compiled, 1 run" in rates and "matmuls alone, 1 run" in rates:
        print(f"simulator (compiled) / its matrix products alone (the bound), 1 run: "
              f"{rates['simulator, compiled, 1 run'] / rates['matmuls alone, 1 run']:.2f}")
    need = ("plain loop (torch.relu), 1 run", "simulator, compiled, 1 run", "8 runs as 8 separate simulations",
            "8 runs in one simulation, run by run", "8 runs in one simulation, batched bmm", "matmuls alone, 1 run",
            "matmuls alone, 8 runs batched")
    if all(n in rates for n in need):
        plain, single = rates["plain loop (torch.relu), 1 run"], rates["simulator, compiled, 1 run"]
        seq = rates["8 runs as 8 separate simulations"]
        print(f"simulator (compiled) / plain loop (torch.relu): {single / plain:.2f}×")
        print(f"8 runs in one simulation / 8 separate simulations: run by run "
              f"{rates['8 runs in one simulation, run by run'] / seq:.2f}×, batched bmm "
              f"{rates['8 runs in one simulation, batched bmm'] / seq:.2f}×")
        mm1, mm8 = rates["matmuls alone, 1 run"], rates["matmuls alone, 8 runs batched"]
        other = 1 / single - 1 / mm1  # the single-run step's time outside the three products, per run-step
        print(f"goal 'batched ≥ 2× sequential': the batched products alone (the least a batched step does) run at "
              f"{mm8 / seq:.2f}× the sequential rate; with the single-run step's other work added per run, "
              f"≈ {1 / (1 / mm8 + other) / seq:.2f}×; measured (batched bmm): "
              f"{rates['8 runs in one simulation, batched bmm'] / seq:.2f}×")
    if args.full:
        cfg = load_config().replace(training={"threads": args.threads, "device": "cpu"})
        t0 = time.perf_counter()
        res = simulate_config(cfg, progress=False)
        print(f"default run (staircase(2), d = 16, γ = 0.5, N = 1024, B = 2048, t_max = 300): "
              f"{time.perf_counter() - t0:.1f} s wall ({res.meta['wall_s']:.1f} s in the loop), {res.arrays['steps'][-1]} "
              f"steps, t50 = {res.t50:.3g}, t10 = {res.t10:.3g}")


if __name__ == "__main__":
    main()
