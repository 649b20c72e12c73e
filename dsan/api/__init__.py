"""Shared API types: resource names, label and annotation keys, the telemetry CRD.

Every component (simulator, sidecar, device plugin, charts) reads these names from here and
nowhere else; the gRPC contracts live in ``proto/``.
"""
