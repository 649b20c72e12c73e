package dsanpreemption

// DSANPreemption in a real scheduling framework (NodeResourcesFit as Filter, a fake clientset
// and informers, the upstream Evaluator and Executor) against an in-process fake of the
// sidecar's gRPC Reclaim on a loopback listener.

import (
	"context"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	internalqueue "k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
)

func TestMain(m *testing.M) {
	metrics.Register() // the scheduling queue and the executor record into them
	os.Exit(m.Run())
}

// fakeReclaim answers every Reclaim with reply(req) after delay and records the requests.
type fakeReclaim struct {
	scorerv1.UnimplementedScorerServer
	reply func(*scorerv1.ReclaimRequest) *scorerv1.ReclaimResponse
	delay time.Duration
	mu    sync.Mutex
	seen  []*scorerv1.ReclaimRequest
}

func (f *fakeReclaim) Reclaim(ctx context.Context, req *scorerv1.ReclaimRequest) (*scorerv1.ReclaimResponse, error) {
	f.mu.Lock()
	f.seen = append(f.seen, req)
	f.mu.Unlock()
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return f.reply(req), nil
}

func (f *fakeReclaim) requests() []*scorerv1.ReclaimRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*scorerv1.ReclaimRequest(nil), f.seen...)
}

func chooses(node string) *fakeReclaim {
	return &fakeReclaim{reply: func(*scorerv1.ReclaimRequest) *scorerv1.ReclaimResponse {
		return &scorerv1.ReclaimResponse{Node: node, Reclaimer: "fake"}
	}}
}

func serve(t *testing.T, f scorerv1.ScorerServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	scorerv1.RegisterScorerServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// A closed port: the sidecar is down.
func deadAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

var (
	low, high = int32(100), int32(1000)
	started   = metav1.NewTime(time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC))
)

func node(name string) *v1.Node {
	return st.MakeNode().Name(name).Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: "4", v1.ResourceMemory: "8Gi", v1.ResourcePods: "110"}).Obj()
}

func bound(name, nodeName, cpu string, prio int32) *v1.Pod {
	return st.MakePod().Name(name).Namespace("ns").UID("uid-" + name).Node(nodeName).
		Priority(prio).StartTime(started).Req(map[v1.ResourceName]string{v1.ResourceCPU: cpu}).Obj()
}

func preemptor(prio int32) *v1.Pod {
	return st.MakePod().Name("urgent").Namespace("ns").UID("uid-urgent").Priority(prio).
		Req(map[v1.ResourceName]string{v1.ResourceCPU: "4"}).Obj()
}

// The e2e's cluster: one web pod fills n0, two best-effort pods fill n1, all of priority 100.
// DefaultPreemption alone evicts the web pod (the smaller sum of victim priorities).
func webAndBatch() ([]*v1.Node, []*v1.Pod) {
	return []*v1.Node{node("n0"), node("n1")}, []*v1.Pod{
		bound("web", "n0", "4", low), bound("be-a", "n1", "2", low), bound("be-b", "n1", "2", low)}
}

type cluster struct {
	pl    *Plugin
	cs    *clientsetfake.Clientset
	state fwk.CycleState
	m     fwk.NodeToStatusReader
	ctx   context.Context
}

