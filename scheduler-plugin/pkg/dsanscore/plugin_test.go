package dsanscore

// Table-driven tests of DSANScore against an in-process fake of the sidecar's gRPC Score
// service on a loopback listener, so New's real dial path is exercised too.

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
)

// fakeScorer answers with reply(req) after delay and records every request it saw.
type fakeScorer struct {
	scorerv1.UnimplementedScorerServer
	reply func(*scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error)
	delay time.Duration
	mu    sync.Mutex
	seen  []*scorerv1.ScoreRequest
}

func (f *fakeScorer) Score(ctx context.Context, req *scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error) {
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

// serve starts f on 127.0.0.1:0 and returns its address; stopped when the test ends.
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

func args(t *testing.T, raw string) runtime.Object {
	t.Helper()
	if raw == "" {
		return nil
	}
	return &runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON}
}

func newPlugin(t *testing.T, address string, timeout string) *Plugin {
	t.Helper()
	p, err := New(context.Background(), args(t, `{"address":"`+address+`","timeout":"`+timeout+`"}`), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.(*Plugin).conn.Close() })
	return p.(*Plugin)
}

func nodeInfos(names ...string) []fwk.NodeInfo {
	out := make([]fwk.NodeInfo, 0, len(names))
	for _, n := range names {
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		out = append(out, ni)
	}
	return out
}

func gpuPod() *v1.Pod {
	prio := int32(7)
	req := func(cpu, gpu string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse(cpu), "nvidia.com/gpu": resource.MustParse(gpu)}}
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1",
			Annotations: map[string]string{"dsan.io/gpu-milli": "500"}},
		Spec: v1.PodSpec{Priority: &prio, Containers: []v1.Container{
			{Name: "a", Resources: req("1", "1")}, {Name: "b", Resources: req("500m", "2")}}},
	}
}

func TestNewValidatesArgs(t *testing.T) {
	for _, tc := range []struct {
		name, raw, wantErr string
		wantAddr           string
		wantTimeout        time.Duration
	}{
		{"defaults without args", "", "", "127.0.0.1:50051", 100 * time.Millisecond},
		{"explicit", `{"address":"10.0.0.1:9","timeout":"2s"}`, "", "10.0.0.1:9", 2 * time.Second},
		{"empty address", `{"address":"","timeout":"1s"}`, "address must be set", "", 0},
		{"zero timeout", `{"timeout":"0s"}`, "timeout positive", "", 0},
		{"negative timeout", `{"timeout":"-5ms"}`, "timeout positive", "", 0},
		{"unparsable timeout", `{"timeout":"soon"}`, "timeout:", "", 0},
		{"not JSON", `{"address":`, "DSANScore args", "", 0},
		{"misspelt key", `{"address":"10.0.0.1:9","timout":"2s"}`, `unknown field "timout"`, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(context.Background(), args(t, tc.raw), nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pl := p.(*Plugin)
			defer pl.conn.Close()
			if pl.args.Address != tc.wantAddr || pl.args.Timeout.Duration != tc.wantTimeout || pl.Name() != Name {
				t.Fatalf("got %+v", pl.args)
			}
		})
	}
	if _, err := New(context.Background(), &v1.Pod{}, nil); err == nil {
		t.Fatal("args of a type other than runtime.Unknown must be rejected")
	}
}

func TestPreScoreAndScore(t *testing.T) {
	nodes := []string{"n0", "n1", "n2"}
	ok := func(s ...int32) func(*scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error) {
		return func(*scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error) {
			return &scorerv1.ScoreResponse{Scores: s, Policy: "fake"}, nil
		}
	}
	for _, tc := range []struct {
		name  string
		reply func(*scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error)
		delay time.Duration
		down  bool // no server listening at the address
		// want: PreScore skipped (sidecar unusable), else per-node scores.
		wantSkip bool
		want     []int64
	}{
		{name: "scores map to nodes in order", reply: ok(0, 55, 100), want: []int64{0, 55, 100}},
		// A Score error would fail the pod's scheduling cycle: a bad reply degrades like no reply.
		{name: "score above 100 skips", reply: ok(0, 101, 100), wantSkip: true},
		{name: "negative score skips", reply: ok(-1, 50, 100), wantSkip: true},
		{name: "short reply skips", reply: ok(1, 2), wantSkip: true},
		{name: "long reply skips", reply: ok(1, 2, 3, 4), wantSkip: true},
		{name: "gRPC error skips", wantSkip: true,
			reply: func(*scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error) {
				return nil, status.Error(codes.Unavailable, "policy not loaded")
			}},
		{name: "plain error skips", wantSkip: true,
			reply: func(*scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error) { return nil, errors.New("boom") }},
		{name: "slow sidecar times out and skips", reply: ok(1, 2, 3), delay: 2 * time.Second, wantSkip: true},
		{name: "no sidecar skips", down: true, wantSkip: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeScorer{reply: tc.reply, delay: tc.delay}
			addr := "127.0.0.1:1" // nothing listens on port 1 here
			if !tc.down {
				addr = serve(t, f)
			}
			p := newPlugin(t, addr, "200ms")
			state := framework.NewCycleState()
			ni := nodeInfos(nodes...)
			start := time.Now()
			st := p.PreScore(context.Background(), state, gpuPod(), ni)
			if elapsed := time.Since(start); elapsed > time.Second {
				t.Fatalf("PreScore took %v with a 200ms timeout", elapsed)
			}
			if tc.wantSkip {
				if st.Code() != fwk.Skip || p.failures.Load() != 1 {
					t.Fatalf("want Skip and 1 failure, got %v, %d", st, p.failures.Load())
				}
				// Score without PreScore data contributes nothing and does not fail.
				if s, sst := p.Score(context.Background(), state, gpuPod(), ni[0]); s != 0 || !sst.IsSuccess() {
					t.Fatalf("Score after skip: %d %v", s, sst)
				}
				return
			}
			if !st.IsSuccess() || p.failures.Load() != 0 {
				t.Fatalf("PreScore: %v, failures %d", st, p.failures.Load())
			}
			for i, n := range ni {
				s, sst := p.Score(context.Background(), state, gpuPod(), n)
				if s != tc.want[i] || !sst.IsSuccess() {
					t.Errorf("%s: got %d %v, want %d", nodes[i], s, sst, tc.want[i])
				}
			}
		})
	}
}

