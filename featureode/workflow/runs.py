"""Run folders (theory §6): the output folder of ``solve``/``simulate``/``compare``, its config stamp, its lock, and
the lookup of results it already holds.

A run folder ``DIR`` holds:

* ``DIR/config.json`` — the stamp: the config and its digest (:meth:`featureode.config.Config.digest`, which leaves
  out run-time-only keys). It is written only after the config has passed every check that can be made before
  computing (:func:`check_config`), so a rejected config never claims a folder.
* ``DIR/.featureode.lock`` — an exclusive lock (:mod:`filelock`: ``fcntl.flock``, or its soft lock where the file
  system has no ``flock``), held by the command working in the folder; ``DIR/.featureode.pid`` records the holder's
  pid. A second command waits up to :data:`LOCK_WAIT_S` seconds and then refuses, naming the
  folder and the pid.
* results: ``ode.json``/``ode.npz``, ``mlp.json``/``mlp.npz``, ``checkpoint.pt``, ``report.{json,md,png}``.
* ``DIR/done.json`` — the completion stamp, written last, after every array and figure (:func:`mark_finished`):
  the digest and every file of the finished run with its size. A run is reused as finished only when its stamp
  lists every file asked for and each is there, of that size, its arrays loadable (:func:`finished`).

A folder that holds results of another config is refused unless ``force``; with ``force`` the results that are not
valid for the new config are removed before anything is recomputed (:func:`remove_stale`). A result file is reused
only through :class:`~featureode.results.trajectory.Trajectory` / :class:`~featureode.results.trajectory.ODEResult` loaders, which
refuse a damaged JSON or npz (:class:`~featureode.results.trajectory.TrajectoryFileError`) instead of reusing it.
"""
from __future__ import annotations

import errno
import json
import os
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from featureode.core.errors import FeatureODEError
from featureode.config import MLP_SECTIONS, Config, config_from_dict
from featureode.core.provenance import provenance
from featureode.ode.variants import MEANFIELD_CHECKPOINTS
from featureode.results.trajectory import ODEResult, Trajectory, TrajectoryFileError, check_npz, write_json

#: How long a command waits for another command to release a folder before refusing.
LOCK_WAIT_S = 5.0
STAMP = "config.json"
#: The completion stamp, written LAST (after every array and figure): the digest and each file with its size.
DONE = "done.json"
LOCK = ".featureode.lock"
#: Result files of the ODE and the report (depend on every config section).
ODE_FILES = ("ode.json", "ode.npz", "report.json", "report.md", "report.png", "report.pdf", "report.svg",
             "report_diagnostics.png", "report_diagnostics.pdf", "report_diagnostics.svg", *MEANFIELD_CHECKPOINTS)
#: Result files of the simulation (depend on :data:`~featureode.config.MLP_SECTIONS` only).
MLP_FILES = ("mlp.json", "mlp.npz", "checkpoint.pt")


class RunFolderError(FeatureODEError, RuntimeError):
    """An output folder that cannot be used (not writable, in use by another command); the message names it."""


class FolderInUseError(RunFolderError):
    """Another process holds the folder's lock."""


# ----------------------------------------------------------------------------------------------------------------
# the lock
# ----------------------------------------------------------------------------------------------------------------
_HELD: dict[Path, list[Any]] = {}  # folder → [lock, count]: re-entrant within one process
PID_FILE = ".featureode.pid"


def _writable(out: Path, exc: OSError) -> RunFolderError:
    return RunFolderError(f"cannot write to the output folder {out} ({os_error_text(exc)}); choose a writable "
                          "--out or fix its permissions")


def os_error_text(exc: OSError) -> str:
    """``ENOSPC (No space left on device)``: the errno's name and meaning (the message alone without an errno)."""
    name = errno.errorcode.get(exc.errno or -1)
    meaning = exc.strerror or os.strerror(exc.errno) if exc.errno else str(exc)
    return f"{name} ({meaning})" if name else meaning


def _new_lock(path: Path) -> Any:
    """A :class:`filelock.FileLock` (``fcntl.flock``), or its :class:`filelock.SoftFileLock` where the file system
    has no ``flock`` (some cluster file systems)."""
    import filelock

    return filelock.FileLock(str(path))


def _soft_lock(path: Path) -> Any:
    import filelock

    return filelock.SoftFileLock(str(path) + ".soft")


