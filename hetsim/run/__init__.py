"""Running a scenario: :func:`~hetsim.run.simulate.simulate` (an engine and a policy over a scenario -> a
trace or a summary) and the metrics that summarize a trace.
"""
