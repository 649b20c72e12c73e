// Package dsanscore is a kube-scheduler framework Score plugin that asks the DSAN sidecar's
// gRPC Score service (proto/scorer/v1) for all candidate nodes of a pod in one call.
//
// PreScore sends the pod and every node that passed Filter (as indices into the sidecar's
// node table when it has one, see pkg/scoreclient, else as names); the reply's
// columnar scores (0..100, parallel to the names) go into the CycleState, and Score only
// looks them up. An unreachable or slow sidecar never blocks scheduling: PreScore then
// returns Skip and the pod is scored by the other plugins, and the failure is counted.
//
// Where a profile also enables it under preFilter and filter, the plugin carries the served
// policy's node quota (filter.go): one gRPC Filter call per pod with every node, the refused
// nodes Unschedulable with the sidecar's reason.
package dsanscore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/scoreclient"
)

// Name is the plugin's name in a KubeSchedulerConfiguration profile.
const Name = "DSANScore"

const stateKey fwk.StateKey = Name

// warmTimeout bounds the start-up wait for the sidecar (it may start after the scheduler).
const warmTimeout = 60 * time.Second

// Args are the plugin's pluginConfig args (JSON/YAML keys as tagged).
type Args struct {
	// Address of the sidecar's gRPC server, e.g. "127.0.0.1:50051".
	Address string `json:"address"`
	// Timeout of one Score (or Filter) call; past it the pod is scored (or filtered) without DSAN.
	Timeout Duration `json:"timeout"`
}

// Duration parses "100ms"-style strings without pulling in metav1's conversion (DSANPreemption's
// args use it too).
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("timeout: %w", err)
	}
	d.Duration = v
	return nil
}

// DecodeArgs is frameworkruntime.DecodeInto refusing keys that into does not have, so that a
// misspelt key (`timout: 2s`) fails the scheduler's start instead of leaving the default in
// force. kube-scheduler hands an out-of-tree plugin's args over as JSON (runtime.Unknown);
// anything else goes to DecodeInto unchanged.
func DecodeArgs(obj runtime.Object, into any) error {
	u, ok := obj.(*runtime.Unknown)
	if !ok || u.Raw == nil || (u.ContentType != runtime.ContentTypeJSON && u.ContentType != "") {
		return frameworkruntime.DecodeInto(obj, into)
	}
	dec := json.NewDecoder(bytes.NewReader(u.Raw))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// Plugin implements PreScore and Score, and PreFilter and Filter (filter.go).
type Plugin struct {
	args     Args
	conn     *grpc.ClientConn
	client   *scoreclient.Client
	scorer   scorerv1.ScorerClient
	failures atomic.Int64
	// Filter calls that failed (the pod was filtered without the quota).
	filterFailures atomic.Int64
}

var (
	_ fwk.PreScorePlugin = &Plugin{}
	_ fwk.ScorePlugin    = &Plugin{}
	_ io.Closer          = &Plugin{}
)

// New is the plugin factory registered with app.WithPlugin.
func New(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args := Args{Address: "127.0.0.1:50051", Timeout: Duration{100 * time.Millisecond}}
	if obj != nil {
		if err := DecodeArgs(obj, &args); err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
	}
	if args.Address == "" || args.Timeout.Duration <= 0 {
		return nil, fmt.Errorf("%s args: address must be set and timeout positive, got %+v", Name, args)
	}
	// Lazy dial: the sidecar may start after the scheduler; calls fail fast until it is up.
	conn, err := grpc.NewClient(args.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%s: dial %s: %w", Name, args.Address, err)
	}
	scorer := scorerv1.NewScorerClient(conn)
	pl := &Plugin{args: args, conn: conn, scorer: scorer,
		client: scoreclient.New(scorer, args.Timeout.Duration)}
	// Connect and fetch the node table now, off the scheduling path, so that the first pod
	// is not scored without the sidecar because its call also had to set up the connection.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
		defer cancel()
		if err := pl.client.Warm(ctx); err != nil {
			klog.Background().Info("DSAN sidecar not reachable yet; scoring calls will retry",
				"address", args.Address, "err", err)
		}
	}()
	return pl, nil
}

// Name returns the plugin name.
func (p *Plugin) Name() string { return Name }

// Close releases the connection when the scheduler closes its profiles (Scheduler.Run's
// end, frameworkImpl.Close); it also ends New's background wait for the sidecar.
func (p *Plugin) Close() error { return p.conn.Close() }

type scores map[string]int64

func (s scores) Clone() fwk.StateData { return s }

// PreScore makes the one gRPC call for this pod.
func (p *Plugin) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Node().Name)
	}
	ctx, cancel := context.WithTimeout(ctx, p.args.Timeout.Duration)
	defer cancel()
	resp, err := p.client.Score(ctx, PodMessage(pod), names)
	if err == nil && len(resp.GetScores()) != len(names) {
		err = fmt.Errorf("reply has %d scores for %d nodes", len(resp.GetScores()), len(names))
	}
	if err == nil {
		err = checkRange(resp.GetScores())
	}
	if err != nil {
		n := p.failures.Add(1)
		klog.FromContext(ctx).Info("DSAN sidecar unavailable, scoring without it",
			"pod", klog.KObj(pod), "err", err, "failures", n)
		return fwk.NewStatus(fwk.Skip)
	}
	out := make(scores, len(names))
	for i, name := range names {
		out[name] = int64(resp.GetScores()[i])
	}
	state.Write(stateKey, out)
	return nil
}

// checkRange refuses a reply with a score outside 0..100 as a whole: a non-success status
// from Score (or the framework's own range check after it) fails the pod's scheduling cycle,
// so one bad score would stop every pod of the profile instead of degrading to Skip.
func checkRange(s []int32) error {
	for _, v := range s {
		if int64(v) < fwk.MinNodeScore || int64(v) > fwk.MaxNodeScore {
			return fmt.Errorf("sidecar score %d outside 0..100", v)
		}
	}
	return nil
}

// Score looks up the node's score from PreScore.
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, node fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return 0, nil
	}
	return data.(scores)[node.Node().Name], nil
}

// ScoreExtensions: scores arrive normalised (0..100) from the sidecar.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// PodMessage is the proto Pod of a pod: what Score and Reclaim send.
func PodMessage(pod *v1.Pod) *scorerv1.Pod {
	// The request NodeResourcesFit checks (containers summed, at least each init container,
	// sidecars and overhead added), so the pod is scored with what it will be charged.
	sum := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	req := make(map[string]string, len(sum))
	for name, q := range sum {
		req[string(name)] = q.String()
	}
	var prio int32
	if pod.Spec.Priority != nil {
		prio = *pod.Spec.Priority
	}
	return &scorerv1.Pod{
		Namespace: pod.Namespace, Name: pod.Name, Uid: string(pod.UID),
		Requests: req, Annotations: pod.Annotations, Priority: prio,
	}
}
