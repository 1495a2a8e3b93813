"""The simulator's step schedule (theory §3), in pure Python: no torch, so it is tested on its own.

One run trains on gradient-flow time ``t = Σ η`` towards its measurement times ``t_0 = 0 < t_1 < … < t_K = t_max``:

* step size ``η = min(eta_max, eta_safety/λ_top)``, with ``λ_top`` the top eigenvalue of the empirical NTK, refreshed
  whenever the global step count is a positive multiple of ``ntk_every`` (:func:`refresh_due`) and once at the start;
* the step before a measurement time is shortened to land on it exactly (a gap ``≤ η (1 + 1e-9)`` is closed in one
  step, so round-off never leaves a sliver of a step);
* the run ends at ``t_K`` (complete), at the first measurement with ``L/L(0) ≤ stop_loss`` when ``stop_loss > 0``
  (complete: its curve ends there), or after ``max_steps`` steps (incomplete).

:class:`DivergenceMonitor` decides when a run has diverged from its loss values: a non-finite batch loss at any step,
the mean batch loss over a window of at least :data:`DIVERGENCE_SAMPLES` samples above :data:`DIVERGENCE_FACTOR`
``× L(0)``, or a test loss above that bound at a measurement. A single small batch (``batch = 1``: one sample's loss
is often ``> 10 L(0)`` for a heavy-tailed target) never trips it.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # type-only imports (these modules sit above this layer or are heavy)
    from featureode.config import TrainingConfig

LANDING_TOLERANCE = 1e-9    # a gap ≤ η (1 + this) is closed in one step
DIVERGENCE_FACTOR = 10.0    # a mean loss above this × L(0) counts as divergence
DIVERGENCE_SAMPLES = 4096   # the batch-loss mean is taken over at least this many samples (⌈4096/B⌉ steps)


def measurement_times(t_min: float, t_max: float, n_points: int) -> np.ndarray:
    """``t = 0`` followed by ``n_points`` log-spaced times from ``t_min`` to ``t_max`` (just ``[0, t_max]`` when
    ``t_min ≥ t_max`` or ``n_points ≤ 1``)."""
    if n_points <= 1 or not 0 < t_min < t_max:
        return np.array([0.0, float(t_max)])
    grid = np.geomspace(t_min, t_max, n_points)
    grid[-1] = t_max
    return np.concatenate([[0.0], grid])


def refresh_due(step_count: int, ntk_every: int) -> bool:
    """Whether ``λ_top`` is re-measured before global step ``step_count`` (a positive multiple of ``ntk_every``; the
    first refresh, before step 0, is the caller's)."""
    return step_count > 0 and step_count % ntk_every == 0


def step_size(lambda_top: float, eta_max: float, eta_safety: float) -> float:
    """``η = min(eta_max, eta_safety/λ_top)`` (``eta_max`` when ``λ_top ≤ 0``)."""
    return min(eta_max, eta_safety / lambda_top if lambda_top > 0 else math.inf)


@dataclass(frozen=True)
class Step:
    """One planned step: its gradient-flow increment ``h`` and whether it lands on the next measurement time."""

    h: float
    lands: bool


@dataclass
class Schedule:
    """The clock of one run (mutable; :meth:`state` / :meth:`from_state` round-trip it for checkpoints).

    ``times``: the measurement times (``t = 0`` first); ``t``: the current time; ``eta``, ``lambda_top``: the current
    step size and the ``λ_top`` it came from; ``next_index``: the measurement time the run heads for; ``steps``: SGD
    steps taken; ``active``: still training; ``complete``: ended at ``t_max`` or at the ``stop_loss`` floor.
    """

    times: tuple[float, ...]
    eta_max: float
    eta_safety: float
    max_steps: int
    stop_loss: float = 0.0
    t: float = 0.0
    eta: float = 0.0
    lambda_top: float = float("nan")
    next_index: int = 1
    steps: int = 0
    active: bool = True
    complete: bool = False

    _STATE = ("t", "eta", "lambda_top", "next_index", "steps", "active", "complete")

    @classmethod
    def for_training(cls, times: "Sequence[float] | np.ndarray", training: TrainingConfig) -> "Schedule":
        """The schedule of a run with these measurement times and ``[training]`` settings (``eta_max``,
        ``eta_safety``, ``max_steps``, ``stop_loss``)."""
        return cls(tuple(float(x) for x in times), training.eta_max, training.eta_safety, training.max_steps,
                   training.stop_loss)

    def set_lambda_top(self, lambda_top: float) -> None:
        """A fresh ``λ_top``: ``η = min(eta_max, eta_safety/λ_top)``."""
        self.lambda_top = lambda_top
        self.eta = step_size(lambda_top, self.eta_max, self.eta_safety)

    @property
    def target_time(self) -> float:
        """The measurement time the run heads for."""
        return self.times[self.next_index]

    def plan(self) -> Step:
        """The next step: ``η``, or the remaining gap when that lands on the next measurement time."""
        if not self.active:
            return Step(0.0, False)
        gap = self.target_time - self.t
        if gap <= self.eta * (1 + LANDING_TOLERANCE):
            return Step(gap, True)
        return Step(self.eta, False)

    def advance(self, step: Step) -> None:
        """The step was taken: count it and move the clock (exactly onto the measurement time when it lands)."""
        self.steps += 1
        self.t = self.target_time if step.lands else self.t + step.h

    def measured(self, loss: float, initial_loss: float) -> None:
        """A measurement at the landed time ``t`` gave the test loss ``loss`` (``initial_loss`` at ``t = 0``): head for
        the next time, or end the run (complete) at the last time or at ``L ≤ stop_loss × L(0)``."""
        self.next_index += 1
        if self.next_index == len(self.times) or loss <= self.stop_loss * initial_loss:
            self.active, self.complete = False, True

    @property
    def out_of_steps(self) -> bool:
        """Still active but ``max_steps`` steps taken: the run must stop, incomplete."""
        return self.active and self.steps >= self.max_steps

    def stop(self) -> None:
        """End the run where it is (incomplete unless already complete)."""
        self.active = False

    def state(self) -> dict[str, Any]:
        """The mutable fields (JSON/pickle-ready)."""
        return {k: getattr(self, k) for k in self._STATE}

    def restore(self, state: dict[str, Any]) -> None:
        """Set the mutable fields from :meth:`state`."""
        for k in self._STATE:
            setattr(self, k, state[k])


@dataclass
class DivergenceMonitor:
    """Divergence from loss values, robust to small batches (see the module docstring).

    ``initial_loss``: ``L(0)`` of the run's test set; ``batch``: samples per step. The window holds the last
    ``⌈DIVERGENCE_SAMPLES / batch⌉`` batch losses.
    """

    initial_loss: float
    batch: int
    window: deque = field(default_factory=deque)
    total: float = 0.0

    @property
    def size(self) -> int:
        """Steps in a full window."""
        return max(1, math.ceil(DIVERGENCE_SAMPLES / self.batch))

    @property
    def bound(self) -> float:
        """The loss above which a run counts as diverged: ``DIVERGENCE_FACTOR × L(0)``."""
        return DIVERGENCE_FACTOR * self.initial_loss

    def observe(self, batch_loss: float) -> str | None:
        """Record one step's batch loss; returns why the run diverged, or ``None``."""
        if not math.isfinite(batch_loss):
            return f"batch loss is {batch_loss}"
        self.window.append(batch_loss)
        self.total += batch_loss
        if len(self.window) > self.size:
            self.total -= self.window.popleft()
        if len(self.window) == self.size and self.total > self.bound * self.size:
            self.total = math.fsum(self.window)  # re-sum exactly before declaring a divergence
            if self.total > self.bound * self.size:
                samples = self.size * self.batch
                return (f"the mean batch loss over the last {self.size} step(s) ({samples} samples) is "
                        f"{self.total / self.size:.3g}, above {DIVERGENCE_FACTOR:g} × L(0) = {self.bound:.3g}")
        return None

    def observe_test(self, test_loss: float) -> str | None:
        """Check a measured test loss; returns why the run diverged, or ``None``."""
        if not (math.isfinite(test_loss) and test_loss <= self.bound):
            return f"test loss is {test_loss:.3g}, above {DIVERGENCE_FACTOR:g} × L(0) = {self.bound:.3g}"
        return None

    def state(self) -> dict[str, Any]:
        """The window (for checkpoints)."""
        return {"window": list(self.window), "total": self.total}

    def restore(self, state: dict[str, Any]) -> None:
        """Set the window from :meth:`state`."""
        self.window = deque(state["window"])
        self.total = state["total"]

