"""Run folders (featureode.workflow.runs): stamp only after the config is valid, the folder lock across processes, --force
removing stale results, unwritable folders and damaged result files as one-line errors."""
from __future__ import annotations

import copy
import errno
import json
import multiprocessing
import os
import time

import numpy as np
import pytest

from featureode.workflow import runs
from featureode.cli import main
from featureode.config import ConfigError, MLP_SECTIONS, load_config
from featureode.calculus.data import DataError
from featureode.results.trajectory import Trajectory, TrajectoryFileError, write_npz
from featureode.ode.variants import VariantError


def _mlp_file(folder, digest: str) -> None:
    """A minimal simulation result of the given MLP digest in ``folder``."""
    t = np.array([0.0, 1.0])
    Trajectory("mlp", "mlp", ("z0",), np.array([1.0]), t, np.array([1.0, 0.5]), f=np.zeros((2, 1)),
               meta={"digest": digest}).save(folder)


def _touch(folder, *names: str) -> None:
    for name in names:
        (folder / name).write_text("{}")


def test_stamp_only_after_the_config_is_valid(tmp_path):
    good = load_config()
    out = tmp_path / "out"
    # configs that bypassed load-time validation (built and then mutated): prepare must check them again
    bad_data, bad_variants = copy.deepcopy(good), copy.deepcopy(good)
    bad_data.data.eigenvalues = [0.5, 0.3, 0.2]  # 3 values, dim 16
    bad_variants.ode.variants = ["lazy", "nope"]
    for bad, error in ((bad_data, (ConfigError, DataError)), (bad_variants, (ConfigError, VariantError))):
        with pytest.raises(error):
            runs.prepare(out, bad)
        assert not out.exists()  # nothing created, nothing stamped
    runs.prepare(out, good)
    runs.release(out)
    assert json.loads((out / "config.json").read_text())["digest"] == good.digest()


