"""Reliability at the edges (issue 22): folder locks between real processes, fault injection (EROFS/ENOSPC), names
that stay inside, completion stamps, exit statuses, hangs turned into messages, and the public API driven with
random bad arguments."""
from __future__ import annotations

import errno
import http.server
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from featureode.cli import main
from featureode.config import ConfigError, load_config
from featureode.workflow import runs
from featureode.workflow.executors import make_executor, probe_scheduler
from featureode.workflow.grid import GridError, grid_from_dict, load_grid, safe_name
from featureode.workflow.sweeps import plan, read_results, run_sweep
from featureode.workflow.tasks import SweepError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

SMALL = """
[set]
"data.dim" = 4
"target.expr" = "z0"
"ode.basis" = "target"
"ode.variants" = ["lazy"]
"training.t_max" = 50.0
[grid]
"network.richness" = [0.1, 0.2]
"""


def _grid(tmp_path: Path, text: str = SMALL, name: str = "g.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


# --- item 3: one lock for every writer ------------------------------------------------------------------------------
def test_two_real_sweeps_on_one_folder(tmp_path):
    """Sweep A holds DIR; sweep B on DIR with --force waits, then refuses naming A's pid; A's grid stamp stays."""
    grid = _grid(tmp_path)
    out = tmp_path / "out"
    slow_a = ("import sys, time; import featureode.workflow.sweeps as s; orig = s._run_locked\n"
              "def slow(*a, **k):\n    time.sleep(60)\n    return orig(*a, **k)\n"
              "s._run_locked = slow\nfrom featureode.cli import main\n"
              f"sys.exit(main(['sweep', {str(grid)!r}, '--out', {str(out)!r}, '--ode-only', '--quiet']))")
    a = subprocess.Popen([sys.executable, "-c", slow_a], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (out / runs.PID_FILE).exists():
            assert a.poll() is None and time.monotonic() < deadline, a.communicate()
            time.sleep(0.2)
        other = _grid(tmp_path, SMALL.replace("[0.1, 0.2]", "[0.3]"), "other.toml")
        b = subprocess.run([sys.executable, "-m", "featureode", "sweep", str(other), "--out", str(out), "--ode-only",
                            "--force", "--quiet"], env=ENV, capture_output=True, text=True, timeout=180)
        assert b.returncode == 2
        line = _one_line(b.stderr)
        assert "in use by another featureode command" in line and f"pid {a.pid}" in line
        assert json.loads((out / "grid.json").read_text())["source"] == str(grid)
    finally:
        a.kill()
        a.wait()


def test_sweep_refuses_a_folder_a_solve_holds(tmp_path, monkeypatch):
    out = tmp_path / "held"
    runs.acquire(out)   # as `featureode solve --out held` does for its whole run
    try:
        monkeypatch.setattr(runs, "LOCK_WAIT_S", 0.5)
        with pytest.raises(runs.FolderInUseError, match=f"pid {os.getpid()}"):
            # another process's view: drop this process's re-entrant hold for the check
            held = runs._HELD.pop(out.resolve())
            try:
                run_sweep(load_grid(_grid(tmp_path)), out, ode_only=True, progress=False)
            finally:
                runs._HELD[out.resolve()] = held
    finally:
        runs.release(out)


# --- fault injection: EROFS / ENOSPC --------------------------------------------------------------------------------
def _raise(code: int):
    def boom(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    return boom


def test_enospc_in_solve_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "fsync", _raise(errno.ENOSPC))
    assert main(["solve", "--out", str(tmp_path / "full")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("featureode: error:") and "ENOSPC (No space left on device)" in line
    assert str(tmp_path / "full") in line


@pytest.mark.parametrize("code,name", [(errno.EROFS, "EROFS"), (errno.ENOSPC, "ENOSPC"), (errno.EACCES, "EACCES")])
def test_sweep_on_unwritable_file_system(tmp_path, monkeypatch, capsys, code, name):
    grid = _grid(tmp_path)
    monkeypatch.setattr(Path, "mkdir", _raise(code))
    assert main(["sweep", str(grid), "--out", str(tmp_path / "ro"), "--ode-only", "--quiet"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert name in line and str(tmp_path / "ro") in line


def test_derive_latex_on_read_only_file_system(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(Path, "write_text", _raise(errno.EROFS))
    assert main(["derive", "--latex", str(tmp_path / "ode.tex")]) == 2
    assert "EROFS (Read-only file system)" in _one_line(capsys.readouterr().err)


def _results(tmp_path: Path) -> Path:
    d = tmp_path / "sweep"
    d.mkdir()
    header = "network.richness,seed,variant,t50,t10,t50_ratio,t10_ratio,log_rms,mlp_t50,mlp_t10,t_max,status,run"
    rows = [f"{g},0,lazy,{10 * g},{30 * g},1.0,1.1,0.1,10,30,50,ok,runs/g{g}" for g in (0.1, 0.2, 0.3)]
    (d / "results.csv").write_text("\n".join([header, *rows]) + "\n")
    return d


def test_plot_out_on_read_only_file_system_and_bad_format(tmp_path, monkeypatch, capsys):
    d = _results(tmp_path)
    assert main(["plot", str(d), "--x", "network.richness", "--out", str(tmp_path / "p.xyz")]) == 2
    assert "cannot tell the figure format from .xyz" in _one_line(capsys.readouterr().err)
    monkeypatch.setattr(Path, "mkdir", _raise(errno.EROFS))
    assert main(["plot", str(d), "--x", "network.richness", "--out", str(tmp_path / "new" / "p.png")]) == 2
    assert "EROFS" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("damage,message", [
    (lambda t: t[: len(t) * 2 // 3].rsplit(",", 2)[0], "cells, the header"),          # truncated mid-row
    (lambda t: "\x89PNG\r\n\x1a\n\x00\xff\xfe" + t, "not UTF-8"),                    # binary
    (lambda t: t.replace("network.richness", "gamma", 1), "unknown columns: 'gamma'"),  # re-headed
    (lambda t: t.replace(",1.1,", ",fast,", 1), "holds 'fast', not a number"),
    (lambda t: "", "is empty"),
])
def test_results_reader_refuses_damage_in_one_line(tmp_path, capsys, damage, message):
    d = _results(tmp_path)
    path = d / "results.csv"
    text = damage(path.read_text())
    path.write_bytes(text.encode("latin-1") if text.startswith("\x89") else text.encode())
    with pytest.raises(SweepError, match=message):
        read_results(d)
    assert main(["plot", str(d), "--x", "network.richness"]) == 2
    assert "rebuild it from the run folders" in _one_line(capsys.readouterr().err)


# --- item 5: names stay inside --------------------------------------------------------------------------------------
@pytest.mark.parametrize("template", ["../../escape_{network.richness}", "/abs/{network.richness}",
                                      "g{network.richness}/../shared", "..{network.richness}"])
def test_template_names_stay_inside(tmp_path, template):
    grid = load_grid(_grid(tmp_path, SMALL + f'[sweep]\nname = "{template}"\n'))
    out = tmp_path / "out"
    tasks = plan(grid, out)
    dirs = {Path(t.run_dir) for _, t in tasks}
    assert len(dirs) == 2
    for d in dirs:
        assert d.parent == out / "runs" and "/" not in d.name and ".." not in d.name and not d.name.startswith(".")


def test_long_names_are_hashed_and_distinct(tmp_path):
    long = ["x" * 300 + "a", "x" * 300 + "b"]
    text = SMALL.replace('"network.richness" = [0.1, 0.2]', f'"target.description" = {json.dumps(long)}')
    if "target.description" not in load_config(None).to_dict()["target"]:
        text = SMALL + f'[sweep]\nname = "{"y" * 300}{{network.richness}}"\n'
    grid = load_grid(_grid(tmp_path, text))
    names = [p.name for p in grid.points()]
    assert len(set(names)) == 2 and all(len(n.encode()) <= 100 for n in names)
    assert safe_name("a" * 500) != safe_name("a" * 501)


def test_collision_refused_naming_both_points(tmp_path):
    with pytest.raises(GridError, match=r"point 0 \(network.richness = 0.1\) and point 1 \(network.richness = 0.2\)"):
        plan(load_grid(_grid(tmp_path, SMALL + '[sweep]\nname = "same"\n')), tmp_path / "o")


def test_repeated_axis_values_are_one_point(tmp_path, capsys):
    grid = load_grid(_grid(tmp_path, SMALL.replace("[0.1, 0.2]", "[0.1, 0.1, 0.1]")))
    assert grid.size == 1 and len(grid.points()) == 1 and len(plan(grid, tmp_path / "o")) == 1
    assert main(["sweep", str(tmp_path / "g.toml"), "--out", str(tmp_path / "o"), "--list"]) == 0
    assert "1 points × 1 seeds = 1 runs" in capsys.readouterr().out


def test_empty_out_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(_grid(tmp_path)), "--out", ""])
    assert exc.value.code == 2 and "must name a folder" in capsys.readouterr().err
    with pytest.raises(SweepError, match="output folder is empty"):
        run_sweep(load_grid(_grid(tmp_path)), "", ode_only=True, progress=False)


# --- item 7: finished only when every file is -----------------------------------------------------------------------
def test_completion_stamp_lists_and_checks_every_file(tmp_path):
    cfg = load_config(None)
    d = tmp_path / "run"
    d.mkdir()
    np.savez(d / "ode.npz", a=np.arange(3))
    (d / "ode.json").write_text("{}")
    (d / "report.png").write_bytes(b"png")
    assert runs.finished(d, cfg.digest(), ["ode.json", "ode.npz"])            # before stamps: the files decide
    assert not runs.finished(d, cfg.digest(), ["ode.json", "report.json"])
    runs.mark_finished(d, cfg, ["ode.json", "ode.npz", "report.png"])
    assert runs.finished(d, cfg.digest(), ["ode.json", "ode.npz"])
    assert not runs.finished(d, "another digest", ["ode.json"])
    assert not runs.finished(d, cfg.digest(), ["report.json"])                  # not listed: not finished
    (d / "report.png").unlink()                                                 # killed before the figure
    assert not runs.finished(d, cfg.digest(), ["ode.json"])
    (d / "report.png").write_bytes(b"png")
    (d / "ode.npz").write_bytes(b"garbage")                                     # a garbage array
    assert not runs.finished(d, cfg.digest(), ["ode.json"])
    with pytest.raises(runs.RunFolderError, match="missing at the end of the run"):
        runs.mark_finished(d, cfg, ["mlp.json"])


# --- item 8: exit statuses ------------------------------------------------------------------------------------------
def test_sweep_with_a_failed_run_exits_1(tmp_path, capsys):
    # exp(2u) at d = 4: E[σ²] diverges (2c²g_0 ≥ 1); the config is valid, the run fails with that reason
    text = SMALL.replace('"network.richness" = [0.1, 0.2]', '"network.richness" = [0.1]') \
        + '[zip]\n"network.activation" = ["exp(2*u)"]\n'
    assert main(["sweep", str(_grid(tmp_path, text)), "--out", str(tmp_path / "o"), "--ode-only", "--quiet"]) == 1
    rows = read_results(tmp_path / "o")
    assert rows and all("diverges" in r["status"] for r in rows)


# --- item 4: no hang without a message ------------------------------------------------------------------------------
def test_scheduler_probe_names_what_answered():
    srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(1)
    try:
        t0 = time.monotonic()
        with pytest.raises(SweepError, match=r"an HTTP server answered .* not a Dask scheduler"):
            probe_scheduler(f"tcp://127.0.0.1:{srv.server_address[1]}", timeout=1.0)
        with pytest.raises(SweepError, match="sent no Dask handshake"):
            probe_scheduler(f"tcp://127.0.0.1:{mute.getsockname()[1]}", timeout=1.0)
        assert time.monotonic() - t0 < 10
        with pytest.raises(SweepError, match="scheme 'ucx' is not supported"):
            make_executor("dask", 1, "ucx://127.0.0.1:8786")
    finally:
        srv.shutdown()
        mute.close()


def test_non_finite_horizons_refused(tmp_path):
    with pytest.raises(GridError, match="t_max_factor must be a positive number"):
        load_grid(_grid(tmp_path, SMALL + "[sweep]\nt_max_factor = inf\n"))
    from featureode.kernel.theory import kernel_theory
    from featureode.ode.solve import SolveError, solve_variant

    cfg = load_config(None).replace(data={"dim": 4}, target={"expr": "z0"}, ode={"basis": "target"})
    with pytest.raises(SolveError, match="t_max must be a finite time"):
        solve_variant(kernel_theory(cfg), "lazy", math.inf)
    with pytest.raises(ConfigError):
        load_config(None).replace(training={"t_max": math.inf})


@pytest.mark.parametrize("argv,message", [
    (["hermite", "relu", "--max-degree", "5000"], "must be at most 1000"),
    (["decompose", "staircase(300)", "--dim", "300"], "above the supported k ≤ 100"),
    (["decompose", "h1000(z0)", "--dim", "2"], "above the supported 100"),
])
def test_stated_limits(argv, message, capsys):
    with pytest.raises(SystemExit) if "--max-degree" in argv else _nothing():
        rc = main(argv)
        assert rc == 2
    assert message in capsys.readouterr().err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("section,key,value", [("ode", "n_points", 10**8), ("training", "n_points", 10**8),
                                               ("ode", "extended_max_modes", 10**5)])
def test_config_limits(section, key, value):
    with pytest.raises(ConfigError, match="must be in"):
        load_config(None).replace(**{section: {key: value}})


# --- item 9: API edges ----------------------------------------------------------------------------------------------
def test_api_edges_raise_the_package_errors():
    from featureode.calculus.activations import ActivationError, get_activation
    from featureode.kernel.network import KernelError
    from featureode.kernel.theory import exact_eigenvalues, gram_matrix
    from featureode.ode.solve import SolveError, solve_config
    from featureode.ode.variants import Variant, VariantError

    assert Variant("lazy", ablate="eigen_growth").ablate == ("eigen_growth",)
    with pytest.raises(VariantError, match="unknown term 'eigen_grwth'"):
        Variant("lazy", ablate="eigen_grwth")
    with pytest.raises(VariantError, match="must be a finite number"):
        Variant("agop", params={"kappa": math.nan})
    assert load_config(None).replace(network={"width": np.int64(64)}).network.width == 64
    with pytest.raises(KernelError, match="n_neurons"):
        exact_eigenvalues(["z0"], [0.5, 0.5], "relu", 0.5, method="montecarlo", n_neurons=0)
    with pytest.raises(KernelError, match="step"):
        gram_matrix(["z0"], [0.5, 0.5], "relu", 0.5, step=0)
    for tiny in (1e-3, 4.6e-227):   # a grid that cannot fit in memory is refused, not attempted
        with pytest.raises(KernelError, match=r"step must be a number in \[0.01, 1\]"):
            gram_matrix(["z0"], [0.5, 0.5], "relu", 0.5, step=tiny)
    with pytest.raises(SweepError, match="integer"):
        make_executor("local", 2.5)
    with pytest.raises(GridError, match="a grid is a table"):
        grid_from_dict([])
    with pytest.raises(ActivationError, match="activation must be a name"):
        get_activation(None)
    with pytest.raises(SolveError, match=r"solve_config needs a Config, got the str 'file.toml'; load the file "
                                          r"first and pass what featureode.load_config\(path\) returns"):
        solve_config("file.toml")


def test_every_public_function_of_a_config_refuses_what_is_not_one(tmp_path):
    """kernel_theory(None) was an AttributeError three frames down; each public function that takes a config now says
    in one line what it got and how to make a Config, with its layer's error."""
    from pathlib import Path

    import featureode
    from featureode.config import ConfigError
    from featureode.export.report import ReportError
    from featureode.kernel.network import KernelError
    from featureode.ode.solve import SolveError
    from featureode.sim.spec import MLPError

    calls = {"kernel_theory": (featureode.kernel_theory, KernelError),
             "kernel_report": (featureode.kernel_report, KernelError),
             "simulate_config": (featureode.simulate_config, MLPError),
             "compare_config": (lambda c: featureode.compare_config(c, tmp_path / "out"), ConfigError),
             "derive_document": (featureode.derive_document, ConfigError),
             "derive_fragment": (featureode.derive_fragment, ConfigError),
             "solve_config": (featureode.solve_config, SolveError),
             "build_report": (lambda c: featureode.build_report(c, None, None), ReportError)}
    for name, (fn, error) in calls.items():
        for bad, shown in ((None, "NoneType None"), ({"target": {"expr": "z0"}}, "dict {'target'"),
                           (Path("run.toml"), f"the {type(Path('run.toml')).__name__} 'run.toml'"),
                           (np.zeros((3, 3)), "ndarray array([[0., 0., 0.], [0., 0., 0.],")):
            with pytest.raises(error, match=f"^{name} needs a Config, got {re.escape(shown)}") as info:
                fn(bad)
            assert "\n" not in str(info.value) and "load" in str(info.value)
    assert not (tmp_path / "out").exists()


def _package_error(exc: BaseException) -> bool:
    from featureode.core.errors import FeatureODEError

    return isinstance(exc, FeatureODEError)


_formula = st.text("uxz01()+-*/ .abcdefghijklmnopqrstuvwxyzEINOS", max_size=8)   # no '^', no 9**9**9
_junk = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                  st.text(max_size=8), _formula, st.lists(st.integers(-3, 3), max_size=3),
                  st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 6), a=_junk, b=_junk)
def test_public_api_with_random_bad_arguments(which, a, b):
    """Random bad arguments raise the package's own errors (:class:`featureode.core.errors.FeatureODEError`), never
    AttributeError, TypeError, ZeroDivisionError or a hang."""
    from featureode.calculus.activations import get_activation
    from featureode.calculus.targets import parse_target
    from featureode.kernel.theory import gram_matrix
    from featureode.ode.variants import Variant

    calls = [lambda: get_activation(a), lambda: Variant(a if isinstance(a, str) else "lazy", ablate=b),
             lambda: Variant("agop", params={"kappa": a}), lambda: make_executor("local", a),
             lambda: grid_from_dict(a), lambda: parse_target(a, 3),
             lambda: gram_matrix(["z0"], [0.5, 0.25], "relu", 0.5, step=a)]
    try:
        calls[which]()
    except Exception as exc:  # noqa: BLE001 — the point of the test
        assert _package_error(exc), f"{type(exc).__name__}: {exc}"


def test_grid_seeds_beyond_32_bits_refused_before_running(tmp_path):
    with pytest.raises(GridError, match=r"integers in \[0, 2\^32\)"):
        load_grid(_grid(tmp_path, SMALL + "[sweep]\nseeds = [0, 4294967296]\n"))


@pytest.mark.parametrize("eigs,ok", [([1e-300, 1e-310], False), ([1e300, 1e299], False), (["1/2", "1/3"], True),
                                     (["pi", "0.1"], False), (["1e400"], False), ([np.float64(0.5)], True)])
def test_eigenvalue_range_and_text(eigs, ok):
    from featureode.calculus.data import DataError, Spectrum
    if ok:
        assert Spectrum.from_eigenvalues(eigs).dim == len(eigs)
    else:
        with pytest.raises(DataError, match="eigenvalues must be numbers in"):
            Spectrum.from_eigenvalues(eigs)


def test_provenance_recorded_outside_the_digest_and_files_honour_the_umask(tmp_path):
    from featureode.core.provenance import provenance
    from featureode.results.trajectory import write_text

    cfg = load_config(None)
    out = runs.prepare(tmp_path / "run", cfg)
    try:
        stamp = json.loads((out / "config.json").read_text())
    finally:
        runs.release(out)
    prov = stamp["provenance"]
    for key in ("featureode", "python", "numpy", "sympy", "torch", "git_commit", "host", "device", "time"):
        assert key in prov
    assert prov["python"] == ".".join(map(str, sys.version_info[:3]))
    assert stamp["digest"] == cfg.digest() and "provenance" not in json.dumps(cfg.to_dict())
    assert provenance()["time"] >= prov["time"]
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
        os.umask(0o077)
        write_text(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("proc", [True, False], ids=["proc-status", "locked-swap"])
def test_atomic_writes_from_many_threads_keep_the_umask(tmp_path, monkeypatch, proc):
    """Eight threads writing through the one atomic writer: the process umask is the same afterwards and every file
    has mode 0o666 & ~umask, both where the umask is read from /proc/self/status and where it must be swapped (the
    swap under a lock: unlocked, two threads could each restore the other's temporary mask)."""
    from concurrent.futures import ThreadPoolExecutor

    from featureode.core import cache

    if proc and not Path("/proc/self/status").exists():
        pytest.skip("no /proc/self/status on this system")
    if proc:   # the umask is read without ever being changed
        monkeypatch.setattr(cache.os, "umask", lambda *_: pytest.fail("os.umask called where /proc tells the umask"))
    else:
        real_open = open

        def no_proc(file, *a, **k):
            if str(file).startswith("/proc/"):
                raise OSError("no /proc here")
            return real_open(file, *a, **k)

        monkeypatch.setattr("builtins.open", no_proc)
    old = os.umask(0o027) if not proc else None
    try:
        want = 0o666 & ~(0o027 if not proc else cache._umask())
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: cache.atomic_bytes(tmp_path / f"f{n}", b"x", durable=False), range(400)))
        if not proc:
            assert os.umask(0o027) == 0o027
    finally:
        if old is not None:
            os.umask(old)
    assert {(tmp_path / f"f{n}").stat().st_mode & 0o777 for n in range(400)} == {want}
