"""Checkpoints and the recorder that turns measurements into a :class:`~featureode.results.trajectory.Trajectory`."""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from featureode.kernel.parametrization import PARTS
from featureode.results.metrics import crossing_time, in_support_loss
from featureode.results.trajectory import Status, Trajectory, write_bytes
from featureode.sim.measure import JACKKNIFE_GROUPS, Measurement
from featureode.sim.schedule import Schedule
from featureode.sim.spec import CHECKPOINT_VERSION, MLPError, RunSpec


# ----------------------------------------------------------------------------------------------------------------
# checkpoint, recorder
# ----------------------------------------------------------------------------------------------------------------
class Checkpoint:
    """The checkpoint file of a batch of runs (``None`` path: no checkpoint).

    The state (a dict of tensors, lists and numbers) is written atomically — ``torch.save`` into memory, then a temp
    file in the same folder renamed over the old one — so a crash or ``kill -9`` leaves the previous checkpoint or the
    new one, never a torn file. :meth:`load` checks the format version and that the checkpoint belongs to the same
    configs and modes; a file that does not unpickle is reported as damaged, with the fix.
    """

    def __init__(self, path: "str | Path | None"):
        self.path = Path(path) if path is not None else None

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` (plus the format version) atomically."""
        if self.path is None:
            return
        buf = io.BytesIO()
        torch.save({"version": CHECKPOINT_VERSION, **state}, buf)
        write_bytes(self.path, buf.getvalue())

    def exists(self) -> bool:
        """Whether there is a checkpoint file to resume from."""
        return self.path is not None and self.path.exists()

    def load(self, digests: Sequence[str], modes: Sequence[Sequence[str]]) -> dict[str, Any]:
        """The saved state, after checking version, config digests and mode lists; raises :class:`MLPError` with the
        fix for a damaged, foreign or outdated file."""
        path = self.path
        assert path is not None  # load is called only for a recorder with a checkpoint file
        try:
            st = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(st, dict):
                raise TypeError(f"holds a {type(st).__name__}, not a checkpoint")
        except Exception as exc:  # any unpickling/zip failure means the same thing: the file cannot be used
            first = (str(exc).splitlines() or [""])[0][:120]
            raise MLPError(f"{path} is damaged ({type(exc).__name__}: {first}); delete it, or rerun without --resume, "
                           "to start the run afresh") from exc
        if st.get("version") != CHECKPOINT_VERSION:
            raise MLPError(f"{path}: checkpoint format {st.get('version')!r}, this featureode writes and resumes "
                           f"{CHECKPOINT_VERSION}; delete the checkpoint (or choose another --out) to start the run "
                           "afresh")
        if st.get("digests") != list(digests) or st.get("modes") != [list(m) for m in modes]:
            raise MLPError(f"{path} was written for a different configuration or mode set; delete it or "
                           "run without resume")
        return st


class Recorder:
    """The measurements of one run, as columns of JSON-ready lists (so a checkpoint can hold them), turned into a
    :class:`~featureode.results.trajectory.Trajectory` at the end."""

    COLUMNS = ("t", "loss", "f", "f_stderr", "lambda", "lambda_stderr", "r", "eta", "lambda_top", "steps", "a2",
               "joint", "gram") + tuple(f"lambda_parts/{p}" for p in PARTS) + tuple(
                   f"lambda_parts_stderr/{p}" for p in PARTS)
    #: Columns recorded only when the second moment ‖Kφ_β‖² is measured (``spread``); a checkpoint without them
    #: restores them as NaN rows.
    SPREAD_COLUMNS = ("lambda_second_moment", "lambda_second_moment_stderr")
    #: Recorded only with ``[training] exact_loss``: the exact population loss ``½ E[(f − f*)²]``
    #: (:mod:`featureode.kernel.population`).
    EXACT_COLUMNS = ("loss_exact",)

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.columns: dict[str, list] = {k: [] for k in self.COLUMNS}

    def __len__(self) -> int:
        return len(self.columns["t"])

    @property
    def last_t(self) -> float | None:
        """The last measured time (``None`` before the first measurement)."""
        return self.columns["t"][-1] if len(self) else None

    def add(self, m: Measurement, clock: Schedule, loss_exact: float | None = None) -> None:
        """Append one measurement taken at the clock's current time (with the exact population loss when it was
        computed)."""
        row: dict[str, Any] = {"t": clock.t, "loss": m.loss, "f": m.f.tolist(), "f_stderr": m.f_stderr.tolist(),
                               "lambda": m.lam.tolist(), "lambda_stderr": m.lam_stderr.tolist(), "r": m.r.tolist(),
                               "eta": clock.eta, "lambda_top": clock.lambda_top, "steps": clock.steps, "a2": m.a2,
                               "joint": m.joint.tolist(), "gram": m.gram.tolist()}
        for k, p in enumerate(PARTS):
            row[f"lambda_parts/{p}"] = m.parts[k].tolist()
            row[f"lambda_parts_stderr/{p}"] = m.parts_stderr[k].tolist()
        if m.second_moment is not None:
            row["lambda_second_moment"] = m.second_moment.tolist()
            row["lambda_second_moment_stderr"] = m.second_moment_stderr.tolist()  # type: ignore[union-attr]  # set with second_moment
        if loss_exact is not None:
            row["loss_exact"] = loss_exact
        before = len(self)
        for key, val in row.items():
            self.columns.setdefault(key, [[math.nan] * len(m.lam)] * before)
            self.columns[key].append(val)
        for key in self.SPREAD_COLUMNS:   # a run measured with and without the spread keeps equal column lengths
            if key in self.columns and key not in row:
                self.columns[key].append([math.nan] * len(m.lam))

    def state(self) -> dict[str, list]:
        """The columns (for checkpoints)."""
        return self.columns

    def restore(self, columns: dict[str, list]) -> None:
        """Set the columns from :meth:`state`."""
        self.columns = {k: list(columns[k]) for k in self.COLUMNS}
        self.columns.update({k: list(columns[k]) for k in self.SPREAD_COLUMNS + self.EXACT_COLUMNS if k in columns})

    def trajectory(self, clock: Schedule, meta: dict[str, Any]) -> Trajectory:
        """The run's :class:`~featureode.results.trajectory.Trajectory` (kind ``"mlp"``): theory §6 fields, t50/t10 of the
        test loss, the diagnostics as named arrays, ``meta`` plus the support directions of ``joint``."""
        spec, col = self.spec, self.columns
        t = np.asarray(col["t"], float)
        loss = np.asarray(col["loss"], float)
        ratio = loss / loss[0]
        f = np.asarray(col["f"], float)
        arrays = {"loss_ratio": ratio, "eta": np.asarray(col["eta"], float),
                  "lambda_top": np.asarray(col["lambda_top"], float), "steps": np.asarray(col["steps"], np.int64),
                  "lambda_stderr": np.asarray(col["lambda_stderr"], float), "a2": np.asarray(col["a2"], float),
                  "joint": np.asarray(col["joint"], float).reshape(len(t), len(spec.support)),
                  "gram": np.asarray(col["gram"], float)}
        arrays.update({k: np.asarray(col[k], float) for k in self.COLUMNS if k.startswith("lambda_parts")})
        arrays.update({k: np.asarray(col[k], float) for k in self.SPREAD_COLUMNS if k in col})
        meta = {**meta, "joint_directions": [f"z{i}" for i in spec.support],
                "lambda_parts_estimator": "U-statistic per parameter group (readout ∂/∂a, weights ∂/∂w, bias ∂/∂b); "
                                          f"stderr: delete-a-group jackknife over up to {JACKKNIFE_GROUPS} groups "
                                          "of test chunks (test-set noise at fixed parameters)"}
        if "loss_exact" in col:
            exact = np.asarray(col["loss_exact"], float)
            exact_ratio = exact / (0.5 * float(np.sum(np.square(spec.v))))
            arrays.update({"loss_exact": exact, "loss_exact_ratio": exact_ratio})
            meta.update({"t50_exact": crossing_time(t, exact_ratio, 0.5),
                         "t10_exact": crossing_time(t, exact_ratio, 0.1),
                         "loss_exact_estimator": "½E[(f − f*)²] exact: closed-form Gaussian pair moments of the "
                                                 "2N centred neurons (featureode.kernel.population); divided by "
                                                 "½Σv² for loss_exact_ratio"})
        if "lambda_second_moment" in col:
            meta["lambda_second_moment_estimator"] = (
                "‖Kφ_β‖² = E_x[(Kφ_β)(x)²] of the eNTK: half-split estimator (directions from the even and the odd "
                "jackknife groups, each sample left out of its own), unbiased; stderr: exact delete-a-group "
                "jackknife")
        return Trajectory("mlp", "mlp", tuple(str(m) for m in spec.modes), spec.v.copy(), t, loss, f=f,
                          lam=np.asarray(col["lambda"], float), r=np.asarray(col["r"], float),
                          in_support_loss=in_support_loss(f, spec.v), f_stderr=np.asarray(col["f_stderr"], float),
                          t50=crossing_time(t, ratio, 0.5), t10=crossing_time(t, ratio, 0.1), arrays=arrays,
                          meta=meta, status=Status(clock.complete, clock.t))




