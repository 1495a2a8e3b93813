"""Timing of the init kernel layer: a 20-mode Gram matrix on the extended basis of staircase(3) (issue 3 target:
< 10 s on 2 cores), for d = 16 and d = 64, cold (fresh process state: SymPy lambdify of the derivative means
included) and warm.

Run ``python benchmarks/bench_kernel.py``; writes ``benchmarks/results/kernel.json``.
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import numpy as np

from featureode.data import Spectrum
from featureode.kernel import _integrator, extended_basis, gram_matrix
from featureode.targets import parse_target


def bench(dim: int, n_modes: int = 20, activation: str = "relu") -> dict:
    spectrum = Spectrum.power_law(dim)
    modes = extended_basis(parse_target("staircase(3)", spectrum).modes, dim, 2, n_modes, g=spectrum.g)
    _integrator.cache_clear()
    t0 = time.perf_counter()
    k = gram_matrix(modes, spectrum, activation, 0.5)
    cold = time.perf_counter() - t0
    _integrator.cache_clear()
    t0 = time.perf_counter()
    gram_matrix(modes, spectrum, activation, 0.5)
    warm = time.perf_counter() - t0
    return {"dim": dim, "modes": len(modes), "activation": activation, "coupled_pairs":
            int(np.count_nonzero(np.triu(k))), "seconds_first_call": cold, "seconds_repeat": warm}


def main() -> None:
    rows = [bench(16), bench(64), bench(16, activation="tanh")]
    out = Path(__file__).parent / "results" / "kernel.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "results": rows}, indent=2))
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
