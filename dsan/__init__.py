"""DSAN Scheduler: simulator, baselines, features, model and training.

Importing this package is cheap: nothing here imports torch, NVML or a Kubernetes client.
"""

__version__ = "0.1.0"
