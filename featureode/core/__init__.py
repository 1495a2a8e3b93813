"""Foundations every layer uses: the error base, the registry, the disk cache."""
