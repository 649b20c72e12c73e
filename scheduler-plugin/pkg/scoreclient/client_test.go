package scoreclient

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
)

// fakeSidecar serves a node table and scores every candidate by its position in the table,
// refusing rows of any other epoch as the sidecar does; it records how each call came.
type fakeSidecar struct {
	scorerv1.UnimplementedScorerServer
	mu     sync.Mutex
	epoch  uint64
	names  []string
	byRows int
	byName int
}

func (f *fakeSidecar) NodeTable(context.Context, *scorerv1.NodeTableRequest) (*scorerv1.NodeTableResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &scorerv1.NodeTableResponse{Epoch: f.epoch, NodeNames: append([]string(nil), f.names...)}, nil
}

func (f *fakeSidecar) Score(_ context.Context, req *scorerv1.ScoreRequest) (*scorerv1.ScoreResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pos := map[string]int32{}
	for i, n := range f.names {
		pos[n] = int32(i)
	}
	var scores []int32
	if raw := req.GetNodeIndices(); len(raw) > 0 {
		if req.GetNodeTableEpoch() != f.epoch {
			return nil, status.Error(codes.FailedPrecondition, "stale node table")
		}
		f.byRows++
		for i := 0; i < len(raw); i += 4 {
			scores = append(scores, int32(binary.LittleEndian.Uint32(raw[i:])))
		}
	} else {
		f.byName++
		for _, n := range req.GetNodeNames() {
			scores = append(scores, pos[n])
		}
	}
	return &scorerv1.ScoreResponse{Scores: scores, NodeTableEpoch: f.epoch}, nil
}

func start(t *testing.T, f *fakeSidecar) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	scorerv1.RegisterScorerServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return New(scorerv1.NewScorerClient(conn), time.Second)
}

func waitTable(t *testing.T, c *Client, epoch uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for tb := c.table.Load(); tb == nil || tb.Epoch != epoch; tb = c.table.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("table of epoch %d never fetched", epoch)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func score(t *testing.T, c *Client, names ...string) []int32 {
	t.Helper()
	resp, err := c.Score(context.Background(), &scorerv1.Pod{Name: "p"}, names)
	if err != nil {
		t.Fatalf("Score: %v", err)
	}
	return resp.GetScores()
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestScoreSendsRowsOnceTheTableIsKnownAndNamesOtherwise(t *testing.T) {
	f := &fakeSidecar{epoch: 7, names: []string{"a", "b", "c", "d"}}
	c := start(t, f)
	if got := score(t, c, "c", "a"); !equal(got, []int32{2, 0}) {
		t.Fatalf("by name: %v", got)
	}
	waitTable(t, c, 7) // the reply's epoch differed from "no table": fetched in the background
	if got := score(t, c, "d", "b", "c"); !equal(got, []int32{3, 1, 2}) {
		t.Fatalf("by rows: %v", got)
	}
	if got := score(t, c, "b", "ghost"); !equal(got, []int32{1, 0}) { // not in the table: names
		t.Fatalf("unknown name: %v", got)
	}
	if f.byRows != 1 || f.byName != 2 || c.ByName.Load() != 2 {
		t.Fatalf("rows %d, names %d, client by name %d", f.byRows, f.byName, c.ByName.Load())
	}
}

func TestAStaleTableCostsOneCallWithNamesAndIsFetchedAgain(t *testing.T) {
	f := &fakeSidecar{epoch: 1, names: []string{"a", "b"}}
	c := start(t, f)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.epoch, f.names = 2, []string{"b", "a", "e"} // node set changed, rows moved
	f.mu.Unlock()
	if got := score(t, c, "a", "b"); !equal(got, []int32{1, 0}) { // refused, resent by name
		t.Fatalf("after the change: %v", got)
	}
	if c.Stale.Load() != 1 {
		t.Fatalf("stale refusals: %d", c.Stale.Load())
	}
	waitTable(t, c, 2)
	if got := score(t, c, "e", "a"); !equal(got, []int32{2, 1}) || f.byRows != 1 {
		t.Fatalf("by rows of the new table: %v (rows %d)", got, f.byRows)
	}
}

func TestWarmWaitsForASidecarThatStartsLaterAndTheFirstCallSendsRows(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens yet: the scheduler came up first
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := New(scorerv1.NewScorerClient(conn), time.Second)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- c.Warm(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Warm returned %v before any sidecar listened", err)
	default:
	}
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s was taken in between: %v", addr, err)
	}
	f := &fakeSidecar{epoch: 3, names: []string{"a", "b"}}
	s := grpc.NewServer()
	scorerv1.RegisterScorerServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	if err := <-done; err != nil {
		t.Fatalf("Warm: %v", err)
	}
	if got := score(t, c, "b", "a"); !equal(got, []int32{1, 0}) {
		t.Fatalf("scores %v", got)
	}
	if c.ByName.Load() != 0 || f.byRows != 1 {
		t.Fatalf("first call after Warm: %d by name, %d by rows; want rows only", c.ByName.Load(), f.byRows)
	}
}

func TestWarmGivesUpAtItsDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := New(scorerv1.NewScorerClient(conn), time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Warm(ctx); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Warm with nothing listening: %v, want DeadlineExceeded", err)
	}
}
