package relay_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/relay"
	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/relay/relaytest"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCallRoundTripsAndReusesOneConnection(t *testing.T) {
	srv := relaytest.Serve(t, func(kind byte, p []byte) (byte, []byte, bool) {
		return 0, append([]byte{kind}, p...), false
	})
	c := relay.New(srv.Path, 4, 1<<20)
	defer c.Close()
	for i := 0; i < 20; i++ {
		rep, err := c.Call(ctx(t), relay.KindScore, []byte("abc"))
		if err != nil || rep.Code != codes.OK || string(rep.Body) != "\x01abc" {
			t.Fatalf("call %d: %v %v %q", i, err, rep.Code, rep.Body)
		}
	}
	// Sequential calls take the idle connection back: one dial for all of them.
	if n := srv.Accepted(); n != 1 {
		t.Fatalf("dialled %d connections for sequential calls, want 1", n)
	}
	rep, err := c.Call(ctx(t), relay.KindReady, nil)
	if err != nil || string(rep.Body) != "\x03" {
		t.Fatalf("empty payload: %v %q", err, rep.Body)
	}
}

func TestRefusalIsAReplyNotAnError(t *testing.T) {
	srv := relaytest.Serve(t, func(byte, []byte) (byte, []byte, bool) {
		return byte(codes.InvalidArgument), []byte("pod.name is empty"), false
	})
	c := relay.New(srv.Path, 1, 1<<20)
	rep, err := c.Call(ctx(t), relay.KindScore, []byte("x"))
	if err != nil || rep.Code != codes.InvalidArgument || string(rep.Body) != "pod.name is empty" {
		t.Fatalf("got %v %v %q", err, rep.Code, rep.Body)
	}
}

func TestBrokenConnectionIsDroppedAndTheNextCallRedials(t *testing.T) {
	var mu sync.Mutex
	drop := true
	srv := relaytest.Serve(t, func(kind byte, p []byte) (byte, []byte, bool) {
		mu.Lock()
		defer mu.Unlock()
		if drop {
			drop = false
			return 0, nil, true
		}
		return 0, p, false
	})
	c := relay.New(srv.Path, 1, 1<<20)
	if _, err := c.Call(ctx(t), relay.KindScore, []byte("a")); err == nil {
		t.Fatal("a connection closed mid-call must be an error")
	}
	rep, err := c.Call(ctx(t), relay.KindScore, []byte("b"))
	if err != nil || string(rep.Body) != "b" {
		t.Fatalf("after a broken connection: %v %q", err, rep.Body)
	}
	if n := srv.Accepted(); n != 2 {
		t.Fatalf("accepted %d connections, want 2 (the broken one is not reused)", n)
	}
}

func TestDeadlineAndOversizedReplyAndNoServer(t *testing.T) {
	slow := relaytest.Serve(t, func(byte, []byte) (byte, []byte, bool) {
		time.Sleep(300 * time.Millisecond)
		return 0, make([]byte, 64), false
	})
	c := relay.New(slow.Path, 1, 1<<20)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Call(short, relay.KindScore, nil); err == nil {
		t.Fatal("a call past its deadline must fail")
	}
	small := relay.New(slow.Path, 1, 16)
	if _, err := small.Call(ctx(t), relay.KindScore, nil); err == nil ||
		!strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("a 64-byte reply over a 16-byte limit: %v", err)
	}
	none := relay.New(t.TempDir()+"/absent.sock", 1, 1<<20)
	if _, err := none.Call(ctx(t), relay.KindScore, nil); err == nil ||
		!strings.Contains(err.Error(), "absent.sock") {
		t.Fatalf("no server: %v", err)
	}
}

func TestConcurrentCallsAreBoundedByConns(t *testing.T) {
	var mu sync.Mutex
	inFlight, most := 0, 0
	srv := relaytest.Serve(t, func(_ byte, p []byte) (byte, []byte, bool) {
		mu.Lock()
		inFlight++
		if inFlight > most {
			most = inFlight
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return 0, p, false
	})
	c := relay.New(srv.Path, 3, 1<<20)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Call(ctx(t), relay.KindScore, []byte("x")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if most > 3 || srv.Accepted() > 3 {
		t.Fatalf("%d calls in flight on %d connections, want at most 3", most, srv.Accepted())
	}
}

func TestAnIdleConnectionTheServerClosedIsRedialledNotFailed(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := relaytest.Serve(t, func(kind byte, p []byte) (byte, []byte, bool) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		// The first call is answered, then its connection closed (a sidecar restart, or
		// a refusal that ends the connection): the pooled connection is dead.
		return 0, append([]byte("r"), p...), calls == 1
	})
	c := relay.New(srv.Path, 1, 1<<20)
	if rep, err := c.Call(ctx(t), relay.KindScore, []byte("1")); err != nil || string(rep.Body) != "r1" {
		t.Fatalf("first call: %v %q", err, rep.Body)
	}
	time.Sleep(20 * time.Millisecond) // the close reaches this end
	rep, err := c.Call(ctx(t), relay.KindScore, []byte("2"))
	if err != nil || string(rep.Body) != "r2" {
		t.Fatalf("the call on the dead idle connection must be sent again: %v %q", err, rep.Body)
	}
	if calls != 2 || srv.Accepted() != 2 {
		t.Fatalf("calls %d, connections %d; want 2 and 2 (handled once each)", calls, srv.Accepted())
	}
}
