// Command kube-apiserver is the upstream kube-apiserver built from k8s.io/kubernetes as a
// module; the e2e tier and `make cluster` run it on loopback in front of Debian's etcd.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	os.Exit(cli.Run(command))
}
