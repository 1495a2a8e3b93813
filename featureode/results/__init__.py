"""Value types of results: trajectories and their metrics (t50, t10, ratios)."""
