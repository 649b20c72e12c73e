// Package extenderwire pins the JSON that kube-scheduler v1.36 and the DSAN sidecar exchange on
// the extender's preempt verb to the real k8s.io/kube-scheduler/extender/v1 types: its tests
// write the golden requests the Python tests feed the sidecar (tests/data/extender/), and
// decode the sidecar's reply the way kube-scheduler does, refusing unknown fields.
package extenderwire
