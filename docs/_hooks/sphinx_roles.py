"""A griffe extension for the docs build: the docstrings' Sphinx roles become mkdocs-autorefs cross-references.

``:class:`~featureode.ode.variants.Variant``` → a link titled ``Variant``; ``:func:`solve_config``` (a name relative
to the docstring's module or class) → a link to that object when the API pages render it. The references are
*optional*: one whose target is not rendered (a private helper, another library) shows as plain code, without a
warning, so ``mkdocs build --strict`` stays strict about everything written in the pages themselves.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|exc|obj|const):`(~?)([^`<>]+?)`")


def _identifier(obj: griffe.Object, target: str) -> str:
    """The fully qualified path a role's target most likely names, seen from the object whose docstring holds it."""
    target = target.strip().rstrip("()")
    if target.startswith("featureode"):
        return target
    scope: griffe.Object | None = obj
    while scope is not None:
        if target.split(".")[0] in scope.members:
            return f"{scope.path}.{target}"
        scope = scope.parent
    return f"{obj.module.path}.{target}"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring to optional autorefs."""

    def on_object(self, *, obj: griffe.Object, loader: Any, **kwargs: Any) -> None:
        if obj.is_alias or obj.docstring is None:
            return

        def repl(match: re.Match) -> str:
            short, target = match.group(1), match.group(2)
            ident = _identifier(obj, target)
            title = target.split(".")[-1] if short else target
            return f'<autoref identifier="{ident}" optional><code>{title}</code></autoref>'

        obj.docstring.value = ROLE.sub(repl, obj.docstring.value)
