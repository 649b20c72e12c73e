// Command kube-scheduler is the upstream kube-scheduler built from k8s.io/kubernetes as a
// module, so the DSAN profile runs on the same build as the default one. Out-of-tree score
// plugins would be registered here with app.WithPlugin.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	os.Exit(cli.Run(command))
}
