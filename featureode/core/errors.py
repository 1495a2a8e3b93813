"""The one error base of the package.

Every error that is the user's input or environment (a bad config value, an unknown name, a folder in use, a run
that diverged) derives from :class:`FeatureODEError`; the CLI turns exactly these (plus the operating system's
file errors) into one line ``featureode: error: …`` and anything else is a bug that shows its traceback. Each
subclass keeps the built-in base it had (``ConfigError`` is still a ``ValueError``), so ``except ValueError``
callers keep working.
"""
from __future__ import annotations


class FeatureODEError(Exception):
    """Base of every user-facing featureode error: its message is one line naming the bad value and the fix."""
