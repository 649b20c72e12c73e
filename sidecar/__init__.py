"""The DSAN scoring sidecar: a kube-scheduler extender (HTTP) and a gRPC Score service
(``dsan serve``; docs/sidecar.md). Nothing here touches a Kubernetes client at import time."""
