"""The DSAN GPU node agent: a kubelet device plugin plus fine-grained GPU telemetry.

Follows NVIDIA's split: :mod:`deviceplugin.servicer` speaks only the kubelet protocol,
:mod:`deviceplugin.resources` owns devices, allocation and health, and every optional feature
(health events, telemetry, the custom-resource writer) degrades instead of crashing the agent.
Nothing here touches NVML or a Kubernetes client at import time.
"""
