"""The embedded default sweep (``python -m hetsim sweep --show-default`` prints it)."""
