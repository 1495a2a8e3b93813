"""Timing of the init kernel layer (issue 13, kernel half): ``kernel_theory`` on the default config (target basis,
2 modes; extended basis, 34 modes), a new config in a warm process, the build-once path (network and target made
beforehand) and a batch of 1000 configs; with the cProfile top lines of the extended-basis call.

Run ``python benchmarks/bench_kernel.py`` (writes ``benchmarks/results/kernel.json`` and ``kernel.md``). The numbers
of the code before the redesign cannot be measured side by side any more; they were measured on the same machine
with this script against that code (``--record-old``, which needs only ``kernel_theory``) and are stored in
``benchmarks/results/kernel_old_recorded.json``, printed next to the new ones and labelled "recorded".
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from featureode.kernel import theory as kernel
from featureode.config import load_config

RESULTS = Path(__file__).parent / "results"
OLD = RESULTS / "kernel_old_recorded.json"


def _time(fn: Callable[[], Any], repeat: int = 1) -> float:
    """Best CPU time of this process over ``repeat`` calls (the machine is shared: wall time would measure the
    other jobs; every computation here is single-threaded)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def _batch_configs(n: int) -> list:
    """``n`` configs cycling over γ (5), d (4), exponent (2) and target (5): 200 distinct (d, exponent, target)."""
    base = load_config(None)
    out = []
    for i in range(n):
        gamma = (0.005, 0.05, 0.15, 0.3, 0.5)[i % 5]
        dim = (8, 16, 32, 64)[(i // 5) % 4]
        expo = (1.0, 1.5)[(i // 20) % 2]
        expr = ("z0", "z0*z1", "staircase(2)", "staircase(3)", "h2(z0)")[(i // 40) % 5]
        out.append(base.replace(data={"dim": dim, "exponent": expo}, target={"expr": expr},
                                network={"richness": gamma}, ode={"basis": "target"}))
    return out


def run(record_old: bool) -> dict[str, Any]:
    warnings.simplefilter("ignore")
    cfg = load_config(None)
    other = cfg.replace(data={"dim": 24, "exponent": 1.2}, target={"expr": "staircase(3)"})
    rows: dict[str, float] = {}
    rows["target basis, first call (cold caches)"] = _time(lambda: kernel.kernel_theory(cfg, basis="target"))
    rows["extended basis, first call"] = _time(lambda: kernel.kernel_theory(cfg, basis="extended"))
    rows["target basis, repeat"] = _time(lambda: kernel.kernel_theory(cfg, basis="target"), 5)
    rows["extended basis, repeat"] = _time(lambda: kernel.kernel_theory(cfg, basis="extended"), 3)
    rows["other config (d=24, staircase(3)), target basis, warm process"] = _time(
        lambda: kernel.kernel_theory(other, basis="target"))
    rows["other config, extended basis, warm process"] = _time(lambda: kernel.kernel_theory(other, basis="extended"))
    cfgs = _batch_configs(1000)
    if record_old:
        sub = cfgs[::50]
        rows["batch of 1000 configs (extrapolated from 20 of them)"] = 50 * _time(
            lambda: [kernel.kernel_theory(c) for c in sub])
    else:
        from featureode.kernel.network import Network

        spectrum = other.spectrum()
        net, tgt = Network.from_config(other, spectrum), other.target_obj(spectrum)
        kernel.clear_caches()
        rows["other config, extended basis, network + target prebuilt, fresh quadrature caches"] = _time(
            lambda: kernel.kernel_theory(other, basis="extended", network=net, target=tgt))
        kernel.clear_caches()
        net2 = Network.from_config(cfg)
        tgt2 = cfg.target_obj()
        kernel.kernel_theory(other, basis="target", network=net, target=tgt)   # activation means warm
        rows["default config, target basis, network + target prebuilt, fresh integrals"] = _time(
            lambda: kernel.kernel_theory(cfg, basis="target", network=net2, target=tgt2))
        rich = cfg.replace(network={"richness": 0.05})
        rows["default config at another γ, target basis, network + target prebuilt"] = _time(
            lambda: kernel.kernel_theory(rich, basis="target", network=net2, target=tgt2), 20)
        rows["default config at another γ, extended basis, network + target prebuilt"] = _time(
            lambda: kernel.kernel_theory(rich, basis="extended", network=net2, target=tgt2), 5)
        rows["batch of 1000 configs (kernel_theory_batch, 200 distinct)"] = _time(
            lambda: kernel.kernel_theory_batch(cfgs))
        kernel.clear_caches()
        rows["batch of 1000 configs, fresh quadrature caches"] = _time(lambda: kernel.kernel_theory_batch(cfgs))
    prof = cProfile.Profile()
    fresh = cfg.replace(data={"dim": 20})
    prof.enable()
    kernel.kernel_theory(fresh, basis="extended")
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    return {"machine": platform.processor() or platform.machine(), "seconds": rows,
            "profile_extended_new_spectrum": buf.getvalue()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record-old", action="store_true", help="time the code before the redesign (stores "
                    f"{OLD.name})")
    args = ap.parse_args()
    res = run(args.record_old)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.record_old:
        OLD.write_text(json.dumps(res, indent=2))
        print(json.dumps(res["seconds"], indent=2))
        return
    old = json.loads(OLD.read_text())["seconds"] if OLD.exists() else {}
    lines = ["| step (CPU time, one thread) | before (recorded) | now |", "|---|---|---|"]
    for name, sec in res["seconds"].items():
        before = old.get(name)
        if before is None and name.startswith("batch of 1000 configs (kernel_theory_batch"):
            before = old.get("batch of 1000 configs (extrapolated from 20 of them)")
        lines.append(f"| {name} | {'' if before is None else f'{before:.3g} s'} | {sec * 1e3:.3g} ms |")
    table = "\n".join(lines)
    print(table)
    print("\ncProfile, top lines (extended basis, a new spectrum, warm process):")
    print(res["profile_extended_new_spectrum"])
    (RESULTS / "kernel.json").write_text(json.dumps({**res, "before_recorded": old}, indent=2))
    (RESULTS / "kernel.md").write_text("# Init kernel timings (`python benchmarks/bench_kernel.py`)\n\n" + table
                                       + "\n\n```\n" + res["profile_extended_new_spectrum"] + "```\n")


if __name__ == "__main__":
    main()
