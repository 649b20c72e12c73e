// Command scorebench measures the sidecar's score latency as kube-scheduler sees it: a Go
// client using the same generated stubs and gRPC settings as the DSANScore plugin
// (pkg/dsanscore), or Go's net/http posting ExtenderArgs and decoding the HostPriorityList
// as kube-scheduler's HTTP extender client does. bench/test_score_latency.py builds it once
// (cached by a hash of its sources) and drives it with the same requests as its Python rows.
//
//	scorebench -kind grpc|http -addr 127.0.0.1:PORT [-path /dsan/prioritize] -rounds N [-gap 1ms] [-names] < requests.json
//
// gRPC calls go through pkg/scoreclient as the plugin's do: candidates as node-table indices
// (the table fetched once before the warm-up), or as names with -names.
//
// stdin: {"pods": [{"name", "namespace", "uid", "requests", "annotations"}],
// "node_lists": [[names...]], "bodies": ["ExtenderArgs JSON", ...]} (bodies for http only;
// request i uses pod i and node list i, cycling). stdout: {"ns": [one latency per round]}.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	scorerv1 "github.com/dsan-scheduler/dsan/scheduler-plugin/gen/scorer/v1"
	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/scoreclient"
)

type podIn struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	UID         string            `json:"uid"`
	Requests    map[string]string `json:"requests"`
	Annotations map[string]string `json:"annotations"`
}

type input struct {
	Pods      []podIn    `json:"pods"`
	NodeLists [][]string `json:"node_lists"`
	Bodies    []string   `json:"bodies"`
}

// hostPriority is k8s.io/kube-scheduler/extender/v1.HostPriority (no JSON tags upstream).
type hostPriority struct {
	Host  string
	Score int64
}

func main() {
	kind := flag.String("kind", "grpc", "grpc or http")
	addr := flag.String("addr", "", "host:port of the server")
	path := flag.String("path", "/dsan/prioritize", "extender prioritize path (http)")
	rounds := flag.Int("rounds", 1000, "timed calls")
	warmup := flag.Int("warmup", 20, "untimed calls first")
	timeout := flag.Duration("timeout", 10*time.Second, "per-call timeout")
	// kube-scheduler never calls back to back: between two pods' Score calls it runs the
	// next pod's PreFilter and Filter over every node (and binds asynchronously); at the
	// 106 pods/s measured with this plugin at 1,000 nodes that is ~9 ms per pod.
	gap := flag.Duration("gap", 0, "pause between calls, off the clock")
	names := flag.Bool("names", false, "gRPC: always send node names, never node-table indices")
	flag.Parse()
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("stdin: %v", err)
	}
	var call func(i int) error
	switch *kind {
	case "grpc":
		call = grpcCaller(*addr, in, *timeout, *names)
	case "http":
		call = httpCaller("http://"+*addr+*path, in, *timeout)
	default:
		fail("unknown -kind %q", *kind)
	}
	for i := 0; i < *warmup; i++ {
		if err := call(i); err != nil {
			fail("warm-up call: %v", err)
		}
	}
	ns := make([]int64, *rounds)
	for i := range ns {
		if *gap > 0 {
			time.Sleep(*gap)
		}
		t0 := time.Now()
		if err := call(*warmup + i); err != nil {
			fail("call %d: %v", i, err)
		}
		ns[i] = time.Since(t0).Nanoseconds()
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string][]int64{"ns": ns}); err != nil {
		fail("stdout: %v", err)
	}
}

// grpcCaller: what DSANScore.PreScore does per pod (a per-call deadline, one Score call
// through pkg/scoreclient, which encodes the node-table indices inside the timed call, the
// reply's length checked); the names slice and pod message are built beforehand, as
// PreScore's own Go-side cost is not the sidecar's.
func grpcCaller(addr string, in input, timeout time.Duration, byName bool) func(int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail("dial %s: %v", addr, err)
	}
	stub := scorerv1.NewScorerClient(conn)
	client := scoreclient.New(stub, timeout)
	if !byName {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := client.Refresh(ctx); err != nil {
			fail("node table: %v", err)
		}
	}
	pods := make([]*scorerv1.Pod, len(in.NodeLists))
	for i := range in.NodeLists {
		p := in.Pods[i%len(in.Pods)]
		pods[i] = &scorerv1.Pod{Name: p.Name, Namespace: p.Namespace, Uid: p.UID,
			Requests: p.Requests, Annotations: p.Annotations}
	}
	return func(i int) error {
		k := i % len(pods)
		names := in.NodeLists[k]
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var resp *scorerv1.ScoreResponse
		var err error
		if byName {
			resp, err = stub.Score(ctx, &scorerv1.ScoreRequest{Pod: pods[k], NodeNames: names})
		} else {
			resp, err = client.Score(ctx, pods[k], names)
		}
		if err == nil && len(resp.GetScores()) != len(names) {
			err = fmt.Errorf("reply has %d scores for %d nodes", len(resp.GetScores()), len(names))
		}
		return err
	}
}

// httpCaller: kube-scheduler's HTTPExtender.Prioritize: POST the ExtenderArgs JSON on a
// keep-alive connection, decode the HostPriorityList.
func httpCaller(url string, in input, timeout time.Duration) func(int) error {
	client := &http.Client{Transport: &http.Transport{}, Timeout: timeout}
	bodies := make([][]byte, len(in.Bodies))
	for i, b := range in.Bodies {
		bodies[i] = []byte(b)
	}
	return func(i int) error {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(bodies[i%len(bodies)]))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		var out []hostPriority
		return json.NewDecoder(resp.Body).Decode(&out)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scorebench: "+format+"\n", args...)
	os.Exit(1)
}
