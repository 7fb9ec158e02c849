"""``hetsim plan``: a scenario in, a recommendation out (:mod:`hetsim.plan.planner`), from one row per
policy (:mod:`hetsim.plan.rows`) and a check of how fragile the choice is (:mod:`hetsim.plan.fragility`).
"""
