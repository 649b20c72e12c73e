// Command score-gateway serves the sidecar's gRPC Score service from Go and relays each call
// to the sidecar's unix-socket relay (`dsan serve --relay-socket PATH`); see pkg/gateway.
//
//	score-gateway -listen 127.0.0.1:50051 -relay /run/dsan/score.sock [-conns 4]
//	score-gateway -probe 127.0.0.1:50051   # exit 0 when SERVING (a container probe)
//
// It prints "serving grpc on ADDR relay PATH" once listening, and stops gracefully on
// SIGINT/SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/gateway"
)

func main() {
	cfg := gateway.Config{}
	flag.StringVar(&cfg.Listen, "listen", "127.0.0.1:50051", "gRPC listen address")
	flag.StringVar(&cfg.Relay, "relay", "/run/dsan/score.sock", "the sidecar's relay socket (relay_socket)")
	flag.IntVar(&cfg.Conns, "conns", 4, "relay connections (calls in flight) at most")
	flag.IntVar(&cfg.MaxMessageBytes, "max-message-bytes", 8<<20, "largest request or reply")
	flag.DurationVar(&cfg.HealthInterval, "health-interval", time.Second, "readiness poll interval")
	probe := flag.String("probe", "", "check the gRPC health of a running gateway at this address and exit")
	flag.Parse()
	if *probe != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := gateway.Probe(ctx, *probe); err != nil {
			fmt.Fprintf(os.Stderr, "score-gateway: probe: %v\n", err)
			os.Exit(1)
		}
		return
	}
	srv, err := gateway.New(cfg)
	if err != nil {
		fail(err)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go srv.WatchReady(ctx)
	go func() {
		<-ctx.Done()
		srv.GRPC.GracefulStop()
	}()
	fmt.Printf("serving grpc on %s relay %s\n", lis.Addr(), cfg.Relay)
	if err := srv.GRPC.Serve(lis); err != nil {
		fail(err)
	}
	srv.Close()
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "score-gateway: %v\n", err)
	os.Exit(2)
}
