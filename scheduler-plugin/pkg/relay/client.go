// Package relay is the Go end of the sidecar's Score relay (proto/scorer/v1/relay.md): length-
// prefixed frames on a unix socket, one call in flight per connection. A Client keeps up to
// Conns connections open and reuses them; a connection that fails or times out mid-frame is
// closed (its stream position is unknown), and the next call dials a new one.
package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc/codes"
)

// Request kinds (the method); a reply's kind is a gRPC status code.
const (
	KindScore     byte = 1
	KindNodeTable byte = 2
	KindReady     byte = 3
)

const headerLen = 5 // uint32 little-endian payload length, then the kind byte

// Client calls the relay at Path.
type Client struct {
	Path string
	// MaxFrame bounds a reply's payload; a longer one is refused (the connection dropped).
	MaxFrame int
	// DialTimeout bounds connecting when the call's context has no earlier deadline.
	DialTimeout time.Duration
	idle        chan net.Conn
	slots       chan struct{}
}

// New returns a Client with at most conns connections (and as many calls in flight).
func New(path string, conns, maxFrame int) *Client {
	if conns < 1 {
		conns = 1
	}
	return &Client{Path: path, MaxFrame: maxFrame, DialTimeout: time.Second,
		idle: make(chan net.Conn, conns), slots: make(chan struct{}, conns)}
}

// Reply is one answered call: Code OK with the response message, or an error code with
// the sidecar's message in Body.
type Reply struct {
	Code codes.Code
	Body []byte
}

// Call sends one frame and waits for its reply. err is a transport failure (no reply);
// a refusal by the sidecar is a Reply with a non-OK Code.
func (c *Client) Call(ctx context.Context, kind byte, payload []byte) (Reply, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	}
	defer func() { <-c.slots }()
	conn, reused, err := c.conn(ctx)
	if err != nil {
		return Reply{}, err
	}
	rep, err := c.exchange(ctx, conn, kind, payload)
	if err != nil && reused && errors.Is(err, errUnanswered) {
		// An idle connection the sidecar closed meanwhile (it restarted, or it refused an
		// oversized frame): the request never reached a handler, so it is sent once more
		// on a new connection instead of failing.
		conn.Close()
		if conn, err = c.dial(ctx); err != nil {
			return Reply{}, err
		}
		rep, err = c.exchange(ctx, conn, kind, payload)
	}
	if err != nil {
		conn.Close()
		return Reply{}, err
	}
	c.idle <- conn // never blocks: at most cap(slots) connections exist
	return rep, nil
}

// errUnanswered marks a call whose connection was closed before the request was read: the
// send failed, or the stream ended before the first byte of a reply.
var errUnanswered = errors.New("connection closed before the request was answered")

func (c *Client) conn(ctx context.Context) (net.Conn, bool, error) {
	select {
	case conn := <-c.idle:
		return conn, true, nil
	default:
	}
	conn, err := c.dial(ctx)
	return conn, false, err
}

func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: c.DialTimeout}
	conn, err := d.DialContext(ctx, "unix", c.Path)
	if err != nil {
		return nil, fmt.Errorf("score relay %s: %w", c.Path, err)
	}
	return conn, nil
}

func (c *Client) exchange(ctx context.Context, conn net.Conn, kind byte, payload []byte) (Reply, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Time{}
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return Reply{}, err
	}
	var hdr [headerLen]byte
	binary.LittleEndian.PutUint32(hdr[:4], uint32(len(payload)))
	hdr[4] = kind
	bufs := net.Buffers{hdr[:], payload}
	if _, err := bufs.WriteTo(conn); err != nil {
		if ctx.Err() == nil && !isTimeout(err) {
			err = fmt.Errorf("%w: %w", errUnanswered, err)
		}
		return Reply{}, fmt.Errorf("score relay: send: %w", err)
	}
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		if err == io.EOF { // nothing at all came back: the peer had closed
			err = fmt.Errorf("%w: %w", errUnanswered, err)
		}
		return Reply{}, fmt.Errorf("score relay: reply: %w", err)
	}
	n := int(binary.LittleEndian.Uint32(hdr[:4]))
	if c.MaxFrame > 0 && n > c.MaxFrame {
		return Reply{}, fmt.Errorf("score relay: reply of %d bytes is over the limit of %d", n, c.MaxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return Reply{}, fmt.Errorf("score relay: reply body: %w", err)
	}
	return Reply{Code: codes.Code(hdr[4]), Body: body}, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Close closes the idle connections (calls in flight close theirs when they end).
func (c *Client) Close() {
	for {
		select {
		case conn := <-c.idle:
			conn.Close()
		default:
			return
		}
	}
}
