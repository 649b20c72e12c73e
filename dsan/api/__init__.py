"""Shared API types: resource names, label and annotation keys, the telemetry CRD; every
component reads them from here. The gRPC contracts live in ``proto/``."""
