"""Throughput of the MLP simulator's SGD step (featureode.mlp) against a plain PyTorch loop, and batched vs sequential runs.

What is timed: one SGD step of the meanfield network of DESIGN §3 (fresh samples ``z ~ N(0, I_d)``, target
``staircase(2)``, the frozen init network subtracted, rate ``η γ² N``), i.e. sampling + forward + gradient + update;
no measurements or NTK refreshes (those are reported by a full ``simulate_config`` run, see ``--full``).

* ``plain loop (torch.relu)``: the single-run loop a user would write in PyTorch: parameters with
  ``requires_grad``, ``torch.relu``, autograd ``backward()``, manual SGD update;
* ``plain loop (registry σ)``: the same loop with the activation registry's torch function (the one the simulator
  must use);
* ``simulator, eager`` / ``simulator, compiled``: ``MeanFieldBatch.step`` with one run;
* ``8 runs batched`` vs ``8 runs sequential``: 8 runs (seeds) stepped together through batched matmuls against the
  same 8 runs stepped one after the other, in run-steps per second.

Each figure is the median over ``--repeats`` timings of ``--steps`` steps after a warm-up (compilation happens in the
warm-up and is reported separately). Usage: ``python benchmarks/bench_mlp.py [--threads 2] [--full]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from featureode.activations import get_activation
from featureode.config import load_config
from featureode.mlp import RunSpec, _Simulation, simulate_config


def timed(fn: Callable[[], object], steps: int, repeats: int) -> float:
    """Median steps per second of ``fn`` over ``repeats`` timings of ``steps`` calls."""
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        rates.append(steps / (time.perf_counter() - t0))
    return statistics.median(rates)


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


def simulator_step(cfg, runs: int) -> Callable[[], None]:
    """``runs`` seeds of ``cfg`` in one :class:`~featureode.mlp.MeanFieldBatch`; one call = sample + step."""
    sim = _Simulation([RunSpec.build(cfg.replace(training={"seed": s})) for s in range(runs)], None, False)
    lr = torch.full((runs,), 0.5, dtype=torch.float64)

    def step() -> None:
        x, y = sim._sample()
        sim.net.step(x, y, lr).tolist()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--full", action="store_true", help="also time the default staircase(2) run to t_max = 300")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = load_config().replace(data={"dim": args.dim}, network={"width": args.width},
                                 training={"batch": args.batch, "device": "cpu"})
    eager, compiled = base.replace(training={"compile": False}), base.replace(training={"compile": True})
    print(f"MLP step throughput: d = {args.dim}, N = {args.width}, B = {args.batch}, relu, float32, "
          f"{args.threads} CPU thread(s), torch {torch.__version__}; median of {args.repeats} × {args.steps} steps")
    rows: list[tuple[str, float, float]] = []

    def bench(name: str, make: Callable[[], Callable[[], object]], runs: int = 1, calls: int = 1) -> float:
        t0 = time.perf_counter()
        fn = make()
        fn()
        fn()
        warm = time.perf_counter() - t0
        rate = timed(fn, max(1, args.steps // calls), args.repeats) * runs
        rows.append((name, rate, warm))
        print(f"  {name:<40} {rate:8.1f} run-steps/s   (set-up + warm-up {warm:5.1f} s)", flush=True)
        return rate

    relu = get_activation("relu").torch()
    plain = bench("plain loop (torch.relu), 1 run", lambda: plain_loop(base, torch.relu))
    bench("plain loop (registry σ), 1 run", lambda: plain_loop(base, relu))
    bench("simulator, eager, 1 run", lambda: simulator_step(eager, 1))
    single = bench("simulator, compiled, 1 run", lambda: simulator_step(compiled, 1))
    batched = bench("simulator, compiled, 8 runs batched", lambda: simulator_step(compiled, 8), runs=8, calls=8)
    steps8 = [simulator_step(compiled, 1) for _ in range(8)]

    def sequential() -> Callable[[], None]:
        def step() -> None:
            for s in steps8:
                s()
        return step

    seq = bench("simulator, compiled, 8 runs sequential", sequential, runs=8, calls=8)
    e_batched = bench("simulator, eager, 8 runs batched", lambda: simulator_step(eager, 8), runs=8, calls=8)
    e_steps8 = [simulator_step(eager, 1) for _ in range(8)]

    def e_sequential() -> Callable[[], None]:
        def step() -> None:
            for s in e_steps8:
                s()
        return step

    e_seq = bench("simulator, eager, 8 runs sequential", e_sequential, runs=8, calls=8)
    print(f"simulator (compiled) / plain loop (torch.relu): {single / plain:.2f}×")
    print(f"8 runs batched / sequential: compiled {batched / seq:.2f}×, eager {e_batched / e_seq:.2f}×")
    if args.full:
        cfg = load_config().replace(training={"threads": args.threads, "device": "cpu"})
        t0 = time.perf_counter()
        res = simulate_config(cfg, progress=False)
        print(f"default run (staircase(2), d = 16, γ = 0.5, N = 1024, B = 2048, t_max = 300): "
              f"{time.perf_counter() - t0:.1f} s wall ({res['wall_s']:.1f} s in the loop), {res['steps'][-1]} steps, "
              f"t50 = {res['t50']:.3g}, t10 = {res['t10']:.3g}")


if __name__ == "__main__":
    main()
