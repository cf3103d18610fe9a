// Command kube-proxy is the upstream Kubernetes Service proxy, built from the k8s.io/kubernetes
// module pinned in ../../go.mod, for the test node (e2e-tests/node/). It mirrors
// k8s.io/kubernetes/cmd/kube-proxy/proxy.go.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	command := app.NewProxyCommand()
	code := cli.Run(command)
	os.Exit(code)
}
