// Command kube-scheduler is the upstream kube-scheduler built from k8s.io/kubernetes as a
// module, so the DSAN profiles run on the same build as the default one, plus the DSANScore
// and DSANPreemption framework plugins (gRPC to the sidecar), enabled only by profiles that
// name them.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/dsanpreemption"
	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/dsanscore"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(dsanscore.Name, dsanscore.New),
		app.WithPlugin(dsanpreemption.Name, dsanpreemption.New))
	os.Exit(cli.Run(command))
}
