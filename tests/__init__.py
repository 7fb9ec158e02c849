"""The test suite; a package so that tests import their helpers as ``tests.helpers``."""
