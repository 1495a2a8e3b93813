"""The mode basis of the ODE, defined once: ``target`` (the target's own modes) or ``extended`` (those plus the modes
the kernel couples them to)."""
from __future__ import annotations

from enum import StrEnum

from featureode.core.errors import FeatureODEError


class Basis(StrEnum):
    """The mode basis; a member equals its text (``Basis.TARGET == "target"``), so configs keep plain strings."""

    TARGET = "target"
    EXTENDED = "extended"


#: The valid basis names, in order (for choices and messages).
BASES: tuple[str, ...] = tuple(b.value for b in Basis)


def check_basis(basis: object, error: type[FeatureODEError], what: str = "basis") -> Basis:
    """``basis`` as a :class:`Basis`; anything else raises ``error`` with one line naming the value and the choices."""
    if isinstance(basis, str) and basis in BASES:
        return Basis(basis)
    raise error(f"{what} must be {' or '.join(map(repr, BASES))}, got {basis!r}")
