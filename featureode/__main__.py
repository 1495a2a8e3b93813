"""``python -m featureode …`` runs the command line (same as the ``featureode`` script)."""
from featureode.cli import run

run()
