// Package dsanpreemption is a kube-scheduler PostFilter plugin: DefaultPreemption, with the
// node whose victims are evicted chosen by the DSAN sidecar's reclaimer (gRPC Reclaim,
// proto/scorer/v1) instead of kube-scheduler's pickOneNodeForPreemption.
//
// Why a replay and not OrderedScoreFuncs: in v1.36 (framework/preemption/preemption.go)
// Evaluator.SelectCandidate returns a lone candidate without consulting the Interface, and
// OrderedScoreFuncs can only rank, never refuse; the reclaimer may refuse every candidate
// (evict nothing, the pod waits). Actuation (Executor.actuatePodPreemption) is unexported, so
// the eviction has to go through Evaluator.Preempt. Hence two passes in one PostFilter:
//
//  1. The same dry run Preempt does (Evaluator.DryRunPreemption, DefaultPreemption's
//     SelectVictimsOnNode), then one Reclaim call with every candidate's victim UIDs.
//  2. DefaultPreemption's own PostFilter, with the choice in the CycleState: this plugin is the
//     Evaluator's Interface, and its SelectVictimsOnNode replays pass 1 (the chosen node's
//     victims as found; every other node refused) instead of simulating again. Preempt then
//     finds exactly one candidate, or none, and does everything else as upstream: eligibility,
//     extenders, the FitError, nominating, evicting (async where enabled), metrics.
//
// The sidecar unreachable, slow (past the timeout) or answering a node that was no candidate:
// the pick is DefaultPreemption's own (Evaluator.SelectCandidate), and the failure is logged
// and counted. Pods of a scheduling group keep plain DefaultPreemption.
package dsanpreemption

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	kubeschedulerconfigv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	configv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/dsanscore"
)

// Name is the plugin's name in a KubeSchedulerConfiguration profile.
const Name = "DSANPreemption"

const planKey fwk.StateKey = Name + "/plan"

// Args are the plugin's pluginConfig args. DefaultPreemption's own args
// (minCandidateNodesPercentage/Absolute) keep their defaults.
type Args struct {
	// Address of the sidecar's gRPC server, e.g. "127.0.0.1:50051".
	Address string `json:"address"`
	// Timeout of one Reclaim call; past it DefaultPreemption's own pick is evicted.
	Timeout dsanscore.Duration `json:"timeout"`
}

// Plugin is DefaultPreemption (PostFilter, PreEnqueue, EnqueueExtensions and the preemption
// Interface promoted from it) with its PostFilter and SelectVictimsOnNode wrapped.
type Plugin struct {
	*defaultpreemption.DefaultPreemption
	args     Args
	conn     *grpc.ClientConn
	client   scorerv1.ScorerClient
	failures atomic.Int64
}

var (
	_ fwk.PostFilterPlugin  = &Plugin{}
	_ fwk.PreEnqueuePlugin  = &Plugin{}
	_ fwk.EnqueueExtensions = &Plugin{}
	_ preemption.Interface  = &Plugin{}
	_ io.Closer             = &Plugin{}
)

// New is the plugin factory registered with app.WithPlugin.
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
	args := Args{Address: "127.0.0.1:50051", Timeout: dsanscore.Duration{Duration: 100 * time.Millisecond}}
	if obj != nil {
		if err := dsanscore.DecodeArgs(obj, &args); err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
	}
	if args.Address == "" || args.Timeout.Duration <= 0 {
		return nil, fmt.Errorf("%s args: address must be set and timeout positive, got %+v", Name, args)
	}
	// The features the in-tree registry gives DefaultPreemption (plugins.NewInTreeRegistry).
	fts := plfeature.NewSchedulerFeaturesFromGates(feature.DefaultFeatureGate)
	dp, err := defaultpreemption.New(ctx, defaultPreemptionArgs(), fh, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	// Lazy dial: the sidecar may start after the scheduler; calls fail fast until it is up.
	conn, err := grpc.NewClient(args.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%s: dial %s: %w", Name, args.Address, err)
	}
	conn.Connect() // in the background, so the first Reclaim does not pay for it in its timeout
	pl := &Plugin{DefaultPreemption: dp, args: args, conn: conn, client: scorerv1.NewScorerClient(conn)}
	// DefaultPreemption's evaluator and executor, with this plugin as the Interface, so that
	// Preempt runs the wrapped SelectVictimsOnNode (and names this plugin in its events).
	dp.Evaluator = preemption.NewEvaluator(Name, fh, pl, dp.Executor)
	return pl, nil
}

func defaultPreemptionArgs() *config.DefaultPreemptionArgs {
	v1args := &kubeschedulerconfigv1.DefaultPreemptionArgs{}
	configv1.SetDefaults_DefaultPreemptionArgs(v1args)
	out := &config.DefaultPreemptionArgs{}
	_ = configv1.Convert_v1_DefaultPreemptionArgs_To_config_DefaultPreemptionArgs(v1args, out, nil)
	return out
}

// Name returns the plugin name.
func (pl *Plugin) Name() string { return Name }

// Close releases the connection when the scheduler closes its profiles (Scheduler.Run's
// end, frameworkImpl.Close).
func (pl *Plugin) Close() error { return pl.conn.Close() }

