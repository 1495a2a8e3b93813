"""featureode: symbolic-numeric feature ODE for two-layer MLPs on anisotropic Gaussian data.

Pipeline (imports point one way): ``hermite`` → ``activations``/``targets`` (with ``data``) → ``kernel`` → ``ode``
(``ode``, ``indexed``, ``variants``) → ``compile``/``solve``/``latex``; ``mlp``/``measure`` beside them; ``config``
above ``activations``/``data``/``targets``; ``metrics`` a NumPy-only leaf; ``compare`` and ``cli`` on top.
See ``../shared/DESIGN.md`` for notation.
"""
__version__ = "0.1.0"

from featureode.core.errors import FeatureODEError  # noqa: E402  (the one error base; imports nothing else)
from featureode.core.registry import Registry  # noqa: E402

#: Public names imported on first use (``featureode.register_closure``), so ``import featureode`` stays light.
_LAZY = {
    "register_closure": "featureode.ode.variants",
    "register_activation": "featureode.calculus.activations",
    "register_parametrization": "featureode.kernel.parametrization",
    "register_backend": "featureode.ode.compile",
    "register_executor": "featureode.workflow.executors",
}

__all__ = ["FeatureODEError", "Registry", "__version__", *_LAZY]


def __getattr__(name: str):  # PEP 562
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'featureode' has no attribute {name!r}")
