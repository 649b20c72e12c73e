// Package gateway serves the sidecar's dsan.scorer.v1.Scorer service from Go and forwards each
// call's protobuf bytes, undecoded, to the sidecar's Score relay (pkg/relay). The sidecar
// decodes, validates, scores and counts exactly as behind its own grpcio server, so replies
// and error codes are the same; what changes is the server: grpc-go's instead of grpcio's
// thread hand-offs under the GIL. The standard health service reports SERVING while the
// relay answers its readiness frame.
package gateway

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/relay"
)

// ServiceName is the relayed service (proto/scorer/v1/scorer.proto).
const ServiceName = "dsan.scorer.v1.Scorer"

// Config is the gateway's one config; cmd/score-gateway maps its flags onto it.
type Config struct {
	// Listen is the gRPC address, e.g. "127.0.0.1:50051".
	Listen string
	// Relay is the sidecar's relay socket path (SidecarConfig.relay_socket).
	Relay string
	// Conns is the most relay connections, and so calls in flight, at once.
	Conns int
	// MaxMessageBytes bounds requests and replies (SidecarConfig.max_grpc_message_bytes).
	MaxMessageBytes int
	// HealthInterval is how often the relay's readiness is polled for the health service.
	HealthInterval time.Duration
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Listen == "":
		return fmt.Errorf("gateway: listen address is empty")
	case c.Relay == "":
		return fmt.Errorf("gateway: relay socket path is empty")
	case c.Conns < 1 || c.Conns > 256:
		return fmt.Errorf("gateway: conns=%d: must be within 1..256", c.Conns)
	case c.MaxMessageBytes < 1024:
		return fmt.Errorf("gateway: max message bytes=%d: must be at least 1024", c.MaxMessageBytes)
	case c.HealthInterval <= 0:
		return fmt.Errorf("gateway: health interval=%s: must be positive", c.HealthInterval)
	}
	return nil
}

// frame is a message the codec passes through as bytes.
type frame struct{ b []byte }

// codec passes frames through and marshals everything else (the health service) as protobuf;
// named "proto" so clients' application/grpc content type matches.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) ([]byte, error) {
	if f, ok := v.(*frame); ok {
		return f.b, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("gateway codec: cannot marshal %T", v)
	}
	return proto.Marshal(m)
}

func (codec) Unmarshal(data []byte, v any) error {
	if f, ok := v.(*frame); ok {
		f.b = data // grpc-go hands the v1 codec a buffer of its own (materialised)
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("gateway codec: cannot unmarshal into %T", v)
	}
	return proto.Unmarshal(data, m)
}

// Server is the gRPC server with the relayed service and the health service.
type Server struct {
	GRPC   *grpc.Server
	Health *health.Server
	relay  *relay.Client
	cfg    Config
}

// New builds the server (not yet listening).
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, relay: relay.New(cfg.Relay, cfg.Conns, cfg.MaxMessageBytes),
		Health: health.NewServer()}
	s.GRPC = grpc.NewServer(grpc.ForceServerCodec(codec{}),
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxSendMsgSize(cfg.MaxMessageBytes))
	s.GRPC.RegisterService(&grpc.ServiceDesc{
		ServiceName: ServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Score", Handler: s.handler(relay.KindScore)},
			{MethodName: "NodeTable", Handler: s.handler(relay.KindNodeTable)},
		},
		Metadata: "scorer/v1/scorer.proto",
	}, s)
	healthpb.RegisterHealthServer(s.GRPC, s.Health)
	s.setServing(false)
	return s, nil
}

func (s *Server) handler(kind byte) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(frame)
		if err := dec(in); err != nil {
			return nil, err
		}
		rep, err := s.relay.Call(ctx, kind, in.b)
		if err != nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return nil, status.Errorf(codes.Unavailable, "%v", err)
		}
		if rep.Code != codes.OK {
			return nil, status.Error(rep.Code, string(rep.Body))
		}
		return &frame{b: rep.Body}, nil
	}
}

func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.Health.SetServingStatus("", st)
	s.Health.SetServingStatus(ServiceName, st)
}

// Ready asks the relay once whether the sidecar is ready and sets the health status.
func (s *Server) Ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HealthInterval)
	defer cancel()
	rep, err := s.relay.Call(ctx, relay.KindReady, nil)
	ok := err == nil && rep.Code == codes.OK
	s.setServing(ok)
	return ok
}

// WatchReady polls readiness until ctx ends.
func (s *Server) WatchReady(ctx context.Context) {
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	for {
		s.Ready(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close releases the relay connections (after GRPC.GracefulStop).
func (s *Server) Close() { s.relay.Close() }

// Probe asks the gRPC health service at addr about the relayed service: nil when SERVING.
// score-gateway -probe runs it as a container probe (the gateway listens on the pod's
// loopback, which the kubelet's own gRPC probe cannot reach).
func Probe(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil {
		return err
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s: %s is %s", addr, ServiceName, st)
	}
	return nil
}
