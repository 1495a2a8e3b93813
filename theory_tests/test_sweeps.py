"""Sweeps (theory §7): real tiny sweeps through every executor, resuming, retries, the results table, summaries."""
from __future__ import annotations

import json
import math
import shutil
import socket
import statistics
import time
from pathlib import Path

import pytest

from featureode.workflow import executors, sweeps, tasks
from featureode.cli import main
from featureode.config import config_from_dict
from featureode.workflow.grid import load_grid, suite_path
from featureode.kernel.theory import kernel_theory
from featureode.workflow.sweeps import (RunOutcome, SweepError, acceptance, aggregate, batch_groups, make_executor,
                               run_sweep, summary_markdown)

pd = pytest.importorskip("pandas")

ODE_GRID = '''
[set]
"data.dim" = 4
"training.t_max" = 40.0
"ode.variants" = ["lazy", "displacement"]
"ode.basis" = "target"
[grid]
"target.expr" = ["z0", "z1"]
"network.richness" = [0.05, 0.5]
[sweep]
seeds = [0, 1]
'''

MLP_GRID = '''
[set]
"target.expr" = "z0"
"data.dim" = 4
"network.width" = 32
"training.batch" = 64
"training.n_test" = 500
"training.n_points" = 8
"training.t_max" = 6.0
"training.threads" = 1
"training.compile" = false
"training.device" = "cpu"
"ode.variants" = ["lazy", "displacement"]
"ode.basis" = "target"
[grid]
"network.richness" = [0.05, 0.5]
'''


def _write(tmp_path: Path, text: str, name: str = "grid.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _lazy_t10(expr: str, richness: float) -> float:
    """Closed form of the lazy flow on one mode: loss e^{−2λt}, t10 = ln 10 / (2λ)."""
    cfg = config_from_dict({"target": {"expr": expr}, "data": {"dim": 4}, "network": {"richness": richness}})
    return math.log(10) / (2 * float(kernel_theory(cfg, basis="target").lambda_exact[0]))


def test_ode_only_sweep_two_local_jobs_table_and_resume(tmp_path):
    grid_path = _write(tmp_path, ODE_GRID)
    out = tmp_path / "out"
    assert main(["sweep", str(grid_path), "--out", str(out), "--ode-only", "--jobs", "2", "--quiet"]) == 0
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 4 * 2 * 2  # points × seeds × variants
    assert list(df.columns[:2]) == ["target.expr", "network.richness"]
    assert set(df["status"]) == {"ok"} and df["t50_ratio"].isna().all() and df["mlp_t10"].isna().all()
    lazy = df[df.variant == "lazy"]
    for _, r in lazy.iterrows():  # the solver against the closed form
        assert r["t10"] == pytest.approx(_lazy_t10(r["target.expr"], r["network.richness"]), rel=1e-5)
    assert (out / "results.parquet").exists()
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), df, check_dtype=False)
    summary = (out / "summary.md").read_text()
    assert "ODE only" in summary and "| target.expr" not in summary and "| expr-z0_richness0.05 |" in summary

    # resume: delete one run, only that one is computed again, with the same numbers and curves
    curves = sweeps.read_curves(out)
    assert set(curves.run) == set(df.run) and len(curves) == 16 * 200  # 16 (run, variant) curves of 200 times
    shutil.rmtree(out / "runs" / "expr-z1_richness0.5_s1")
    res = run_sweep(load_grid(grid_path), out, ode_only=True, progress=False)
    assert (res.computed, res.reused) == (1, 7)
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), df)
    again = sweeps.read_curves(out)
    key = ["run", "variant", "t"]
    pd.testing.assert_frame_equal(again.sort_values(key).reset_index(drop=True),
                                  curves.sort_values(key).reset_index(drop=True))

    # a sweep killed before it wrote its curve file: the runs whose curves are not in it are computed again
    (out / "curves.parquet").unlink()
    assert "(4 already finished)" not in sweeps.list_text(load_grid(grid_path), sweeps.plan(
        load_grid(grid_path), out, ode_only=True), ode_only=True, jobs=1)
    res = run_sweep(load_grid(grid_path), out, ode_only=True, progress=False)
    assert (res.computed, res.reused) == (8, 0)
    again = sweeps.read_curves(out)
    pd.testing.assert_frame_equal(again.sort_values(key).reset_index(drop=True),
                                  curves.sort_values(key).reset_index(drop=True))

    # extend: a new richness value computes only the new points
    _write(tmp_path, ODE_GRID.replace("[0.05, 0.5]", "[0.05, 0.5, 0.25]"))
    res = run_sweep(load_grid(grid_path), out, ode_only=True, progress=False)
    assert (res.computed, res.reused) == (4, 8) and len(pd.read_csv(out / "results.csv")) == 24

    # another grid (a different [set]) is refused unless --force; matching runs are still reused then
    _write(tmp_path, ODE_GRID.replace('"training.t_max" = 40.0', '"training.t_max" = 30.0'), "other.toml")
    with pytest.raises(SweepError, match=r"holds another grid \(differs in: training.t_max\); choose another --out"):
        run_sweep(load_grid(tmp_path / "other.toml"), out, ode_only=True, progress=False)
    assert main(["sweep", str(tmp_path / "other.toml"), "--out", str(out), "--ode-only", "--quiet"]) == 2


