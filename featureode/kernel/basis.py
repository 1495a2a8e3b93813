"""The extended basis: the target's modes plus the modes the kernel couples them to, enumerated under a budget."""
from __future__ import annotations

import itertools
import math
from typing import Iterable, Iterator

import numpy as np
from numpy.typing import ArrayLike

from featureode.calculus.hermite import Mode
from featureode.kernel.network import KernelError
from featureode.kernel.perneuron import _estimate_cost_s, _modes_of

#: Largest number of candidate modes :func:`extended_basis` enumerates.
MAX_CANDIDATES = 200_000



def same_parity_modes(beta: Mode, dim: int, budget: int) -> "Iterator[Mode]":
    """Every mode ``α ≡ β`` mod 2 in each of the ``dim`` coordinates with ``|α| ≤ budget`` (possibly with
    repeats): β's support patterns (:func:`_support_patterns`) plus pairs of degree 2 on the free coordinates."""
    free = [i for i in range(dim) if i not in beta.as_dict()]
    for pattern, used in _support_patterns(beta, budget):
        for n_pairs in range((budget - used) // 2 + 1):
            for extra in itertools.combinations_with_replacement(free, n_pairs):
                index = dict(pattern)
                for i in extra:
                    index[i] = index.get(i, 0) + 2
                yield Mode.from_dict(index)

# ----------------------------------------------------------------------------------------------------------------
# extended basis
# ----------------------------------------------------------------------------------------------------------------
def _support_patterns(beta: Mode, budget: int) -> list[tuple[dict[int, int], int]]:
    """Orders on ``supp β`` with the same parity (``γ_i ≡ β_i`` mod 2), ``|γ_supp| ≤ budget``; with degree used."""
    choices = [[(i, v) for v in range(n % 2, budget + 1, 2)] for i, n in beta.items]
    out = []
    for combo in itertools.product(*choices):
        used = sum(v for _, v in combo)
        if used <= budget:
            out.append(({i: v for i, v in combo if v}, used))
    return out


def _count_candidates(beta: Mode, dim: int, degree: int) -> int:
    budget = beta.degree + degree
    free = dim - len(beta.items)
    return sum(math.comb(free + (budget - used) // 2, (budget - used) // 2)
               for _, used in _support_patterns(beta, budget))


def extended_basis(target_modes: Iterable["Mode | str"], dim: int, degree: int, max_modes: int,
                   g: "ArrayLike | None" = None) -> list[Mode]:
    """The target's modes followed by the modes the init kernel couples to them, best first, ``max_modes`` in all.

    ``K_{γβ} ≠ 0`` only if ``γ ≡ β`` mod 2 in every coordinate (module docstring). Candidates: such ``γ`` for some
    target ``β`` with ``|γ| ≤ |β| + degree`` (lower-degree ones included, e.g. the constant for ``h2(z0)``). They
    are ranked by the coupling proxy ``max_β Π_i g_i^{|γ_i − β_i|/2}`` (lazy flow: a coupled mode picks up a
    coefficient ``~ K_{γβ}/max(λ_γ, λ_β) ~ g^{|γ−β|/2}``; without ``g`` a flat spectrum is assumed, lower dimension
    first), ties broken by degree and mode order. Raises :class:`KernelError` when the budget gives too many
    candidates.
    """
    targets = _modes_of(target_modes, dim)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 0:
        raise KernelError(f"extended degree must be an integer ≥ 0, got {degree!r}")
    if isinstance(max_modes, bool) or not isinstance(max_modes, int) or max_modes < len(targets):
        raise KernelError(f"max_modes must be an integer ≥ the number of target modes ({len(targets)}), "
                          f"got {max_modes!r}")
    gv = np.ones(dim) if g is None else np.asarray(g, dtype=float)
    if gv.size != dim:
        raise KernelError(f"g has {gv.size} entries but dim = {dim}")
    count = sum(_count_candidates(t, dim, degree) for t in targets)
    if count > MAX_CANDIDATES:
        raise KernelError(
            f"extended basis: degree budget {degree} at d = {dim} gives ~{count} candidate modes (limit "
            f"{MAX_CANDIDATES}; estimated {count * 2e-5:.0f} s to enumerate and rank, and a Gram matrix on "
            f"{max_modes} of them ~{_estimate_cost_s(max_modes):.0f} s); lower ode.extended_degree")
    scores: dict[Mode, float] = {}
    for beta in targets:
        budget = beta.degree + degree
        db = beta.as_dict()
        for gamma in same_parity_modes(beta, dim, budget):
            score = math.prod(gv[i] ** (abs(gamma.order(i) - db.get(i, 0)) / 2)
                              for i in set(gamma.as_dict()) | set(db))
            scores[gamma] = max(scores.get(gamma, 0.0), score)
    target_set = set(targets)
    ranked = sorted((m for m in scores if m not in target_set), key=lambda m: (-scores[m], m.sort_key()))
    return list(targets) + ranked[: max_modes - len(targets)]




