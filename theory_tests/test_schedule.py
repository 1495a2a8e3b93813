"""The simulator's step schedule and divergence rule (featureode.sim.schedule, theory §3), without torch.

Oracles: exact definitions re-derived here — the landing rule checked step by step on float clocks, stop conditions
counted directly, and the windowed batch-loss mean computed by NumPy over every window.
"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from featureode.sim.schedule import (DIVERGENCE_FACTOR, DIVERGENCE_SAMPLES, LANDING_TOLERANCE, DivergenceMonitor,
                                 Schedule, measurement_times, refresh_due, step_size)

ROOT = Path(__file__).resolve().parents[1]


def test_schedule_module_does_not_import_torch():
    code = "import sys, featureode.sim.schedule; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@given(t_min=st.floats(1e-3, 10.0), span=st.floats(1.001, 1e4), n=st.integers(2, 200))
def test_measurement_times_are_log_spaced_and_end_exactly_at_t_max(t_min, span, n):
    t_max = t_min * span
    t = measurement_times(t_min, t_max, n)
    assert len(t) == n + 1 and t[0] == 0.0 and t[1] == pytest.approx(t_min) and t[-1] == t_max
    assert np.all(np.diff(t) > 0)
    np.testing.assert_allclose(np.diff(np.log(t[1:])), math.log(span) / (n - 1), rtol=1e-6)


@pytest.mark.parametrize("t_min, t_max, n", [(5.0, 5.0, 10), (6.0, 5.0, 10), (0.0, 5.0, 10), (0.1, 5.0, 1)])
def test_degenerate_grids_are_just_zero_and_t_max(t_min, t_max, n):
    assert measurement_times(t_min, t_max, n).tolist() == [0.0, t_max]


@given(st.integers(0, 10_000), st.integers(1, 500))
def test_refresh_is_due_at_positive_multiples(step, every):
    assert refresh_due(step, every) == (step > 0 and step % every == 0)


@given(lam=st.floats(-1.0, 1e6), eta_max=st.floats(1e-6, 10.0), safety=st.floats(1e-3, 2.0))
def test_step_size_is_min_of_eta_max_and_safety_over_lambda(lam, eta_max, safety):
    expect = eta_max if lam <= 0 else min(eta_max, safety / lam)
    assert step_size(lam, eta_max, safety) == expect


def _drive(clock: Schedule, lambdas, losses=None, max_iter=1_000_000):
    """Run a clock as the simulator does (λ_top refreshed every 3 steps from ``lambdas``), recording every step."""
    log, k = [], 0
    clock.set_lambda_top(lambdas[0])
    while clock.active and k < max_iter:
        if refresh_due(k, 3):
            clock.set_lambda_top(lambdas[(k // 3) % len(lambdas)])
        before, eta = clock.t, clock.eta
        step = clock.plan()
        clock.advance(step)
        k += 1
        log.append((before, eta, step, clock.t))
        if step.lands:
            clock.measured(1.0 if losses is None else losses[clock.next_index - 1], 1.0)
        if clock.out_of_steps:
            clock.stop()
    return log


@given(times=st.lists(st.floats(1e-3, 50.0), min_size=1, max_size=8, unique=True),
       lambdas=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=5), eta_max=st.floats(0.05, 2.0))
def test_clock_lands_exactly_on_every_measurement_time(times, lambdas, eta_max):
    """Every step is η except the one that closes a gap ≤ η(1 + tol); the clock then equals the measurement time
    exactly; the times are visited in order and the run ends complete at t_max."""
    grid = (0.0, *sorted(times))
    clock = Schedule(grid, eta_max, 0.5, max_steps=10**9)
    log = _drive(clock, lambdas)
    visited = [after for _, _, step, after in log if step.lands]
    assert visited == list(grid[1:])
    for before, eta, step, after in log:
        gap = grid[[g > before for g in grid].index(True)] - before
        assert 0 < step.h <= eta * (1 + LANDING_TOLERANCE)
        assert step.lands == (gap <= eta * (1 + LANDING_TOLERANCE))
        assert step.h == (gap if step.lands else eta)
        assert after == (grid[[g > before for g in grid].index(True)] if step.lands else before + eta)
    assert clock.complete and not clock.active and clock.t == grid[-1]


@given(max_steps=st.integers(1, 40))
def test_max_steps_stops_incomplete_after_exactly_max_steps(max_steps):
    clock = Schedule((0.0, 1000.0), 0.1, 0.5, max_steps=max_steps)
    log = _drive(clock, [1.0])
    assert len(log) == max_steps == clock.steps
    assert not clock.active and not clock.complete and clock.t == pytest.approx(0.1 * max_steps)


@given(losses=st.lists(st.floats(0.0, 2.0), min_size=6, max_size=6), floor=st.floats(0.01, 0.99))
def test_stop_loss_ends_at_the_first_measurement_at_or_below_the_floor(losses, floor):
    grid = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    clock = Schedule(grid, 0.3, 0.5, max_steps=10**6, stop_loss=floor)
    log = _drive(clock, [1.0], losses=losses)
    below = [k for k, x in enumerate(losses) if x <= floor]
    last = below[0] + 1 if below else len(grid) - 1
    assert clock.complete and clock.t == grid[last]
    assert sum(step.lands for *_, step, _ in log) == last


def test_schedule_state_round_trips():
    a = Schedule((0.0, 1.0, 3.0), 0.2, 0.5, max_steps=100)
    _drive(a, [2.0], max_iter=7)
    b = Schedule((0.0, 1.0, 3.0), 0.2, 0.5, max_steps=100)
    b.restore(a.state())
    assert b == a
    assert [s for *_, s, _ in _drive(a, [2.0])] == [s for *_, s, _ in _drive(b, [2.0])]


# ----------------------------------------------------------------------------------------------------------------
# divergence
# ----------------------------------------------------------------------------------------------------------------
def _first_trip(losses: np.ndarray, window: int, bound: float) -> int | None:
    """Oracle: first step whose trailing mean over ``window`` steps exceeds ``bound`` (NumPy over every window)."""
    if len(losses) < window:
        return None
    means = np.convolve(losses, np.ones(window) / window, mode="valid")
    over = np.nonzero(means > bound)[0]
    return int(over[0]) + window - 1 if over.size else None


@given(batch=st.sampled_from([512, 1000, 2048, 4096, 8192]), seed=st.integers(0, 10**6),
       spike=st.floats(5.0, 200.0))
def test_monitor_trips_exactly_when_the_window_mean_exceeds_the_bound(batch, seed, spike):
    rng = np.random.default_rng(seed)
    losses = rng.exponential(1.0, 60)
    losses[rng.integers(0, 60, 3)] *= spike
    mon = DivergenceMonitor(initial_loss=1.0, batch=batch)
    window = math.ceil(DIVERGENCE_SAMPLES / batch)
    assert mon.size == window
    tripped = next((k for k, x in enumerate(losses) if mon.observe(float(x)) is not None), None)
    assert tripped == _first_trip(losses, window, DIVERGENCE_FACTOR)


def test_batch_of_one_single_sample_spikes_are_no_divergence():
    """B = 1: a heavy-tailed target (y = z0 z1 z2, L = ½ y² at f = 0, E L = ½) gives single-sample losses far above
    10 L(0) many times in 20 000 steps, but the mean over 4096 samples never gets there."""
    rng = np.random.default_rng(0)
    losses = 0.5 * np.prod(rng.standard_normal((20_000, 3)), axis=1) ** 2
    assert (losses > DIVERGENCE_FACTOR * 0.5).sum() > 100  # the old per-step rule would have tripped
    mon = DivergenceMonitor(initial_loss=0.5, batch=1)
    assert all(mon.observe(float(x)) is None for x in losses)
    assert mon.observe(float("nan")) is not None and mon.observe(float("inf")) is not None


def test_monitor_test_loss_and_state():
    mon = DivergenceMonitor(initial_loss=2.0, batch=1024)
    assert mon.observe_test(19.9) is None and "above" in mon.observe_test(20.1)
    assert mon.observe_test(float("nan")) is not None
    for x in (1.0, 2.0, 3.0):
        mon.observe(x)
    other = DivergenceMonitor(initial_loss=2.0, batch=1024)
    other.restore(mon.state())
    assert list(other.window) == list(mon.window) == [1.0, 2.0, 3.0] and other.total == mon.total == 6.0
