"""The built-in scenarios, one TOML file each (``python -m hetsim scenarios`` lists them)."""
