package dsanscore

// PreFilter and Filter in a real scheduling framework (the plugin registered for both points,
// the nodes in its snapshot) against an in-process fake of the sidecar's gRPC Filter.

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
)

const quotaReason = "dsan: the node's quota refuses this pod"

// fakeFilter answers every Filter with reply(req) after delay and records the requests.
type fakeFilter struct {
	scorerv1.UnimplementedScorerServer
	reply func(*scorerv1.FilterRequest) (*scorerv1.FilterResponse, error)
	delay time.Duration
	mu    sync.Mutex
	seen  []*scorerv1.FilterRequest
}

func (f *fakeFilter) Filter(ctx context.Context, req *scorerv1.FilterRequest) (*scorerv1.FilterResponse, error) {
	f.mu.Lock()
	f.seen = append(f.seen, req)
	f.mu.Unlock()
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return f.reply(req)
}

func (f *fakeFilter) requests() []*scorerv1.FilterRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*scorerv1.FilterRequest(nil), f.seen...)
}

func refuses(r map[string]string) *fakeFilter {
	return &fakeFilter{reply: func(*scorerv1.FilterRequest) (*scorerv1.FilterResponse, error) {
		return &scorerv1.FilterResponse{Refused: r, Policy: "fake"}, nil
	}}
}

// filterCycle runs the framework's PreFilter and then Filter on every node, as one scheduling
// cycle does; it returns each node's Filter status and the plugin.
func filterCycle(t *testing.T, address, timeout string, pod *v1.Pod, nodes ...string) (map[string]*fwk.Status, *fwk.Status, *Plugin) {
	t.Helper()
	metrics.Register() // the framework records into them; registers once per process
	objs := make([]*v1.Node, 0, len(nodes))
	for _, n := range nodes {
		objs = append(objs, st.MakeNode().Name(n).Obj())
	}
	logger, ctx := ktesting.NewTestContext(t)
	var pl *Plugin
	factory := func(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := New(ctx, args(t, `{"address":"`+address+`","timeout":"`+timeout+`"}`), h)
		if err == nil {
			pl = p.(*Plugin)
			t.Cleanup(func() { _ = pl.conn.Close() })
		}
		return p, err
	}
	f, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensions(Name, factory, "PreFilter", "Filter"),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
	}, "",
		frameworkruntime.WithSnapshotSharedLister(internalcache.NewSnapshot(nil, objs)),
		frameworkruntime.WithLogger(logger),
	)
	if err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	_, pre, _ := f.RunPreFilterPlugins(ctx, state, pod)
	out := map[string]*fwk.Status{}
	for _, n := range nodes {
		ni, err := f.SnapshotSharedLister().NodeInfos().Get(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = f.RunFilterPlugins(ctx, state, pod, ni)
	}
	return out, pre, pl
}

func TestRefusedNodesAreUnschedulableWithTheSidecarsReason(t *testing.T) {
	fake := refuses(map[string]string{"n1": quotaReason, "elsewhere": "not asked about"})
	got, pre, pl := filterCycle(t, serve(t, fake), "2s", gpuPod(), "n0", "n1", "n2")
	if !pre.IsSuccess() {
		t.Fatalf("PreFilter: %v", pre)
	}
	for _, n := range []string{"n0", "n2"} {
		if !got[n].IsSuccess() {
			t.Errorf("%s: %v, want Success", n, got[n])
		}
	}
	if s := got["n1"]; s.Code() != fwk.Unschedulable || s.Message() != quotaReason {
		t.Errorf("n1: %v, want Unschedulable %q", s, quotaReason)
	}
	reqs := fake.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d Filter calls for one cycle, want 1", len(reqs))
	}
	names := append([]string(nil), reqs[0].GetNodeNames()...)
	sort.Strings(names)
	if strings.Join(names, ",") != "n0,n1,n2" {
		t.Errorf("node names sent: %v, want every node of the snapshot", names)
	}
	if p := reqs[0].GetPod(); p.GetName() != "p" || p.GetUid() != "u-1" ||
		p.GetRequests()["cpu"] != "1500m" || p.GetAnnotations()["dsan.io/gpu-milli"] != "500" {
		t.Errorf("pod sent as %v", p)
	}
	if n := pl.filterFailures.Load(); n != 0 {
		t.Errorf("%d failures", n)
	}
	if pl.PreFilterExtensions() != nil {
		t.Error("PreFilterExtensions: want nil")
	}
}

func TestNothingRefusedSkipsFilter(t *testing.T) {
	got, pre, _ := filterCycle(t, serve(t, refuses(nil)), "2s", gpuPod(), "n0", "n1")
	if pre.Code() != fwk.Skip && !pre.IsSuccess() {
		t.Fatalf("PreFilter: %v", pre)
	}
	for n, s := range got {
		if !s.IsSuccess() {
			t.Errorf("%s: %v", n, s)
		}
	}
}

func TestWithoutTheSidecarEveryNodeIsAllowed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		address func(t *testing.T) string
	}{
		{"down", func(*testing.T) string { return "127.0.0.1:1" }}, // nothing listens on port 1
		{"slow", func(t *testing.T) string {
			f := refuses(map[string]string{"n0": quotaReason, "n1": quotaReason})
			f.delay = 2 * time.Second
			return serve(t, f)
		}},
		{"gRPC error", func(t *testing.T) string {
			return serve(t, &fakeFilter{reply: func(*scorerv1.FilterRequest) (*scorerv1.FilterResponse, error) {
				return nil, status.Error(codes.Unavailable, "informers not synced")
			}})
		}},
		{"plain error", func(t *testing.T) string {
			return serve(t, &fakeFilter{reply: func(*scorerv1.FilterRequest) (*scorerv1.FilterResponse, error) {
				return nil, errors.New("boom")
			}})
		}},
		{"no Filter method (an older sidecar)", func(t *testing.T) string {
			return serve(t, &fakeScorer{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got, pre, pl := filterCycle(t, tc.address(t), "200ms", gpuPod(), "n0", "n1")
			if took := time.Since(start); took > time.Second {
				t.Errorf("the cycle took %v with a 200ms timeout", took)
			}
			if pre.Code() != fwk.Skip && !pre.IsSuccess() {
				t.Fatalf("PreFilter: %v", pre)
			}
			for n, s := range got {
				if !s.IsSuccess() {
					t.Errorf("%s: %v, want Success", n, s)
				}
			}
			if n := pl.filterFailures.Load(); n != 1 {
				t.Errorf("%d failures counted, want 1", n)
			}
		})
	}
}

func TestClosingTheFrameworkClosesTheConnection(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var pl *Plugin
	factory := func(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := New(ctx, args(t, `{"address":"127.0.0.1:1","timeout":"100ms"}`), h)
		if err == nil {
			pl = p.(*Plugin)
		}
		return p, err
	}
	f, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensions(Name, factory, "PreScore", "Score"),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pl.conn.Close() })
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if s := pl.conn.GetState(); s != connectivity.Shutdown {
		t.Fatalf("connection %v after the framework closed, want Shutdown", s)
	}
}