func TestPreScoreSendsThePodAndAllCandidates(t *testing.T) {
	f := &fakeScorer{reply: func(r *scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error) {
		return &scorerv1.ScoreResponse{Scores: make([]int32, len(r.GetNodeNames()))}, nil
	}}
	p := newPlugin(t, serve(t, f), "1s")
	names := []string{"b", "a", "c", "d"}
	if st := p.PreScore(context.Background(), framework.NewCycleState(), gpuPod(), nodeInfos(names...)); !st.IsSuccess() {
		t.Fatal(st)
	}
	if len(f.seen) != 1 {
		t.Fatalf("want one call per pod, got %d", len(f.seen))
	}
	req := f.seen[0]
	if strings.Join(req.GetNodeNames(), ",") != "b,a,c,d" {
		t.Fatalf("node names %v", req.GetNodeNames())
	}
	pod := req.GetPod()
	if pod.GetNamespace() != "ns" || pod.GetName() != "p" || pod.GetUid() != "u-1" || pod.GetPriority() != 7 {
		t.Fatalf("pod identity %v", pod)
	}
	// Requests are summed across containers, as the scheduler's fit check does.
	if got := pod.GetRequests(); got["cpu"] != "1500m" || got["nvidia.com/gpu"] != "3" || len(got) != 2 {
		t.Fatalf("requests %v", got)
	}
	if pod.GetAnnotations()["dsan.io/gpu-milli"] != "500" {
		t.Fatalf("annotations %v", pod.GetAnnotations())
	}
}

func TestFailuresAreCountedAcrossCalls(t *testing.T) {
	p := newPlugin(t, "127.0.0.1:1", "100ms")
	for i := 0; i < 3; i++ {
		p.PreScore(context.Background(), framework.NewCycleState(), gpuPod(), nodeInfos("n"))
	}
	if p.failures.Load() != 3 {
		t.Fatalf("failures %d", p.failures.Load())
	}
	if p.ScoreExtensions() != nil {
		t.Fatal("scores arrive normalised; no ScoreExtensions expected")
	}
}

// tableScorer also serves a node table and counts the fetches.
type tableScorer struct {
	fakeScorer
	tables chan struct{}
}

func (f *tableScorer) NodeTable(context.Context, *scorerv1.NodeTableRequest) (*scorerv1.NodeTableResponse, error) {
	f.tables <- struct{}{}
	return &scorerv1.NodeTableResponse{Epoch: 1, NodeNames: []string{"n0", "n1"}}, nil
}

func TestNewConnectsAndFetchesTheNodeTableBeforeTheFirstPod(t *testing.T) {
	f := &tableScorer{tables: make(chan struct{}, 4)}
	newPlugin(t, serve(t, f), "100ms")
	select {
	case <-f.tables:
	case <-time.After(10 * time.Second):
		t.Fatal("no NodeTable call within 10 s of New")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) != 0 {
		t.Fatalf("%d Score calls before any pod", len(f.seen))
	}
}

func TestPodMessageRequestsAreWhatTheFitCheckCharges(t *testing.T) {
	pod := gpuPod() // containers: cpu 1500m, nvidia.com/gpu 3
	// An init container runs alone before them: the pod needs at least its request.
	pod.Spec.InitContainers = []v1.Container{{Name: "fetch", Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}}}}
	pod.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}
	got := PodMessage(pod).GetRequests()
	want := map[string]string{"cpu": "2250m", "memory": "1Gi", "nvidia.com/gpu": "3"}
	if len(got) != len(want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("requests[%s] = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}
