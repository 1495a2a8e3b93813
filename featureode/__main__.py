"""``python -m featureode …`` runs the command line (same as the ``featureode`` script)."""
from .cli import run

run()
