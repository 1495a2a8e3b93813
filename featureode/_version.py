"""The one source of featureode's version: read by setuptools (``dynamic = ["version"]``), ``featureode.__version__``
and ``featureode --version``."""
__version__ = "0.1.0"
