"""What can be said without simulating, and how sure a simulated figure is: the closed forms of the
expected step time (order statistics of the workers' times), their predictions, and step-time
confidence intervals.
"""
