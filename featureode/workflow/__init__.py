"""Runs on disk, compare, grids, sweeps and phase-diagram plots: what the commands do."""
