// Command kube-scheduler is the upstream kube-scheduler built from k8s.io/kubernetes as a
// module, so the DSAN profiles run on the same build as the default one, plus the DSANScore
// framework plugin (gRPC to the sidecar), enabled only by profiles that name it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/dsan-scheduler/dsan/scheduler-plugin/pkg/dsanscore"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(dsanscore.Name, dsanscore.New))
	os.Exit(cli.Run(command))
}
