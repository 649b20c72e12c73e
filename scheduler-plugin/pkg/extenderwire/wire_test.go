package extenderwire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// goldenDir holds the files the Python tests read (tests/unit/sidecar/test_preemption_wire.py).
var goldenDir = filepath.Join("..", "..", "..", "tests", "data", "extender")

func pod(name, uid string, prio int32, cpu string, ann map[string]string, started bool) *v1.Pod {
	p := &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "wire", UID: types.UID(uid),
			Annotations: ann},
		Spec: v1.PodSpec{
			SchedulerName: "dsan-scheduler",
			Priority:      &prio,
			Containers: []v1.Container{{Name: "main", Image: "busybox",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
					v1.ResourceCPU: resource.MustParse(cpu)}}}},
		},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	if started {
		p.Spec.NodeName = "wire-0"
		p.Status.Phase = v1.PodRunning
		t := metav1.NewTime(time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC))
		p.Status.StartTime = &t
	}
	return p
}

// Victims are what the Python test's cache holds: wire-0 runs a web pod, wire-1 two batch
// pods of the same priority (DefaultReclaimer picks wire-0, ProtectingReclaimer wire-1).
func victimPods() map[string][]*v1.Pod {
	web := pod("web", "uid-web", 100, "4", map[string]string{"dsan.io/task-type": "web"}, true)
	a := pod("be-a", "uid-be-a", 100, "2", map[string]string{"dsan.io/task-type": "batch"}, true)
	b := pod("be-b", "uid-be-b", 100, "2", map[string]string{"dsan.io/task-type": "batch"}, true)
	a.Spec.NodeName, b.Spec.NodeName = "wire-1", "wire-1"
	return map[string][]*v1.Pod{"wire-0": {web}, "wire-1": {a, b}}
}

// preemptionArgs is what HTTPExtender.ProcessPreemption sends with nodeCacheCapable: the
// victims converted as convertToMetaVictims does (UIDs only), NodeNameToVictims left nil.
func preemptionArgs() *extenderv1.ExtenderPreemptionArgs {
	meta := map[string]*extenderv1.MetaVictims{}
	for node, pods := range victimPods() {
		mv := &extenderv1.MetaVictims{Pods: []*extenderv1.MetaPod{}, NumPDBViolations: 0}
		for _, p := range pods {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
		}
		meta[node] = mv
	}
	return &extenderv1.ExtenderPreemptionArgs{
		Pod:                   pod("urgent", "uid-urgent", 1000, "4", nil, false),
		NodeNameToMetaVictims: meta,
	}
}

// checkGolden compares v's json.Marshal (what kube-scheduler's send does) with the golden
// file, or rewrites it with DSAN_UPDATE_GOLDEN=1.
func checkGolden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(goldenDir, name)
	if os.Getenv("DSAN_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with DSAN_UPDATE_GOLDEN=1)", err)
	}
	if !bytes.Equal(bytes.TrimSpace(want), got) {
		t.Fatalf("%s is stale (DSAN_UPDATE_GOLDEN=1 rewrites it):\nwant %s\ngot  %s", path, want, got)
	}
}

func TestPreemptionArgsGolden(t *testing.T) {
	checkGolden(t, "preemption_args.json", preemptionArgs())
}

func TestVictimPodsGolden(t *testing.T) {
	// The victims as the sidecar's informer sees them (the apiserver's JSON of a v1.Pod).
	var pods []*v1.Pod
	for _, node := range []string{"wire-0", "wire-1"} {
		pods = append(pods, victimPods()[node]...)
	}
	checkGolden(t, "victim_pods.json", pods)
}

func TestPreemptionResultGolden(t *testing.T) {
	// The reply choosing wire-1's victims, as a Go extender would marshal it.
	checkGolden(t, "preemption_result.json", &extenderv1.ExtenderPreemptionResult{
		NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"wire-1": {
			Pods: []*extenderv1.MetaPod{{UID: "uid-be-a"}, {UID: "uid-be-b"}}}}})
}

// TestSidecarReply decodes the reply file named by DSAN_PREEMPT_REPLY (written by the Python
// test from the sidecar's answer to preemption_args.json) the way kube-scheduler does, but
// refusing unknown fields, then checks what convertToVictims and callExtenders would: every
// node is a candidate that was proposed, with at least one victim, each a UID proposed on
// that node. It prints the decoded nodes for the Python test.
func TestSidecarReply(t *testing.T) {
	path := os.Getenv("DSAN_PREEMPT_REPLY")
	if path == "" {
		t.Skip("DSAN_PREEMPT_REPLY not set (the Python wire test sets it)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var res extenderv1.ExtenderPreemptionResult
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("kube-scheduler's type refuses the reply: %v", err)
	}
	if res.NodeNameToMetaVictims == nil {
		t.Fatalf("reply without NodeNameToMetaVictims: %s", raw)
	}
	proposed := preemptionArgs().NodeNameToMetaVictims
	for node, mv := range res.NodeNameToMetaVictims {
		want, ok := proposed[node]
		if !ok {
			t.Fatalf("node %q was not a candidate", node)
		}
		if mv == nil || len(mv.Pods) == 0 {
			t.Fatalf("node %q without victims: kube-scheduler fails the preemption", node)
		}
		on := map[string]bool{}
		for _, p := range want.Pods {
			on[p.UID] = true
		}
		for _, p := range mv.Pods {
			if !on[p.UID] {
				t.Fatalf("victim %q is not on node %q", p.UID, node)
			}
		}
		t.Logf("decoded node=%s victims=%d", node, len(mv.Pods))
	}
	out, _ := json.Marshal(res)
	t.Logf("decoded %s", out)
}
