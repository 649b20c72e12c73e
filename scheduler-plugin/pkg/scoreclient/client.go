// Package scoreclient calls the sidecar's Score service the cheap way: candidates go as
// indices into the sidecar's node table (proto/scorer/v1: NodeTable), 4 bytes per node that
// the sidecar reads without decoding or looking up a string, and as names whenever the table
// is missing, incomplete or stale. Each reply carries the sidecar's table epoch; when it is not
// the one held, the table is fetched again in the background, so a node-set change costs one
// call with names, never a failed call. Both the DSANScore plugin and cmd/scorebench use it.
package scoreclient

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
)

// Table is one epoch of the sidecar's node table.
type Table struct {
	Epoch uint64
	index map[string]uint32
}

// NewTable indexes a NodeTableResponse.
func NewTable(resp *scorerv1.NodeTableResponse) *Table {
	names := resp.GetNodeNames()
	t := &Table{Epoch: resp.GetEpoch(), index: make(map[string]uint32, len(names))}
	for i, n := range names {
		t.index[n] = uint32(i)
	}
	return t
}

// Indices encodes names as ScoreRequest.node_indices; false when a name is not in the table.
func (t *Table) Indices(names []string) ([]byte, bool) {
	out := make([]byte, 4*len(names))
	for i, n := range names {
		k, ok := t.index[n]
		if !ok {
			return nil, false
		}
		binary.LittleEndian.PutUint32(out[4*i:], k)
	}
	return out, true
}

// Client wraps a ScorerClient with the node table.
type Client struct {
	scorer     scorerv1.ScorerClient
	timeout    time.Duration
	table      atomic.Pointer[Table]
	refreshing atomic.Bool
	// ByName counts Score calls that sent names (no table yet, unknown names, stale table).
	ByName atomic.Int64
	// Stale counts calls refused with FAILED_PRECONDITION and resent with names.
	Stale atomic.Int64
}

// New returns a Client; refresh calls (NodeTable) get their own timeout.
func New(scorer scorerv1.ScorerClient, timeout time.Duration) *Client {
	return &Client{scorer: scorer, timeout: timeout}
}

// Refresh fetches the node table now.
func (c *Client) Refresh(ctx context.Context) error {
	resp, err := c.scorer.NodeTable(ctx, &scorerv1.NodeTableRequest{})
	if err != nil {
		return err
	}
	c.table.Store(NewTable(resp))
	return nil
}

// Warm waits (up to ctx's deadline) for the sidecar to accept connections and fetches the
// table. A fresh client dials lazily, so without this the first Score call pays for the TCP
// and HTTP/2 handshake inside its own short timeout and, on a loaded node, misses it.
func (c *Client) Warm(ctx context.Context) error {
	resp, err := c.scorer.NodeTable(ctx, &scorerv1.NodeTableRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	c.table.Store(NewTable(resp))
	return nil
}

// refreshAsync fetches the table in the background, one fetch at a time.
func (c *Client) refreshAsync() {
	if !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		_ = c.Refresh(ctx) // a failure leaves the old table: calls keep falling back to names
	}()
}

// Score scores pod's candidates; the reply's scores are parallel to names.
func (c *Client) Score(ctx context.Context, pod *scorerv1.Pod, names []string) (*scorerv1.ScoreResponse, error) {
	req := &scorerv1.ScoreRequest{Pod: pod}
	t := c.table.Load()
	if t != nil {
		if idx, ok := t.Indices(names); ok {
			req.NodeIndices, req.NodeTableEpoch = idx, t.Epoch
		}
	}
	if req.NodeIndices == nil {
		req.NodeNames = names
		c.ByName.Add(1)
	}
	resp, err := c.scorer.Score(ctx, req)
	if req.NodeIndices != nil && status.Code(err) == codes.FailedPrecondition {
		c.Stale.Add(1)
		c.ByName.Add(1)
		req.NodeIndices, req.NodeTableEpoch, req.NodeNames = nil, 0, names
		resp, err = c.scorer.Score(ctx, req)
	}
	if err == nil && (t == nil || resp.GetNodeTableEpoch() != t.Epoch) {
		c.refreshAsync()
	}
	return resp, err
}
