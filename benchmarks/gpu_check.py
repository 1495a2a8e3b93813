"""The prepared GPU check of the MLP simulator (issue 5): one short script for a session that is lent a GPU.

What it measures, on the device it is given (``--device cuda`` by default):

1. throughput of the simulator's SGD step in its batched layout (all runs in one set of batched matmuls) for
   R = 1, 8, 32, 128 independent runs of the meanfield network (d = 16, N = 1024, B = 2048, relu, float32), in
   run-steps per second and achieved FLOP/s under the nominal count ``6·B·N·(d + 1)`` FLOPs per run-step (the
   pre-activation matmuls of the trained and the initial network and the weight-gradient matmul, 2·B·N·d each, plus
   the output and back-propagation products, 2·B·N each; elementwise work not counted);
2. agreement of a short run on the device with the same run on the CPU (same seeds: samples are drawn on the CPU),
   as the largest relative difference of the test-loss curves;
3. wall time of the built-in default ``compare`` (ODE + MLP) on the device;
4. a sweep of 64 small networks (d = 8, N = 256, B = 512, t_max = 20; 64 seeds × richness values): networks per
   second when trained one at a time, 8 and 64 together (:func:`featureode.sim.mlp.simulate_batch` in the groups that
   :func:`featureode.workflow.sweeps.batch_groups` forms), and the wall time of the whole ``featureode sweep`` (ODE, MLP,
   report per point) on the device.

Writes a Markdown table to ``--out`` (default ``benchmarks/results/gpu_benchmark.md``).
Usage on a GPU machine: ``python benchmarks/gpu_check.py --out $OUT/gpu_benchmark.md``; on a CPU, ``--device cpu
--quick`` checks that the script runs.
"""
from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from featureode.workflow.compare import compare_config
from featureode.config import load_config
from featureode.sim.mlp import RunSpec, Simulation, simulate_config


def throughput(cfg, runs: int, steps: int, device: str) -> float:
    """Run-steps per second of ``runs`` seeds of ``cfg`` stepped together in the batched layout."""
    sim = Simulation([RunSpec.build(cfg.replace(training={"seed": s})) for s in range(runs)], None, False, True)
    every = list(range(runs))
    for _ in range(3):  # warm-up, compilation included
        sim.net.step(*sim._sample(every), [0.1] * runs, every)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        sim.net.step(*sim._sample(every), [0.1] * runs, every)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return steps * runs / (time.perf_counter() - t0)


def sweep_rates(dev: str, quick: bool) -> list[str]:
    """Networks per second of a 64-network sweep trained in groups of 1, 8 and 64, and the wall of the sweep."""
    from featureode.workflow.grid import grid_from_dict
    from featureode.sim.mlp import simulate_batch
    from featureode.workflow.sweeps import batch_groups, make_executor, plan, run_sweep

    n_nets, sizes = (8, (1, 4, 8)) if quick else (64, (1, 8, 64))
    width, batch = (32, 64) if quick else (256, 512)
    grid = grid_from_dict({"set": {"target.expr": "z0*z1", "data.dim": 8, "network.width": width,
                                   "training.batch": batch, "training.t_max": 20.0, "training.n_test": 2000,
                                   "training.n_points": 10, "training.device": dev, "training.threads": 1,
                                   "ode.variants": ["lazy", "displacement"], "ode.basis": "target"},
                           "grid": {"network.richness": [0.05, 0.2, 0.5, 1.0]},
                           "sweep": {"seeds": list(range(n_nets // 4))}}, source="gpu_check")
    with tempfile.TemporaryDirectory() as tmp:
        tasks = [t for _, t in plan(grid, tmp)]
        cfgs = [t.config() for t in tasks]
        lines = ["", f"Sweep of {n_nets} networks (z0*z1, d = 8, N = {width}, B = {batch}, t_max = 20, 4 richness "
                     f"values × {n_nets // 4} seeds), trained in groups by `featureode.workflow.sweeps.batch_groups`:", "",
                 "| networks per group | groups | wall (s) | networks/s |", "|---:|---:|---:|---:|"]
        simulate_batch(cfgs[:1], progress=False)  # warm-up: compilation is not counted
        for size in sizes:
            groups = batch_groups(cfgs, cuda=True, max_size=size)
            t0 = time.perf_counter()
            for g in groups:
                simulate_batch([cfgs[i] for i in g], progress=False)
            wall = time.perf_counter() - t0
            lines.append(f"| {size} | {len(groups)} | {wall:.1f} | {n_nets / wall:.2f} |")
            print(lines[-1], flush=True)
        t0 = time.perf_counter()
        res = run_sweep(grid, Path(tmp) / "sweep", make_executor("local", 1), progress=False)
        wall = time.perf_counter() - t0
    lines += ["", f"`run_sweep` of the same {n_nets} points on the device (ODE + MLP + report per point, networks "
                  f"batched when on CUDA): {wall:.1f} s wall, {len(res.failed)} failed."]
    print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run of the script itself)")
    ap.add_argument("--out", default="benchmarks/results/gpu_benchmark.md")
    args = ap.parse_args()
    dev = args.device
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here; use --device cpu --quick to check the script")
    width, batch, run_counts, steps = (64, 128, (1, 4), 3) if args.quick else (1024, 2048, (1, 8, 32, 128), 20)
    base = load_config().replace(network={"width": width}, training={"batch": batch, "device": dev})
    name = torch.cuda.get_device_name(0) if dev.startswith("cuda") else platform.processor() or "cpu"
    lines = [f"# MLP simulator on {name} (`benchmarks/gpu_check.py`)", "",
             f"torch {torch.__version__}; d = {base.data.dim}, N = {width}, B = {batch}, relu, float32, batched "
             f"layout; {steps} timed steps after 3 warm-up steps.", "",
             "| runs | run-steps/s | achieved GFLOP/s (nominal 6·B·N·(d+1) per run-step) |", "|---:|---:|---:|"]
    flops = 6 * batch * width * (base.data.dim + 1)
    for r in run_counts:
        rate = throughput(base, r, steps, dev)
        lines.append(f"| {r} | {rate:.1f} | {rate * flops / 1e9:.1f} |")
        print(lines[-1], flush=True)

    small = base.replace(training={"t_max": 20.0, "n_test": 4000, "n_points": 10})
    on_dev = simulate_config(small, progress=False).loss
    on_cpu = simulate_config(small.replace(training={"device": "cpu"}), progress=False).loss
    diff = float(np.max(np.abs(np.asarray(on_dev) - on_cpu) / np.asarray(on_cpu)))
    lines += ["", f"Device vs CPU, the same short run (t_max = 20, same seeds): max relative difference of the test "
                  f"loss curve = {diff:.2e}."]
    print(lines[-1], flush=True)

    if not args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            rep = compare_config(load_config().replace(training={"device": dev}), tmp, progress=False)
            wall = time.perf_counter() - t0
        d = rep.variants["displacement"].metrics
        ratios = "no metrics (the variant failed)" if d is None else f"{d.t50_ratio.text()} / {d.t10_ratio.text()}"
        lines += ["", f"Built-in default `compare` on the device: {wall:.1f} s wall; displacement t50/t10 ratios "
                      f"{ratios}."]
        print(lines[-1], flush=True)
    lines += sweep_rates(dev, args.quick)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