@pytest.mark.slow
def test_mlp_sweep_two_local_jobs(tmp_path):
    grid_path = _write(tmp_path, MLP_GRID)
    out = tmp_path / "out"
    res = run_sweep(load_grid(grid_path), out, make_executor("local", 2), progress=False)
    assert res.computed == 2 and not res.failed
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 4 and set(df.variant) == {"lazy", "displacement"}
    for _, r in df.iterrows():
        rep = json.loads((out / r["run"] / "report.json").read_text())
        v = rep["variants"][r["variant"]]
        assert r["t50_ratio"] == pytest.approx(v["t50"] / rep["mlp"]["t50"], rel=1e-12)
        assert r["mlp_t50"] == rep["mlp"]["t50"] and r["log_rms"] == pytest.approx(v["log_rms"], rel=1e-12)
        stamp = json.loads((out / r["run"] / "config.json").read_text())
        assert stamp["config"]["network"]["richness"] == r["network.richness"]
    summary = json.loads((out / "summary.json").read_text())
    st = summary["richness0.5"]["variants"]["displacement"]["t50_ratio"]
    assert st["values"] == [df[(df["network.richness"] == 0.5) & (df.variant == "displacement")]["t50_ratio"].item()]
    assert "| richness0.05 |" in (out / "summary.md").read_text()


def test_failing_run_is_retried_once_then_recorded(tmp_path, monkeypatch):
    grid_path = _write(tmp_path, ODE_GRID)
    calls: dict[str, int] = {}
    real = tasks._run_one

    def flaky(task, cfg):
        calls[task.name] = calls.get(task.name, 0) + 1
        if task.name == "expr-z0_richness0.05" and calls[task.name] == 1:
            raise RuntimeError("transient")  # like a dying worker: an exception out of the task
        if task.name == "expr-z1_richness0.5":
            return RunOutcome(task.name, cfg.training.seed, "ValueError: always broken")
        return real(task, cfg)

    monkeypatch.setattr(tasks, "_run_one", flaky)
    monkeypatch.setattr(tasks, "ODE_GROUP", 1)  # one run per task, so that each goes through _run_one
    res = run_sweep(load_grid(grid_path), tmp_path / "out", ode_only=True, progress=False)
    assert calls["expr-z0_richness0.05"] == 2 and calls["expr-z1_richness0.5"] == 2
    assert [o.name for o in res.failed] == ["expr-z1_richness0.5"]
    df = pd.read_csv(tmp_path / "out" / "results.csv")
    bad = df[df.run == "runs/expr-z1_richness0.5"]
    assert len(bad) == 2 and set(bad.status) == {"ValueError: always broken"} and bad.t10.isna().all()
    assert (df[df.run != "runs/expr-z1_richness0.5"].status == "ok").all() and len(df) == 16


def test_dask_local_cluster_matches_local(tmp_path):
    """A real LocalCluster (2 worker processes) gives the same table as the in-process run."""
    pytest.importorskip("distributed")
    grid_path = _write(tmp_path, ODE_GRID.replace("seeds = [0, 1]", "seeds = [0]"))
    assert main(["sweep", str(grid_path), "--out", str(tmp_path / "dask"), "--ode-only", "--executor", "dask",
                 "--jobs", "2", "--quiet"]) == 0
    run_sweep(load_grid(grid_path), tmp_path / "local", ode_only=True, progress=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "dask" / "results.csv"),
                                  pd.read_csv(tmp_path / "local" / "results.csv"))


