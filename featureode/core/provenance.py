"""Where and with what a result was made: :func:`provenance`, recorded beside (never inside) a config's digest in
``config.json``, ``report.json``, ``mlp.json`` and the sidecar ``results.meta.json`` of ``results.csv``."""
from __future__ import annotations

import datetime
import functools
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["provenance"]

_PACKAGES = ("featureode", "numpy", "sympy", "scipy", "torch")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        if name == "featureode":
            import featureode

            return getattr(featureode, "__version__", None)
        return None


@functools.lru_cache(maxsize=1)
def _static() -> dict[str, Any]:
    """What does not change while the process runs (package versions without importing them, the checkout's
    commit, the host)."""
    out: dict[str, Any] = {"python": platform.python_version()}
    out.update({name: _version(name) for name in _PACKAGES})
    root = Path(__file__).resolve().parents[2]
    commit = None
    if (root / ".git").exists():
        try:
            res = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=5, check=False)
            commit = res.stdout.strip() or None
            if commit:
                dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                       capture_output=True, text=True, timeout=5, check=False).stdout.strip()
                commit += "-dirty" if dirty else ""
        except (OSError, subprocess.SubprocessError):
            commit = None
    out["git_commit"] = commit
    out["host"] = socket.gethostname()
    out["platform"] = platform.platform()
    return out


def provenance(device: str | None = None) -> dict[str, Any]:
    """``{"featureode", "python", "numpy", "sympy", "scipy", "torch": versions, "git_commit" (when run from a
    checkout; ``-dirty`` with uncommitted changes), "host", "platform", "device", "time" (ISO 8601, UTC)}``.
    ``device``: the device the result was computed on (default ``"cpu"``)."""
    return {**_static(), "device": device or "cpu",
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