def _holder(out: Path) -> str:
    try:
        return (out / PID_FILE).read_text().strip() or "unknown"
    except (OSError, UnicodeDecodeError):
        return "unknown"


def acquire(out: "str | Path", wait: float | None = None) -> None:
    """Take the lock of ``out`` (created if needed) for this process; re-entrant. Waits up to ``wait`` seconds
    (default :data:`LOCK_WAIT_S`) for another process to release it, then raises :class:`FolderInUseError` naming
    the folder and the holder's pid. The one lock of every command that writes a folder (``solve``, ``simulate``,
    ``compare``, ``sweep``, ``validate``); ``--force`` does not bypass it."""
    import filelock

    if str(out) == "":
        raise RunFolderError("the output folder is empty (--out \"\"); name a folder")
    out = Path(out).resolve()
    wait = LOCK_WAIT_S if wait is None else wait
    if out in _HELD:
        _HELD[out][1] += 1
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # read-only file system, a file where the folder should be, …
        raise RunFolderError(f"cannot use {out} as the output folder ({os_error_text(exc)}); choose another "
                             "--out") from None
    lock = _new_lock(out / LOCK)
    try:
        try:
            lock.acquire(timeout=wait)
        except NotImplementedError:   # no flock here: the soft lock (a file created exclusively)
            lock = _soft_lock(out / LOCK)
            lock.acquire(timeout=wait)
    except filelock.Timeout:
        raise FolderInUseError(f"{out} is in use by another featureode command (pid {_holder(out)}); wait for it "
                               "to finish or choose another --out") from None
    except OSError as exc:
        raise _writable(out, exc) from None
    try:
        from featureode.results.trajectory import write_text

        write_text(out / PID_FILE, str(os.getpid()), durable=False)   # a note for the refusal message only
    except OSError as exc:
        lock.release()
        raise _writable(out, exc) from None
    _HELD[out] = [lock, 1]


def release(out: "str | Path") -> None:
    """Release one hold of this process on the lock of ``out`` (the lock goes when the last hold does)."""
    out = Path(out).resolve()
    held = _HELD.get(out)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[out]
        try:
            (out / PID_FILE).unlink(missing_ok=True)
        except OSError:
            pass
        held[0].release()


@contextmanager
def locked(out: "str | Path", wait: float | None = None) -> Iterator[Path]:
    """``with locked(DIR):`` — hold the lock of ``DIR`` inside the block (see :func:`acquire`)."""
    acquire(out, wait)
    try:
        yield Path(out)
    finally:
        release(out)


# ----------------------------------------------------------------------------------------------------------------
# the stamp
# ----------------------------------------------------------------------------------------------------------------
def check_config(cfg: Config) -> None:
    """Every check of ``cfg`` that can be made before computing (beyond :func:`~featureode.config.config_from_dict`):
    the spectrum, the target's decomposition, the ODE variants and ablations. Raises the library's one-line error."""
    from featureode.ode.variants import variants_from_config

    cfg.target_obj(cfg.spectrum())
    variants_from_config(cfg.ode, allow_replay=True)  # solve refuses replay itself; compare computes it


def read_stamp(out: "str | Path") -> dict[str, Any] | None:
    """The stamp ``out/config.json`` (``None`` if absent or unreadable: an unreadable stamp claims nothing)."""
    path = Path(out) / STAMP
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    except PermissionError as exc:
        raise _writable(Path(out), exc) from None
    return data if isinstance(data, dict) else None


def results_in(out: "str | Path") -> list[str]:
    """The result files present in ``out``."""
    return [name for name in ODE_FILES + MLP_FILES if (Path(out) / name).exists()]


def _changed_keys(old: dict[str, Any], cfg: Config) -> list[str]:
    return sorted(f"[{sec}] {k}" for sec, vals in cfg.to_dict().items()
                  for k, v in vals.items() if old.get("config", {}).get(sec, {}).get(k) != v)


def _old_digest(old: dict[str, Any], sections: tuple[str, ...] | None = None) -> str | None:
    """The digest of a stamp's config recomputed with today's :meth:`~featureode.config.Config.digest` (so a stamp
    written before a change of the digest, or differing only in run-time keys, still matches); ``None`` if that
    config no longer loads."""
    try:
        old_cfg = config_from_dict(old.get("config", {}))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return old_cfg.digest() if sections is None else old_cfg.digest(sections)


