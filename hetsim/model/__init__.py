"""What a cluster is made of: step-time distributions, cost models, network models, workers and their
random draws, batch partitioning, the trace schema and the statistical-efficiency model.
"""
