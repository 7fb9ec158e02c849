"""A scenario: the :class:`~hetsim.scenario.scenario.Scenario` object, and the factory that builds one from
raw TOML tables (:mod:`hetsim.scenario.config`), checking every field on the way.
"""