def same_config(old: dict[str, Any] | None, cfg: Config) -> bool:
    """Is the stamp ``old`` one of ``cfg`` (its stored digest, or its config's digest recomputed today)?"""
    return old is not None and (old.get("digest") == cfg.digest() or _old_digest(old) == cfg.digest())


def remove_stale(out: "str | Path", cfg: Config, old: dict[str, Any] | None) -> list[str]:
    """Remove the results in ``out`` that are not valid for ``cfg``; returns the names removed.

    ODE and report files go when the stamp ``old`` is of another config or when they are damaged; simulation files
    (``mlp.*``, ``checkpoint.pt``) go unless ``mlp.json`` loads and is of ``cfg``'s MLP sections (or, without an
    ``mlp.json``, unless the old stamp's MLP sections equal ``cfg``'s and the checkpoint is a readable archive)."""
    out = Path(out)
    same = same_config(old, cfg)
    drop: list[str] = []
    ode_ok = same
    if same and (out / "ode.json").exists():
        try:
            ODEResult.load(out)
        except TrajectoryFileError:
            ode_ok = False
    if same and (out / "report.json").exists():
        try:
            json.loads((out / "report.json").read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            ode_ok = False
    if not ode_ok:
        drop += list(ODE_FILES)
    mlp_digest = cfg.digest(MLP_SECTIONS)
    if (out / "mlp.json").exists():
        try:
            mlp_ok = Trajectory.load(out, "mlp").meta.get("digest") == mlp_digest
        except TrajectoryFileError:
            mlp_ok = False
    else:
        mlp_ok = (old is not None and _old_digest(old, MLP_SECTIONS) == mlp_digest
                  and _readable_archive(out / "checkpoint.pt"))
    if not mlp_ok:
        drop += list(MLP_FILES)
    removed = []
    for name in drop:
        try:
            (out / name).unlink()
            removed.append(name)
        except FileNotFoundError:
            pass
        except PermissionError as exc:
            raise _writable(out, exc) from None
    return removed


def _readable_archive(path: Path) -> bool:
    """``path`` is absent or a readable zip archive (torch's checkpoint format)."""
    if not path.exists():
        return True
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.testzip() is None
    except (zipfile.BadZipFile, OSError):
        return False


def claim(out: "str | Path", cfg: Config, force: bool = False, wait: float | None = None,
          extra: dict[str, Any] | None = None, check: bool = True) -> dict[str, Any] | None:
    """The one way a folder becomes the run folder of ``cfg`` (``compare``/``solve``/``simulate`` through
    :func:`prepare`, every sweep run): check the config (:func:`check_config`, unless ``check`` is false because the
    caller has), create the folder, take its lock for this process (held until :func:`release`), refuse a folder
    holding results of another config unless ``force`` (then remove what is stale, :func:`remove_stale`), and write
    the stamp (with the ``extra`` keys, e.g. a sweep's point digest). Returns the previous stamp (``None``: none)."""
    out = Path(out)
    if check:
        check_config(cfg)
    acquire(out, wait)
    try:
        old = read_stamp(out)
        present = results_in(out)
        if old is not None and present and not force and not same_config(old, cfg):
            raise FileExistsError(f"{out} holds results of a different config (changed: "
                                  f"{', '.join(_changed_keys(old, cfg)) or 'the digest'}); choose another --out or "
                                  "pass --force")
        if force:
            remove_stale(out, cfg, old)
        unmark_finished(out)   # new work starts: the folder is finished again only when it says so at the end
        write_json(out / STAMP, {"digest": cfg.digest(), "config": cfg.to_dict(), "source": cfg.source,
                                 "provenance": provenance(cfg.training.device), **(extra or {})}, indent=2)
    except FileExistsError:   # a folder of another config (raised above)
        release(out)
        raise
    except OSError as exc:   # EACCES, EROFS, ENOSPC, …
        release(out)
        raise _writable(out, exc) from None
    except BaseException:
        release(out)
        raise
    return old


def prepare(out: "str | Path", cfg: Config, force: bool = False, wait: float | None = None) -> Path:
    """Make ``out`` the run folder of ``cfg`` (:func:`claim`); the lock stays held until :func:`release` or the end
    of the process. Returns the folder."""
    claim(out, cfg, force=force, wait=wait)
    return Path(out)


# ----------------------------------------------------------------------------------------------------------------
# the completion stamp
# ----------------------------------------------------------------------------------------------------------------
def mark_finished(out: "str | Path", cfg: Config, files: Sequence[str]) -> None:
    """Write ``out/done.json`` — LAST, after every file of the run: ``cfg``'s digest and each of ``files`` present
    with its size (a file listed but absent is an error: the run did not write what it claims)."""
    out = Path(out)
    sizes = {}
    for name in files:
        try:
            sizes[name] = (out / name).stat().st_size
        except FileNotFoundError:
            raise RunFolderError(f"{out / name} is missing at the end of the run; the run is not finished") from None
    write_json(out / DONE, {"digest": cfg.digest(), "files": sizes})


def unmark_finished(out: "str | Path") -> None:
    """Remove the completion stamp (before new work in ``out``)."""
    try:
        (Path(out) / DONE).unlink(missing_ok=True)
    except OSError as exc:
        raise _writable(Path(out), exc) from None


def finished(out: "str | Path", digest: str, need: Sequence[str]) -> bool:
    """Is ``out`` a finished run of the config with ``digest`` holding every file of ``need``? With a completion
    stamp: its digest, every needed file listed, and every listed file present with its size and (``.npz``)
    loadable. A folder from before completion stamps: every needed file present and its arrays loadable."""
    out = Path(out)
    try:
        stamp = json.loads((out / DONE).read_text())
    except FileNotFoundError:
        stamp = None
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    if stamp is not None:
        if not isinstance(stamp, dict) or stamp.get("digest") != digest or not isinstance(stamp.get("files"), dict):
            return False
        files = stamp["files"]
        if not set(need) <= set(files):
            return False
    else:
        files = {name: None for name in need}
    for name, size in files.items():
        try:
            st = (out / name).stat()
        except OSError:
            return False
        if size is not None and st.st_size != size:
            return False
        if name.endswith(".npz"):
            try:
                check_npz(out / name)
            except TrajectoryFileError:
                return False
    return True


# ----------------------------------------------------------------------------------------------------------------
# cached results
# ----------------------------------------------------------------------------------------------------------------
def cached_mlp(out: "str | Path", cfg: Config) -> Trajectory | None:
    """The simulation in ``out/mlp.json`` if it is of ``cfg``'s MLP sections, else ``None``; a damaged
    ``mlp.json``/``mlp.npz`` raises :class:`~featureode.results.trajectory.TrajectoryFileError` (never reused silently)."""
    out = Path(out)
    if not (out / "mlp.json").exists():
        return None
    tr = Trajectory.load(out, "mlp")
    return tr if tr.meta.get("digest") == cfg.digest(MLP_SECTIONS) else None


def cached_report(out: "str | Path", cfg: Config) -> dict[str, Any] | None:
    """``out/report.json`` if it was written for ``cfg`` (every section), else ``None``."""
    path = Path(out) / "report.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("digest") == cfg.digest() else None


def mlp_trajectory(cfg: Config, out: "str | Path", progress: bool = True,
                   modes: "Sequence[str] | None" = None) -> Trajectory:
    """The MLP of ``cfg`` in ``out``: the finished simulation there, or a new one (resumed from ``checkpoint.pt``
    when one is present), written to ``out/mlp.json``/``mlp.npz``. A damaged checkpoint is refused, naming it.

    ``modes``: modes to measure besides the target's (e.g. the ODE's extended basis, for ``replay``). A finished
    simulation is reused even when it measured fewer (a training is not repeated for measurements); the caller
    sees which in ``Trajectory.modes``."""
    from featureode.sim.mlp import simulate_config

    out = Path(out)
    cached = cached_mlp(out, cfg)
    if cached is not None and cached.status.complete:
        return cached
    checkpoint = out / "checkpoint.pt"
    if not _readable_archive(checkpoint):
        raise TrajectoryFileError(f"{checkpoint} is damaged (not a readable archive); delete it to start the "
                                  "simulation afresh, or rerun with --force")
    simulate_config(cfg, out, resume=checkpoint.exists(), progress=progress, modes=modes)
    return Trajectory.load(out, "mlp")