func newCluster(t *testing.T, nodes []*v1.Node, pods []*v1.Pod, pod *v1.Pod, address, timeout string) *cluster {
	t.Helper()
	items := make([]v1.Pod, 0, len(pods)+1)
	for _, p := range append([]*v1.Pod{pod}, pods...) {
		items = append(items, *p)
	}
	cs := clientsetfake.NewClientset(&v1.PodList{Items: items})
	inf := informers.NewSharedInformerFactory(cs, 0)
	store := inf.Core().V1().Pods().Informer().GetStore()
	for _, p := range append([]*v1.Pod{pod}, pods...) {
		if err := store.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	_ = inf.Policy().V1().PodDisruptionBudgets().Informer()
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	fit := frameworkruntime.FactoryAdapter(feature.Features{}, noderesources.NewFit)
	f, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensions(noderesources.Name, fit, "Filter", "PreFilter"),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
	}, "",
		frameworkruntime.WithClientSet(cs),
		frameworkruntime.WithEventRecorder(&events.FakeRecorder{}),
		frameworkruntime.WithInformerFactory(inf),
		frameworkruntime.WithPodNominator(internalqueue.NewSchedulingQueue(nil, inf)),
		frameworkruntime.WithSnapshotSharedLister(internalcache.NewSnapshot(pods, nodes)),
		frameworkruntime.WithLogger(logger),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
	)
	if err != nil {
		t.Fatal(err)
	}
	raw := `{"address":"` + address + `","timeout":"` + timeout + `"}`
	p, err := New(ctx, &runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON}, f)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	pl := p.(*Plugin)
	t.Cleanup(func() { _ = pl.conn.Close() })
	state := framework.NewCycleState()
	if _, s, _ := f.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	// Filter found the pod fits nowhere: every node Unschedulable (resolvable by preemption).
	statuses := map[string]*fwk.Status{}
	for _, n := range nodes {
		statuses[n.Name] = fwk.NewStatus(fwk.Unschedulable, "Insufficient cpu")
	}
	m := framework.NewNodeToStatus(statuses, fwk.NewStatus(fwk.UnschedulableAndUnresolvable))
	return &cluster{pl: pl, cs: cs, state: state, m: m, ctx: ctx}
}

func (c *cluster) postFilter(t *testing.T, pod *v1.Pod) (string, *fwk.Status) {
	t.Helper()
	res, s := c.pl.PostFilter(c.ctx, c.state, pod, c.m)
	if _, err := c.state.Read(planKey); err == nil {
		t.Error("the plan outlived PostFilter")
	}
	if res == nil || res.NominatingInfo == nil {
		return "", s
	}
	return res.NominatedNodeName, s
}

// deleted: the pods of ns the (asynchronous) executor deleted, once `want` of them are, or
// after a short grace when want is 0.
func (c *cluster) deleted(t *testing.T, want int) []string {
	t.Helper()
	var names []string
	list := func() int {
		names = names[:0]
		for _, a := range c.cs.Actions() {
			if a.GetVerb() == "delete" && a.GetResource().Resource == "pods" {
				names = append(names, a.(interface{ GetName() string }).GetName())
			}
		}
		return len(names)
	}
	if want == 0 {
		time.Sleep(200 * time.Millisecond)
		list()
		return names
	}
	_ = wait.PollUntilContextTimeout(c.ctx, 10*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return list() >= want, nil })
	sort.Strings(names)
	return names
}

func TestTheSidecarsChoiceIsEvicted(t *testing.T) {
	nodes, pods := webAndBatch()
	fake := chooses("n1")
	c := newCluster(t, nodes, pods, preemptor(high), serve(t, fake), "2s")
	nominated, s := c.postFilter(t, preemptor(high))
	if !s.IsSuccess() || nominated != "n1" {
		t.Fatalf("got node %q, status %v; want n1, Success", nominated, s)
	}
	if got := c.deleted(t, 2); strings.Join(got, ",") != "be-a,be-b" {
		t.Errorf("deleted %v, want be-a and be-b", got)
	}
	reqs := fake.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d Reclaim calls, want 1", len(reqs))
	}
	req := reqs[0]
	if p := req.GetPod(); p.GetName() != "urgent" || p.GetUid() != "uid-urgent" || p.GetPriority() != high {
		t.Errorf("pod sent as %v", p)
	}
	got := map[string]string{}
	for _, cand := range req.GetCandidates() {
		uids := append([]string(nil), cand.GetVictimUids()...)
		sort.Strings(uids)
		got[cand.GetNode()] = strings.Join(uids, ",")
		if cand.GetPdbViolations() != 0 {
			t.Errorf("candidate %s: %d PDB violations", cand.GetNode(), cand.GetPdbViolations())
		}
	}
	if len(got) != 2 || got["n0"] != "uid-web" || got["n1"] != "uid-be-a,uid-be-b" {
		t.Errorf("candidates sent: %v", got)
	}
	if n := c.pl.failures.Load(); n != 0 {
		t.Errorf("%d failures", n)
	}
}

