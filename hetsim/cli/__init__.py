"""The command line ``python -m hetsim``: one module per family of commands; :mod:`hetsim.cli.main`
parses and dispatches, importing a command's modules only when that command runs.
"""