// plan is pass 1's outcome, read by SelectVictimsOnNode during pass 2.
type plan struct {
	// The candidate whose victims to evict; nil: evict nothing.
	chosen preemption.Candidate
	// Every candidate's node, and why the others than the chosen one are refused.
	candidates sets.Set[string]
	reason     string
	// Pass 1's status of each node that was no candidate.
	statuses *framework.NodeToStatus
}

// Clone: never changed once written.
func (p *plan) Clone() fwk.StateData { return p }

// PostFilter runs pass 1 and then DefaultPreemption's PostFilter (pass 2).
func (pl *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if pod.Spec.SchedulingGroup == nil {
		if p := pl.plan(ctx, state, pod, m); p != nil {
			state.Write(planKey, p)
			defer state.Delete(planKey)
		}
	}
	return pl.DefaultPreemption.PostFilter(ctx, state, pod, m)
}

// plan dry-runs preemption as Evaluator.Preempt does and asks the sidecar to choose; nil
// where Preempt stops before choosing (then it runs unchanged and stops there too).
func (pl *Plugin) plan(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) *plan {
	ev := pl.Evaluator
	latest, err := ev.PodLister.Pods(pod.Namespace).Get(pod.Name)
	if err != nil {
		return nil
	}
	if ok, _ := pl.PodEligibleToPreemptOthers(ctx, latest, m.Get(latest.Status.NominatedNodeName)); !ok {
		return nil
	}
	potential, err := m.NodesForStatusCode(ev.Handler.SnapshotSharedLister().NodeInfos(), fwk.Unschedulable)
	if err != nil || len(potential) == 0 {
		return nil
	}
	pdbs, err := ev.PdbLister.List(labels.Everything())
	if err != nil {
		return nil
	}
	offset, n := pl.GetOffsetAndNumCandidates(int32(len(potential)))
	cands, statuses, err := ev.DryRunPreemption(ctx, state, latest, potential, pdbs, offset, n)
	if err != nil && len(cands) == 0 {
		return nil
	}
	p := &plan{candidates: sets.New[string](), statuses: statuses}
	for _, c := range cands {
		p.candidates.Insert(c.Name())
	}
	if len(cands) > 0 {
		p.chosen, p.reason = pl.choose(ctx, latest, cands)
	}
	return p
}

// choose asks the sidecar's Reclaim; on failure it is DefaultPreemption's own pick.
func (pl *Plugin) choose(ctx context.Context, pod *v1.Pod, cands []preemption.Candidate) (preemption.Candidate, string) {
	logger := klog.FromContext(ctx)
	req := &scorerv1.ReclaimRequest{Pod: dsanscore.PodMessage(pod),
		Candidates: make([]*scorerv1.ReclaimCandidate, 0, len(cands))}
	byNode := make(map[string]preemption.Candidate, len(cands))
	for _, c := range cands {
		byNode[c.Name()] = c
		v := c.Victims()
		uids := make([]string, 0, len(v.Pods))
		for _, victim := range v.Pods {
			uids = append(uids, string(victim.UID))
		}
		req.Candidates = append(req.Candidates, &scorerv1.ReclaimCandidate{
			Node: c.Name(), VictimUids: uids, PdbViolations: v.NumPDBViolations})
	}
	cctx, cancel := context.WithTimeout(ctx, pl.args.Timeout.Duration)
	defer cancel()
	resp, err := pl.client.Reclaim(cctx, req)
	if err == nil && resp.GetNode() != "" && byNode[resp.GetNode()] == nil {
		err = fmt.Errorf("the sidecar chose node %q, which is no candidate", resp.GetNode())
	}
	if err != nil {
		n := pl.failures.Add(1)
		c := pl.Evaluator.SelectCandidate(ctx, cands)
		logger.Info("DSAN sidecar unavailable, preempting without it", "pod", klog.KObj(pod),
			"err", err, "failures", n, "node", c.Name())
		return c, "DefaultPreemption chose node " + c.Name()
	}
	if resp.GetNode() == "" {
		logger.V(2).Info("DSAN reclaimer evicts nothing", "pod", klog.KObj(pod),
			"reclaimer", resp.GetReclaimer(), "candidates", len(cands))
		return nil, "DSAN reclaimer " + resp.GetReclaimer() + " evicts nothing"
	}
	logger.V(2).Info("DSAN reclaimer chose the preemption node", "pod", klog.KObj(pod),
		"reclaimer", resp.GetReclaimer(), "node", resp.GetNode(), "candidates", len(cands))
	return byNode[resp.GetNode()], "DSAN reclaimer " + resp.GetReclaimer() + " chose node " + resp.GetNode()
}

// SelectVictimsOnNode is DefaultPreemption's in pass 1 and a replay of pass 1 in pass 2.
func (pl *Plugin) SelectVictimsOnNode(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodeInfo fwk.NodeInfo, pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	data, err := state.Read(planKey)
	if err != nil {
		return pl.DefaultPreemption.SelectVictimsOnNode(ctx, state, pod, nodeInfo, pdbs)
	}
	p := data.(*plan)
	name := nodeInfo.Node().Name
	switch {
	case p.chosen != nil && name == p.chosen.Name():
		v := p.chosen.Victims()
		return v.Pods, int(v.NumPDBViolations), fwk.NewStatus(fwk.Success)
	case p.candidates.Has(name):
		return nil, 0, fwk.NewStatus(fwk.Unschedulable, p.reason)
	default:
		return nil, 0, p.statuses.Get(name)
	}
}
