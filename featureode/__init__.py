"""featureode: symbolic-numeric feature ODE for two-layer MLPs on anisotropic Gaussian data.

Pipeline (imports point one way): ``hermite`` → ``activations``/``targets`` (with ``data``) → ``kernel`` → ``ode``
(``ode``, ``indexed``, ``variants``) → ``compile``/``solve``/``latex``; ``mlp``/``measure`` beside them; ``config``
above ``activations``/``data``/``targets``; ``metrics`` a NumPy-only leaf; ``compare`` and ``cli`` on top.
See ``../shared/DESIGN.md`` for notation.
"""
__version__ = "0.1.0"

from featureode.core.errors import FeatureODEError  # noqa: E402  (the one error base; imports nothing else)

__all__ = ["FeatureODEError", "__version__"]