func TestNoChoiceEvictsNothingEvenForALoneCandidate(t *testing.T) {
	// One candidate: upstream's SelectCandidate would take it without asking anyone.
	nodes := []*v1.Node{node("n0")}
	pods := []*v1.Pod{bound("web", "n0", "4", low)}
	fake := chooses("")
	c := newCluster(t, nodes, pods, preemptor(high), serve(t, fake), "2s")
	nominated, s := c.postFilter(t, preemptor(high))
	if s.Code() != fwk.Unschedulable || nominated != "" {
		t.Fatalf("got node %q, status %v; want no node, Unschedulable", nominated, s)
	}
	if !strings.Contains(s.Message(), "DSAN reclaimer fake evicts nothing") {
		t.Errorf("status message %q does not say why", s.Message())
	}
	if got := c.deleted(t, 0); len(got) != 0 {
		t.Errorf("deleted %v", got)
	}
	if len(fake.requests()) != 1 {
		t.Errorf("%d Reclaim calls, want 1", len(fake.requests()))
	}
}

func TestWithoutTheSidecarDefaultPreemptionsOwnPickIsEvicted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		address func(t *testing.T) string
		timeout string
	}{
		{"down", deadAddress, "100ms"},
		{"slow", func(t *testing.T) string {
			f := chooses("n1")
			f.delay = 2 * time.Second
			return serve(t, f)
		}, "100ms"},
		{"no candidate", func(t *testing.T) string { return serve(t, chooses("n7")) }, "2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, pods := webAndBatch()
			c := newCluster(t, nodes, pods, preemptor(high), tc.address(t), tc.timeout)
			t0 := time.Now()
			nominated, s := c.postFilter(t, preemptor(high))
			if took := time.Since(t0); took > time.Second {
				t.Errorf("PostFilter took %v", took)
			}
			// Kubernetes' order: the lower sum of victim priorities (100 against 200).
			if !s.IsSuccess() || nominated != "n0" {
				t.Fatalf("got node %q, status %v; want n0, Success", nominated, s)
			}
			if got := c.deleted(t, 1); strings.Join(got, ",") != "web" {
				t.Errorf("deleted %v, want web", got)
			}
			if n := c.pl.failures.Load(); n != 1 {
				t.Errorf("%d failures counted, want 1", n)
			}
		})
	}
}

func TestNoVictimsNoCall(t *testing.T) {
	// Pods of the preemptor's own priority: no candidate, upstream's FitError, no Reclaim.
	nodes := []*v1.Node{node("n0"), node("n1")}
	pods := []*v1.Pod{bound("peer-0", "n0", "4", high), bound("peer-1", "n1", "4", high)}
	fake := chooses("n0")
	c := newCluster(t, nodes, pods, preemptor(high), serve(t, fake), "2s")
	nominated, s := c.postFilter(t, preemptor(high))
	if s.Code() != fwk.Unschedulable || nominated != "" {
		t.Fatalf("got node %q, status %v", nominated, s)
	}
	if !strings.Contains(s.Message(), "No preemption victims found") {
		t.Errorf("status message %q is not upstream's FitError", s.Message())
	}
	if len(fake.requests()) != 0 || len(c.deleted(t, 0)) != 0 {
		t.Errorf("Reclaim called %d times, deleted %v", len(fake.requests()), c.deleted(t, 0))
	}
}

func TestNewValidatesArgs(t *testing.T) {
	for _, tc := range []struct{ name, raw, wantErr string }{
		{"empty address", `{"address":"","timeout":"1s"}`, "address must be set"},
		{"zero timeout", `{"timeout":"0s"}`, "timeout positive"},
		{"unparsable timeout", `{"timeout":"soon"}`, "timeout:"},
		{"not JSON", `{"address":`, "DSANPreemption args"},
		{"misspelt key", `{"adress":"10.0.0.1:9"}`, `unknown field "adress"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(context.Background(), &runtime.Unknown{Raw: []byte(tc.raw), ContentType: runtime.ContentTypeJSON}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestCloseClosesTheConnection(t *testing.T) {
	nodes, pods := webAndBatch()
	c := newCluster(t, nodes, pods, preemptor(high), deadAddress(t), "100ms")
	// What frameworkImpl.Close looks for when the scheduler closes its profiles.
	var p fwk.Plugin = c.pl
	closer, ok := p.(io.Closer)
	if !ok {
		t.Fatal("the plugin holds a gRPC connection but is no io.Closer")
	}
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
	if s := c.pl.conn.GetState(); s != connectivity.Shutdown {
		t.Fatalf("connection %v after Close, want Shutdown", s)
	}
}
