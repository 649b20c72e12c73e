// Package relaytest is a Score relay server in Go for tests: the framing of
// proto/scorer/v1/relay.md around a handler function, so pkg/relay and pkg/gateway are tested
// without a sidecar (the Python relay is tested against the real gateway in
// tests/integration/sidecar/test_gateway.py).
package relaytest

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// Handler answers one frame: the reply's kind (a gRPC status code) and payload. With
// close=true the connection is closed: at once (no reply) when body is nil, else after the
// reply is sent (as the sidecar does after refusing an oversized frame).
type Handler func(kind byte, payload []byte) (code byte, body []byte, close bool)

// Server is a running fake relay.
type Server struct {
	Path string
	lis  net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	// Accepted counts the connections accepted so far.
	accepted int
}

// Serve starts a relay on a fresh socket in t's temp dir, stopped at the end of the test.
func Serve(t testing.TB, h Handler) *Server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Path: path, lis: lis}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.accepted++
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer conn.Close()
				serveConn(conn, h)
			}()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Accepted is how many connections the server accepted.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// Close stops accepting; connections end when their clients close them.
func (s *Server) Close() { s.lis.Close() }

func serveConn(conn net.Conn, h Handler) {
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return
		}
		payload := make([]byte, binary.LittleEndian.Uint32(hdr[:4]))
		if _, err := io.ReadFull(conn, payload); err != nil {
			return
		}
		code, body, drop := h(hdr[4], payload)
		if drop && body == nil {
			return
		}
		var out [5]byte
		binary.LittleEndian.PutUint32(out[:4], uint32(len(body)))
		out[4] = code
		if _, err := conn.Write(append(out[:], body...)); err != nil || drop {
			return
		}
	}
}
