"""Sweep executors side by side (issue 12): one 16-point grid run sequentially, on 2 local worker processes, and on a
Dask LocalCluster of 2 single-threaded workers, each into a fresh folder (nothing reused).

Each point is a small real comparison (ODE variants + MLP, d = 8, N = 256, B = 512, eager torch, one thread), several
seconds on one core. Goal on 2 cores: ≥ 1.7× over sequential with 2 local workers, Dask within 10% of local. The
load average before and after is recorded because the machine may be shared.

CPU time is sampled with psutil (installed with distributed). Usage:
``PYTHONPATH=. python benchmarks/bench_sweep.py [--out benchmarks/results/sweep_benchmark.md]``.
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
from pathlib import Path

import psutil

from featureode.workflow.grid import grid_from_dict
from featureode.workflow.sweeps import make_executor, run_sweep

GRID = {"set": {"target.expr": "z0*z1", "data.dim": 8, "network.width": 256, "training.batch": 512,
                "training.t_max": 30.0, "training.n_test": 2000, "training.n_points": 12, "training.threads": 1,
                "training.compile": False, "training.device": "cpu", "ode.variants": ["lazy", "displacement"],
                "ode.basis": "target"},
        "grid": {"network.richness": [0.05, 0.2, 0.5, 1.0]}, "sweep": {"seeds": [0, 1, 2, 3]}}


class CPUMeter:
    """CPU seconds of this process and all its descendants (worker pools, forkservers, Dask nannies and workers),
    sampled every 0.2 s so that processes which exit still count (up to their last sample)."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        for p in [me, *me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                self.seen[p.pid] = max(self.seen.get(p.pid, 0.0), t.user + t.system)
            except psutil.Error:
                pass

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def __enter__(self) -> "CPUMeter":
        self._sample()
        self.start = dict(self.seen)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        return sum(v - self.start.get(pid, 0.0) for pid, v in self.seen.items())


def timed(kind: str, jobs: int, out: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and failures of the sweep of :data:`GRID` on one executor."""
    grid = grid_from_dict(GRID, source="bench_sweep")
    with CPUMeter() as meter:
        t0 = time.perf_counter()
        executor = make_executor(kind, jobs)
        try:
            res = run_sweep(grid, out, executor, progress=False)
        finally:
            executor.close()
        wall = time.perf_counter() - t0
    return wall, meter.seconds, len(res.failed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/sweep_benchmark.md")
    args = ap.parse_args()
    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, kind, jobs in (("sequential (this process)", "local", 1), ("local, 2 worker processes", "local", 2),
                                  ("Dask LocalCluster, 2 workers", "dask", 2)):
            wall, cpu, failed = timed(kind, jobs, Path(tmp) / f"{kind}{jobs}")
            rows.append((label, wall, cpu, failed))
            print(f"{label}: {wall:.1f} s wall, {cpu:.1f} s CPU, {failed} failed", flush=True)
    load1 = os.getloadavg()
    seq = rows[0][1]
    lines = ["# Sweep executors (`benchmarks/bench_sweep.py`)", "",
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; 16 points (z0*z1, d = 8, N = 256, "
             "B = 512, t_max = 30, 4 richness values × 4 seeds; ODE lazy + displacement, MLP, report per point), "
             "each executor into a fresh folder. Wall times include starting the workers; CPU is the CPU time of "
             "this process and its workers, so CPU / wall is the number of cores the sweep actually got.", "",
             "| executor | wall (s) | speed-up vs sequential | CPU (s) | CPU / wall | failed |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {label} | {wall:.1f} | {seq / wall:.2f}× | {cpu:.1f} | {cpu / wall:.2f} | {failed} |"
              for label, wall, cpu, failed in rows]
    lines += ["", f"Dask / local-processes wall: {rows[2][1] / rows[1][1]:.2f}. CPU spent beyond the sequential run "
                  f"(starting and feeding the workers): local {rows[1][2] - rows[0][2]:+.1f} s, Dask "
                  f"{rows[2][2] - rows[0][2]:+.1f} s. With 2 free cores the speed-up is at most min(2, CPU / wall); a "
                  "CPU / wall below 1 means the cores were busy with other work. Load average (1, 5, 15 min) before: "
                  f"{', '.join(f'{x:.2f}' for x in load0)}; after: {', '.join(f'{x:.2f}' for x in load1)} "
                  "(a load above the core count means other work shared the cores)."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
