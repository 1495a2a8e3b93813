"""A sweep task that kills its own worker process once (for the worker-death tests of test_sweeps.py).

``dying_execute`` replaces :func:`featureode.workflow.sweeps.execute`: the first time it meets the run named in the
``FEATUREODE_TEST_DIE`` marker folder it writes ``died_<run>`` there with its pid and ends the worker process with
``os._exit`` (no exception, no cleanup: a real death), afterwards it runs the group as usual."""
from __future__ import annotations

import os
from pathlib import Path


def dying_execute(group, marker_dir: str, victim: str):
    from featureode.workflow import sweeps

    marker = Path(marker_dir) / f"died_{victim}"
    if any(t.name == victim for t in group) and not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return sweeps.execute(group)