def test_scheduler_that_does_not_answer(monkeypatch, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert executors.SCHEDULER_TIMEOUT_S <= 12
    monkeypatch.setattr(executors, "SCHEDULER_TIMEOUT_S", 2)
    t0 = time.time()
    with pytest.raises(SweepError, match=rf"nothing answers at tcp://127.0.0.1:{port} \(Connection refused\)"):
        make_executor("dask", 1, f"tcp://127.0.0.1:{port}")
    assert time.time() - t0 < 60   # a deadline, not a speed: without one the connection attempt never ends


def test_list_prints_points_count_and_estimate(tmp_path, capsys):
    grid_path = _write(tmp_path, ODE_GRID)
    assert main(["sweep", str(grid_path), "--out", str(tmp_path / "o"), "--list"]) == 0
    text = capsys.readouterr().out
    assert "4 points × 2 seeds = 8 runs; rough estimate" in text and "expr-z1_richness0.5" in text
    assert not (tmp_path / "o").exists()


def test_cli_bad_grid_is_one_line(tmp_path, capsys):
    grid_path = _write(tmp_path, '[grid]\n"network.widht" = [1]\n')
    assert main(["sweep", str(grid_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean 'network.width'" in err and err.startswith("featureode: error:")


def test_batch_groups_by_network_shapes():
    mk = lambda **kw: config_from_dict({"target": {"expr": "z0"}, **kw})  # noqa: E731
    cfgs = [mk(network={"width": 64}), mk(network={"width": 128}), mk(network={"width": 64, "richness": 0.1}),
            mk(network={"width": 64}, training={"batch": 32}), mk(network={"width": 64}, training={"seed": 3})]
    assert batch_groups(cfgs, cuda=False) == [[0], [1], [2], [3], [4]]
    assert batch_groups(cfgs, cuda=True) == [[0, 2, 4], [1], [3]]
    assert batch_groups(cfgs, cuda=True, max_size=2) == [[0, 2], [1], [3], [4]]


def test_acceptance_and_seed_statistics():
    """Seed means and sds against the statistics module; verdicts against the bands written out."""
    outs = [RunOutcome("a", s, "ok", 1.0, {"t50": m50, "t10": m10},
                       {"displacement": {"t50_ratio": r50, "t10_ratio": r10, "log_rms": 0.1},
                        "lazy": {"t50_ratio": l50, "t10_ratio": None, "t10_ratio_range": [1.2, None]}})
            for s, (m50, m10, r50, r10, l50) in enumerate([(2.0, 7.0, 0.95, 1.0, 1.05), (2.2, 7.4, 1.0, 1.28, 0.85),
                                                           (2.4, 7.8, 1.1, 1.1, 1.0)])]
    a = aggregate(0.005, outs)
    st = a["variants"]["displacement"]["t10_ratio"]
    assert st["mean"] == pytest.approx(statistics.fmean([1.0, 1.28, 1.1]))
    assert st["sd"] == pytest.approx(statistics.stdev([1.0, 1.28, 1.1]))
    assert a["mlp"]["t50"] == pytest.approx(2.2)
    # seed 1: t10 ratio 1.28 is inside issue 6's [0.75, 1.30] but outside the prototype's [0.75, 1.25]
    assert [x["displacement"] for x in a["accepted_per_seed"]] == [True, True, True]
    assert [x["displacement_prototype"] for x in a["accepted_per_seed"]] == [True, False, True]
    assert [x["lazy"] for x in a["accepted_per_seed"]] == [True, False, True]  # within 10% on t50, γ ≤ 0.01
    assert a["variants"]["lazy"]["t10_ratio"]["range"] == [1.2, None]  # every seed only bounded: a bound on the mean
    assert "lazy" not in acceptance(0.5, outs[0].variants)


def test_validate_runs_a_shipped_grid_through_the_sweep(tmp_path, monkeypatch, capsys):
    """`validate` = `sweep` of a grid file in the suites folder; title and verdicts as the old suite summary."""
    from featureode.workflow import grid

    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "tiny.toml").write_text(MLP_GRID.replace('"network.richness" = [0.05, 0.5]',
                                                       '"network.richness" = [0.005, 0.5]')
                                      + '[sweep]\nname = "{target.expr}_d{data.dim}_g{network.richness}"\n'
                                        'description = "two tiny cases"\n')
    monkeypatch.setattr(grid, "SUITES_DIR", suites)
    out = tmp_path / "v"
    assert main(["validate", "tiny", "--out", str(out), "--quiet", "--basis", "target"]) == 0
    md = (out / "summary.md").read_text()
    assert md.startswith("# validation suite `tiny`, ODE on the target basis\n\ntwo tiny cases\n")
    summary = json.loads((out / "summary.json").read_text())
    assert "lazy" in summary["z0_d4_g0.005"]["accepted"] and "lazy" not in summary["z0_d4_g0.5"]["accepted"]
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/report.json")}
    assert len(stamps) == 2
    assert main(["validate", "tiny", "--out", str(out), "--quiet"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/report.json")} == stamps
    assert "2 runs: 0 computed, 2 reused, 0 failed" in capsys.readouterr().out


@pytest.mark.parametrize("basis", ["target", "extended"])
def test_summary_reproduces_the_committed_validation_tables(basis):
    """The seed statistics of the committed standard-suite run (docs/validation/*.json, written by the previous
    suite code) give, through this module's summary, the committed summary.md byte for byte."""
    root = Path(__file__).resolve().parents[1] / "docs" / "validation"
    stats = json.loads((root / f"standard_{basis}_basis.json").read_text())
    rows = [(name, {**a, "keys": ["t50_ratio", "t10_ratio", "log_rms"]}) for name, a in stats.items()]
    grid = load_grid(suite_path("standard"))
    assert [name for name, _ in rows] == [p.name for p in grid.points()]
    md = summary_markdown("validation suite `standard`", grid.description, grid.seeds, rows, basis)
    assert md == (root / f"standard_{basis}_basis.md").read_text()


def test_acceptance_bands_bounds_and_lazy_rule():
    def rep(r50, r10, lazy50):
        return {"displacement": {"t50_ratio": r50, "t10_ratio": r10}, "lazy": {"t50_ratio": lazy50, "t10_ratio": None}}

    # 1.22 is inside issue 6's t50 band [0.85, 1.25] but outside the prototype's [0.93, 1.20]
    assert acceptance(0.5, rep(1.22, 1.0, 2.0)) == {"displacement": True, "displacement_prototype": False}
    assert acceptance(0.5, rep(0.84, 1.0, 1.0))["displacement"] is False
    assert acceptance(0.5, rep(1.0, 1.31, 1.0))["displacement"] is False
    assert acceptance(0.5, rep(1.0, None, 1.0))["displacement"] is None
    assert acceptance(0.005, rep(1.0, 1.0, 1.09))["lazy"] is True
    assert acceptance(0.005, rep(1.0, 1.0, 0.89))["lazy"] is False

    def bounded(r50, r10_range):
        return {"displacement": {"t50_ratio": r50, "t10_ratio": None, "t10_ratio_range": r10_range}}

    assert acceptance(0.5, bounded(1.0, [0.0, 0.49]))["displacement"] is False  # below 0.49: outside [0.75, 1.30]
    assert acceptance(0.5, bounded(1.0, [0.0, 0.9]))["displacement"] is None    # below 0.9: undecided
    assert acceptance(0.5, bounded(2.0, [0.0, 0.9]))["displacement"] is False   # a failed t50 decides
    assert acceptance(0.5, bounded(1.0, [1.4, None]))["displacement"] is False  # above 1.4: outside
    assert acceptance(0.5, bounded(1.0, [1.0, None]))["displacement"] is None


def test_aggregate_bounds_over_seeds():
    def rep(seed, r50, r10, r10_range=None):
        d = {"t50_ratio": r50, "t10_ratio": r10, "log_rms": 0.1}
        if r10_range is not None:
            d["t10_ratio_range"] = r10_range
        return RunOutcome("c", seed, "ok", 1.0, {"t50": 10.0 + seed, "t10": 30.0}, {"displacement": d})

    a = aggregate(0.005, [rep(0, 0.80, 1.0), rep(1, 1.00, 1.0), rep(2, 1.06, 1.0)])
    st = a["variants"]["displacement"]["t50_ratio"]
    assert st["sd"] == pytest.approx(math.sqrt(((0.80 - 0.9533333) ** 2 + (1.00 - 0.9533333) ** 2
                                                + (1.06 - 0.9533333) ** 2) / 2), rel=1e-6)
    assert a["accepted"]["displacement"] is True  # the mean 0.953 is inside [0.85, 1.25]; seed 0 alone is not
    assert [acc["displacement"] for acc in a["accepted_per_seed"]] == [False, True, True]
    b = aggregate(0.005, [rep(0, 1.0, None), rep(1, 1.0, 1.0)])
    assert b["accepted"]["displacement"] is None and b["variants"]["displacement"]["t10_ratio"]["n"] == 1
    c = aggregate(0.5, [rep(0, 1.0, None, [0.0, 0.5]), rep(1, 1.0, None, [0.0, 0.7])])
    assert c["variants"]["displacement"]["t10_ratio"]["range"] == [0.0, pytest.approx(0.6)]
    assert c["accepted"]["displacement"] is False  # the mean t10 ratio is below 0.6 < 0.75
    c = aggregate(0.5, [rep(0, 1.0, None, [1.0, 1.0]), rep(1, 1.0, None, [2.0, None])])
    assert c["variants"]["displacement"]["t10_ratio"]["range"] == [pytest.approx(1.5), None]
    assert c["accepted"]["displacement"] is False  # above 1.5 is above the band's 1.30
    json.dumps(c, allow_nan=False)  # no Infinity in the JSON summary


@pytest.mark.slow
def test_a_batched_group_equals_its_runs_alone(tmp_path, monkeypatch):
    """The GPU path (a group trained by one simulate_batch call, then compared run by run), exercised on the CPU:
    the same numbers as each run on its own, and the batch is the only training."""
    from featureode.sim import mlp
    from featureode.workflow.sweeps import execute, plan

    grid = load_grid(_write(tmp_path, MLP_GRID))
    grouped = [t for _, t in plan(grid, tmp_path / "grouped")]
    alone = [t for _, t in plan(grid, tmp_path / "alone")]
    calls = []
    real = mlp.simulate_batch
    monkeypatch.setattr(mlp, "simulate_batch", lambda cfgs, *a, **kw: calls.append(len(cfgs)) or real(cfgs, *a, **kw))
    together = execute(grouped)
    assert calls == [2]
    separate = [execute([t])[0] for t in alone]
    assert calls == [2, 1, 1]  # compare_config reused the batch's mlp.json; alone, each run trains once
    for a, b in zip(together, separate):
        assert a.ok and b.ok and a.mlp == b.mlp and a.variants == b.variants


@pytest.mark.parametrize("executor", ["local", "dask"])
def test_a_worker_that_dies_is_replaced_and_its_run_retried(executor, tmp_path, monkeypatch):
    """A worker process killed in the middle of a run (``os._exit``, no exception) loses nothing: its run is
    retried once on a new worker and the table equals the in-process one."""
    import functools
    import os

    import _dying
    if executor == "dask":
        pytest.importorskip("distributed")
        import cloudpickle

        cloudpickle.register_pickle_by_value(_dying)  # the Dask workers need not import the test folder
    grid_path = _write(tmp_path, ODE_GRID.replace("seeds = [0, 1]", "seeds = [0]"))
    victim = "expr-z0_richness0.5"
    monkeypatch.setattr(sweeps, "execute", functools.partial(_dying.dying_execute, marker_dir=str(tmp_path),
                                                             victim=victim))
    ex = make_executor(executor, 2)
    try:
        result = run_sweep(load_grid(grid_path), tmp_path / "swept", executor=ex, ode_only=True, progress=False)
    finally:
        ex.close()
    pid = int((tmp_path / f"died_{victim}").read_text())
    assert pid != os.getpid()                               # a worker died, not this process
    assert not result.failed and len(result.outcomes) == 4, [(o.name, o.status) for o in result.failed]
    monkeypatch.undo()
    run_sweep(load_grid(grid_path), tmp_path / "inline", ode_only=True, progress=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "swept" / "results.csv"),
                                  pd.read_csv(tmp_path / "inline" / "results.csv"))


def test_ode_only_runs_solved_in_batches_equal_runs_solved_alone(tmp_path, monkeypatch):
    """--ode-only groups runs (kernel_theory_batch + solve_batch per group); every curve of the sweep's one columnar
    file (read_curves) equals solve_config's on the run's own config, the run folders hold their stamp alone, and
    a batch that cannot be built falls back to one run at a time."""
    import numpy as np

    from featureode.ode.solve import solve_config
    grid_path = _write(tmp_path, ODE_GRID)
    grid = load_grid(grid_path)
    groups = sweeps.ode_groups(list(range(8)), workers=1)
    assert [len(g) for g in groups] == [2, 2, 2, 2]
    # runs that differ only in γ and the seed (one kernel theory) go in one group, even when γ is the outer axis
    gamma_outer = load_grid(_write(tmp_path, ODE_GRID.replace('"target.expr" = ["z0", "z1"]\n', "").replace(
        "[0.05, 0.5]", "[0.05, 0.1, 0.2, 0.5]\n\"target.expr\" = [\"z0\", \"z1\"]").replace("[0, 1]", "[0]"),
        "gamma_outer.toml"))
    planned = [t for _, t in sweeps.plan(gamma_outer, tmp_path / "outer", ode_only=True)]
    assert [t.raw["target"]["expr"] for t in planned[:2]] == ["z0", "z1"]      # plan order: γ, then the target
    families = [[t.raw["target"]["expr"] for t in g] for g in sweeps.ode_groups(planned, workers=1)]
    assert families == [["z0", "z0"], ["z0", "z0"], ["z1", "z1"], ["z1", "z1"]]
    res = run_sweep(grid, tmp_path / "batched", ode_only=True, progress=False)
    assert not res.failed and res.computed == 8
    curves = sweeps.read_curves(tmp_path / "batched")
    assert list(curves.columns) == ["run", "variant", "t", "loss", "in_support_loss"]
    for p, task in sweeps.plan(grid, tmp_path / "batched", ode_only=True):
        names = {f.name for f in Path(task.run_dir).iterdir() if not f.name.startswith(".")}
        assert names == {"config.json"}     # the stamp alone (its own completion stamp), no curves
        stamp = json.loads((Path(task.run_dir) / "config.json").read_text())
        assert stamp["digest"] == task.config().digest() and set(stamp["ode"]) == set(res.outcomes[task.name].variants)
        want = solve_config(task.config())
        for name, tr in want.variants.items():
            got = curves[(curves.run == f"runs/{task.name}") & (curves.variant == name)]
            assert np.array_equal(got.loss.to_numpy(), tr.loss) and np.array_equal(got.t.to_numpy(), tr.t)
            assert res.outcomes[task.name].variants[name]["t10"] == tr.t10
    # a folder holding another config's solve (ode.json + ode.npz and their stamp): computed again, the stale ODE
    # files removed, so load_sweep reads each curve once (from the curve file)
    task = sweeps.plan(grid, tmp_path / "batched", ode_only=True)[0][1]
    folder = Path(task.run_dir)
    other = task.config().replace(network={"richness": 0.3})
    solve_config(other, out_dir=folder)
    (folder / "config.json").write_text(json.dumps({"digest": other.digest(), "config": other.to_dict()}))
    res = run_sweep(grid, tmp_path / "batched", ode_only=True, progress=False)
    assert (res.computed, res.reused) == (1, 7)
    assert {f.name for f in folder.iterdir() if not f.name.startswith(".")} == {"config.json"}
    from featureode.workflow.table import load_sweep

    frame = load_sweep(tmp_path / "batched")
    assert len(frame[(frame.run == f"runs/{task.name}") & (frame.quantity == "ratio")]) == 2 * 200
    seen = []

    def broken(cfgs, **kw):
        seen.append(len(cfgs))
        raise RuntimeError("batch broken")
    monkeypatch.setattr("featureode.kernel.theory.kernel_theory_batch", broken)
    res = run_sweep(grid, tmp_path / "fallback", ode_only=True, progress=False)
    assert seen == [2, 2, 2, 2] and not res.failed
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "fallback" / "results.csv"),
                                  pd.read_csv(tmp_path / "batched" / "results.csv"))


def test_curves_of_a_variant_that_failed_before_any_curve(tmp_path):
    """An ODE-only run where one variant failed before producing a curve (Trajectory.failed: no in-support loss)
    still writes the sweep's curve file; its rows are the working variant's."""
    import numpy as np

    from featureode.workflow.table import read_curves, write_curves

    ok = {"t": np.array([0.0, 1.0]), "loss": np.array([1.0, 0.5]), "in_support_loss": np.array([1.0, 0.4])}
    failed = {"t": np.zeros(0), "loss": np.zeros(0), "in_support_loss": None}
    write_curves(tmp_path, [RunOutcome("point_x", 0, curves={"rational": ok, "meanfield": failed})])
    df = read_curves(tmp_path)
    assert list(df["variant"]) == ["rational", "rational"]
    np.testing.assert_allclose(df["in_support_loss"], [1.0, 0.4])
