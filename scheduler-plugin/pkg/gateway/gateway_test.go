package gateway_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/gateway"
	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/relay"
	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/relay/relaytest"
)

func start(t *testing.T, relayPath string) (*gateway.Server, *grpc.ClientConn) {
	t.Helper()
	srv, err := gateway.New(gateway.Config{Listen: "127.0.0.1:0", Relay: relayPath, Conns: 2,
		MaxMessageBytes: 1 << 20, HealthInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.GRPC.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.GRPC.Stop(); srv.Close() })
	return srv, conn
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestScoreBytesPassThroughUnchanged(t *testing.T) {
	want := &scorerv1.ScoreResponse{Scores: []int32{0, 100, 7}, Policy: "fake", NodeTableEpoch: 9}
	var got []byte
	r := relaytest.Serve(t, func(kind byte, p []byte) (byte, []byte, bool) {
		if kind != relay.KindScore {
			return byte(codes.Unimplemented), []byte("kind"), false
		}
		got = p
		b, _ := proto.Marshal(want)
		return 0, b, false
	})
	_, conn := start(t, r.Path)
	req := &scorerv1.ScoreRequest{Pod: &scorerv1.Pod{Name: "p", Requests: map[string]string{"cpu": "1"}},
		NodeNames: []string{"a", "b", "c"}}
	resp, err := scorerv1.NewScorerClient(conn).Score(ctx(t), req)
	if err != nil || !proto.Equal(resp, want) {
		t.Fatalf("reply %v, %v; want %v", resp, err, want)
	}
	sent, _ := proto.Marshal(req)
	if !bytes.Equal(got, sent) {
		t.Fatalf("the relay got %x, the client sent %x", got, sent)
	}
}

func TestRefusalsKeepTheirCodeAndMessage(t *testing.T) {
	r := relaytest.Serve(t, func(kind byte, p []byte) (byte, []byte, bool) {
		if kind == relay.KindNodeTable {
			return byte(codes.FailedPrecondition), []byte("fetch the table again"), false
		}
		return byte(codes.InvalidArgument), []byte("request is not a dsan.scorer.v1.ScoreRequest"), false
	})
	_, conn := start(t, r.Path)
	cl := scorerv1.NewScorerClient(conn)
	_, err := cl.Score(ctx(t), &scorerv1.ScoreRequest{})
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != "request is not a dsan.scorer.v1.ScoreRequest" {
		t.Fatalf("Score: %v", err)
	}
	_, err = cl.NodeTable(ctx(t), &scorerv1.NodeTableRequest{})
	if s := status.Convert(err); s.Code() != codes.FailedPrecondition {
		t.Fatalf("NodeTable: %v", err)
	}
}

func TestNoRelayIsUnavailableAndHealthFollowsReadiness(t *testing.T) {
	var ready atomic.Bool
	r := relaytest.Serve(t, func(kind byte, p []byte) (byte, []byte, bool) {
		if kind == relay.KindReady && !ready.Load() {
			return byte(codes.Unavailable), []byte("not synced"), false
		}
		return 0, nil, false
	})
	srv, conn := start(t, r.Path)
	health := healthpb.NewHealthClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: gateway.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if srv.Ready(ctx(t)) || check() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatal("not ready yet: NOT_SERVING")
	}
	if err := gateway.Probe(ctx(t), conn.Target()); err == nil || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Fatalf("probe before ready: %v", err)
	}
	ready.Store(true)
	if !srv.Ready(ctx(t)) || check() != healthpb.HealthCheckResponse_SERVING {
		t.Fatal("ready: SERVING")
	}
	if err := gateway.Probe(ctx(t), conn.Target()); err != nil {
		t.Fatalf("probe when ready: %v", err)
	}
	r.Close()
	_, conn2 := start(t, t.TempDir()+"/gone.sock")
	_, err := scorerv1.NewScorerClient(conn2).Score(ctx(t), &scorerv1.ScoreRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("no relay: %v, want UNAVAILABLE", err)
	}
}

func TestWatchReadyTurnsServingWhenTheRelayIsReady(t *testing.T) {
	var ready atomic.Bool
	r := relaytest.Serve(t, func(kind byte, p []byte) (byte, []byte, bool) {
		if !ready.Load() {
			return byte(codes.Unavailable), nil, false
		}
		return 0, nil, false
	})
	srv, conn := start(t, r.Path)
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.WatchReady(c)
	ready.Store(true)
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := health.Check(ctx(t), &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health never turned SERVING: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConfigIsValidated(t *testing.T) {
	bad := []gateway.Config{
		{Relay: "/x", Conns: 1, MaxMessageBytes: 4096, HealthInterval: time.Second},
		{Listen: ":1", Conns: 1, MaxMessageBytes: 4096, HealthInterval: time.Second},
		{Listen: ":1", Relay: "/x", Conns: 0, MaxMessageBytes: 4096, HealthInterval: time.Second},
		{Listen: ":1", Relay: "/x", Conns: 1, MaxMessageBytes: 10, HealthInterval: time.Second},
		{Listen: ":1", Relay: "/x", Conns: 1, MaxMessageBytes: 4096},
	}
	for i, c := range bad {
		if _, err := gateway.New(c); err == nil {
			t.Errorf("config %d: %+v accepted", i, c)
		}
	}
}