def test_cli_rejected_config_leaves_the_folder_usable(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[data]\ndim = 4\neigenvalues = [0.4, 0.3, 0.3]\n[target]\nexpr = "z0"\n')
    out = tmp_path / "out"
    assert main(["solve", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("featureode: error:") and "eigenvalues" in err and err.count("\n") == 1
    assert not (out / "config.json").exists()


def test_a_stamped_folder_without_results_takes_a_new_config(tmp_path):
    cfg = load_config()
    runs.prepare(tmp_path, cfg)
    other = cfg.replace(network={"richness": 0.1})
    runs.prepare(tmp_path, other)  # nothing computed yet: the stamp alone claims nothing
    assert json.loads((tmp_path / "config.json").read_text())["digest"] == other.digest()
    runs.release(tmp_path), runs.release(tmp_path)


def test_results_of_another_config_are_refused_and_force_removes_the_stale_ones(tmp_path):
    cfg = load_config()
    runs.prepare(tmp_path, cfg)
    _mlp_file(tmp_path, cfg.digest(MLP_SECTIONS))
    _touch(tmp_path, "ode.json", "ode.npz", "report.json", "report.md", "checkpoint.pt")
    richer = cfg.replace(network={"richness": 0.1})  # an MLP section: every result is stale
    with pytest.raises(FileExistsError, match=r"holds results of a different config \(changed: \[network\] richness"):
        runs.prepare(tmp_path, richer)
    runs.prepare(tmp_path, richer, force=True)
    assert runs.results_in(tmp_path) == []
    assert json.loads((tmp_path / "config.json").read_text())["digest"] == richer.digest()
    # only [ode] changes: the simulation stays valid and is kept, the ODE results and the report go
    _mlp_file(tmp_path, richer.digest(MLP_SECTIONS))
    _touch(tmp_path, "ode.json", "ode.npz", "report.json", "report.md")
    lazy_only = richer.replace(ode={"variants": ["lazy"]})
    runs.prepare(tmp_path, lazy_only, force=True)
    assert runs.results_in(tmp_path) == ["mlp.json", "mlp.npz"]
    assert runs.cached_mlp(tmp_path, lazy_only) is not None
    for _ in range(3):
        runs.release(tmp_path)


def test_force_removes_a_damaged_result_of_the_same_config(tmp_path):
    cfg = load_config()
    runs.prepare(tmp_path, cfg)
    _mlp_file(tmp_path, cfg.digest(MLP_SECTIONS))
    (tmp_path / "mlp.npz").write_bytes(b"truncated")
    with pytest.raises(TrajectoryFileError, match="mlp.npz is damaged"):  # never reused silently
        runs.cached_mlp(tmp_path, cfg)
    runs.prepare(tmp_path, cfg, force=True)
    assert runs.results_in(tmp_path) == [] and runs.cached_mlp(tmp_path, cfg) is None
    runs.release(tmp_path), runs.release(tmp_path)


def test_cached_mlp_of_another_config_is_not_reused(tmp_path):
    cfg = load_config()
    _mlp_file(tmp_path, cfg.replace(training={"seed": 1}).digest(MLP_SECTIONS))
    assert runs.cached_mlp(tmp_path, cfg) is None
    _mlp_file(tmp_path, cfg.digest(MLP_SECTIONS))
    assert runs.cached_mlp(tmp_path, cfg).meta["digest"] == cfg.digest(MLP_SECTIONS)
    write_npz(tmp_path / "mlp.npz", {})  # readable but mlp.json is now truncated
    (tmp_path / "mlp.json").write_text('{"modes": ["z0"], "t": [0.0')
    with pytest.raises(TrajectoryFileError, match="mlp.json is damaged"):
        runs.cached_mlp(tmp_path, cfg)


def _hold(folder: str, seconds: float, ready) -> None:
    """Child process: take the folder's lock, say so, hold it for ``seconds``."""
    runs.acquire(folder)
    ready.set()
    time.sleep(seconds)
    runs.release(folder)


def _no_flock(fd: int, op: int) -> None:
    """``fcntl.flock`` on a file system without it (some cluster file systems): ENOSYS."""
    raise OSError(errno.ENOSYS, "Function not implemented")


def _hold_without_flock(folder: str, seconds: float, ready) -> None:
    """Child process: :func:`_hold` where ``flock`` fails."""
    import fcntl

    fcntl.flock = _no_flock
    _hold(folder, seconds, ready)


def _child(folder, seconds: float, target=_hold):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=target, args=(str(folder), seconds, ready))
    proc.start()
    assert ready.wait(60), "the child did not take the lock"
    return proc


def test_lock_refuses_a_second_process_naming_the_folder_and_pid(tmp_path, monkeypatch, capsys):
    proc = _child(tmp_path, 30.0)
    try:
        with pytest.raises(runs.FolderInUseError) as err:
            runs.acquire(tmp_path, wait=0.3)
        assert str(tmp_path) in str(err.value) and f"pid {proc.pid}" in str(err.value)
        monkeypatch.setattr(runs, "LOCK_WAIT_S", 0.3)
        assert main(["solve", "--out", str(tmp_path)]) == 2
        msg = capsys.readouterr().err
        assert msg.startswith("featureode: error:") and f"pid {proc.pid}" in msg and msg.count("\n") == 1
        assert not (tmp_path / "config.json").exists()  # the refused command wrote nothing
    finally:
        proc.kill()
        proc.join()


@pytest.mark.filterwarnings("ignore:flock not supported:UserWarning")  # filelock 4 says so when it falls back
def test_lock_without_flock_is_the_soft_lock_and_still_refuses_a_second_process(tmp_path, monkeypatch):
    """Where ``flock`` fails (ENOSYS), the folder lock is filelock's soft lock: a second process is still refused,
    naming the holder; once the holder is gone the folder can be locked again."""
    import fcntl

    monkeypatch.setattr(fcntl, "flock", _no_flock)
    proc = _child(tmp_path, 30.0, _hold_without_flock)
    try:
        with pytest.raises(runs.FolderInUseError, match=f"pid {proc.pid}"):
            runs.acquire(tmp_path, wait=0.3)
    finally:
        proc.kill()
        proc.join()
    # filelock 3's soft lock (runs._soft_lock) outlives a killed holder; filelock 4 falls back inside FileLock and
    # finds a dead holder's lock stale
    (tmp_path / (runs.LOCK + ".soft")).unlink(missing_ok=True)
    with runs.locked(tmp_path, wait=1.0):
        assert (tmp_path / runs.PID_FILE).read_text() == str(os.getpid())


def test_lock_waits_for_a_short_holder(tmp_path):
    proc = _child(tmp_path, 0.5)
    try:
        t0 = time.monotonic()
        runs.acquire(tmp_path, wait=30.0)
        assert time.monotonic() - t0 < 30.0
        assert (tmp_path / runs.PID_FILE).read_text() == str(os.getpid())
        runs.release(tmp_path)
    finally:
        proc.join()


def test_lock_is_reentrant_within_a_process(tmp_path):
    with runs.locked(tmp_path):
        with runs.locked(tmp_path, wait=0.0):
            pass
        assert tmp_path.resolve() in runs._HELD
    assert tmp_path.resolve() not in runs._HELD


def test_unwritable_folder_is_one_line(tmp_path, monkeypatch, capsys):
    class Refused:
        def __init__(self, *args, **kwargs):
            pass

        def acquire(self, *args, **kwargs):
            raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(runs, "_new_lock", Refused)
    with pytest.raises(runs.RunFolderError, match="cannot write to the output folder .*Permission denied"):
        runs.prepare(tmp_path / "out", load_config())
    assert main(["solve", "--out", str(tmp_path / "cli")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("featureode: error: cannot write to the output folder") and err.count("\n") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_folder_is_one_line(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert main(["solve", "--out", str(ro / "out")]) == 2
        assert "cannot write to the output folder" in capsys.readouterr().err
    finally:
        ro.chmod(0o700)


def test_a_file_where_the_folder_should_be(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["solve", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert "cannot use" in err and str(tmp_path / "f") in err and err.count("\n") == 1


def test_damaged_checkpoint_is_named_and_force_removes_it(tmp_path):
    cfg = load_config()
    runs.prepare(tmp_path, cfg)
    (tmp_path / "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(TrajectoryFileError, match="checkpoint.pt is damaged"):
        runs.mlp_trajectory(cfg, tmp_path)  # refused before any training starts
    runs.prepare(tmp_path, cfg, force=True)
    assert not (tmp_path / "checkpoint.pt").exists()
    runs.release(tmp_path), runs.release(tmp_path)


def test_a_stamp_of_the_same_config_under_an_older_digest_is_accepted(tmp_path):
    """A folder stamped before the digest changed (same config, another digest string) is still the same run."""
    cfg = load_config()
    (tmp_path / "config.json").write_text(json.dumps({"digest": "0000older0000", "config": cfg.to_dict()}))
    _touch(tmp_path, "report.json")
    runs.prepare(tmp_path, cfg)  # not refused
    assert json.loads((tmp_path / "config.json").read_text())["digest"] == cfg.digest()
    assert (tmp_path / "report.json").exists()
    runs.release(tmp_path)
