"""Real runs of hetsim's policies with torch.distributed, and how well the simulator predicts them.

``python -m validation run`` trains a small CNN on scikit-learn's digits with one process per
rank (gloo on CPUs, NCCL when every rank is on a GPU; or under torchrun with
``-m validation.train``), under the same Policy objects as the simulator, and writes the trace
schema of docs/architecture.md. ``python -m validation compare RUN_DIR`` calibrates a scenario on the run's
probe phase, simulates every policy and reports predicted vs measured step times.
``hetsim`` never imports this package.
"""
