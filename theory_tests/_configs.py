"""Editing the built-in config text in tests: every replacement must match, so a changed default fails loudly."""
from __future__ import annotations

from pathlib import Path

DEFAULT_TOML = Path(__file__).resolve().parents[1] / "featureode" / "defaults" / "default.toml"


def edited_default(*pairs: tuple[str, str]) -> str:
    """The text of ``default.toml`` with each ``(old, new)`` replaced; ``old`` must occur exactly once."""
    text = DEFAULT_TOML.read_text()
    for old, new in pairs:
        count = text.count(old)
        assert count == 1, f"{old!r} occurs {count} times in default.toml (expected once): update the test"
        text = text.replace(old, new)
    return text


DEFAULT_VARIANTS = 'variants = ["lazy", "displacement", "rational", "meanfield+whole"]'
