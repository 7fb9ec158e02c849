"""What ``simulate``, ``sweep`` and ``report`` show and leave on disk: tables, notes and output files."""
