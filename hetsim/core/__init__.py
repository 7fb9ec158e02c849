"""The ground floor: errors, parameter checks, option names, the plug-in registries, safe file writing,
provenance and what every command line shares (:mod:`hetsim.core.console`). Imports nothing else of hetsim.
"""
