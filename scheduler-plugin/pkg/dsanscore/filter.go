package dsanscore

// The served policy's node quota as a PreFilter/Filter pair (gRPC Filter, proto/scorer/v1):
// the same refusals the HTTP extender's filter verb makes. Opt-in: it runs only where a profile
// enables DSANScore under plugins.preFilter and plugins.filter.

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
)

const refusedKey fwk.StateKey = Name + "/refused"

// refused: node name -> the sidecar's reason.
type refused map[string]string

// Clone: never changed once written.
func (r refused) Clone() fwk.StateData { return r }

var (
	_ fwk.PreFilterPlugin = &Plugin{}
	_ fwk.FilterPlugin    = &Plugin{}
)

// PreFilter asks the sidecar once per scheduling cycle about every node (the framework passes
// its SnapshotSharedLister's node list), so that Filter, called per node and in parallel, only
// looks the answer up. A sidecar that is down, slow or failing refuses nothing: Skip, and the
// pod is filtered by the other plugins alone, as PreScore degrades to scoring without DSAN.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Node().Name)
	}
	cctx, cancel := context.WithTimeout(ctx, p.args.Timeout.Duration)
	defer cancel()
	resp, err := p.scorer.Filter(cctx, &scorerv1.FilterRequest{Pod: PodMessage(pod), NodeNames: names})
	if err != nil {
		n := p.filterFailures.Add(1)
		// V(2): the sidecar being away is logged by PreScore too; this is one line per pod.
		klog.FromContext(ctx).V(2).Info("DSAN sidecar unavailable, filtering without its quota",
			"pod", klog.KObj(pod), "err", err, "failures", n)
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if len(resp.GetRefused()) == 0 {
		return nil, fwk.NewStatus(fwk.Skip) // spares the per-node Filter calls
	}
	state.Write(refusedKey, refused(resp.GetRefused()))
	return nil, nil
}

// PreFilterExtensions: the refusals are the sidecar's, on its own view of the node; the
// preemption dry run's hypothetical removal of victims does not change them.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter rejects a node the sidecar refused, with its reason (shown in FailedScheduling).
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, _ *v1.Pod, node fwk.NodeInfo) *fwk.Status {
	data, err := state.Read(refusedKey)
	if err != nil {
		return nil
	}
	if reason, ok := data.(refused)[node.Node().Name]; ok {
		return fwk.NewStatus(fwk.Unschedulable, reason)
	}
	return nil
}
