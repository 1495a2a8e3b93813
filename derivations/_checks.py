"""The check every derivation script records and prints: ``check(cond, what)`` stops the script on a false claim and
otherwise prints ``[checked] what``; :data:`CHECKS` lists the claims checked so far (the scripts print the count)."""
from __future__ import annotations

CHECKS: list[str] = []


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"derivation check failed: {what}")
    CHECKS.append(what)
    print(f"  [checked] {what}")
