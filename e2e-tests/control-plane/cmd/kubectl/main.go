// Command kubectl is the upstream Kubernetes client, built from the k8s.io/kubernetes module
// pinned in ../../go.mod, for the test node (e2e-tests/node/): the node test that runs the
// operator's pages (docs/install.md, docs/upgrade.md) runs their kubectl commands as written.
// It mirrors k8s.io/kubernetes/cmd/kubectl/kubectl.go.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// Import to initialize client auth plugins.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		// Pretty-print the error and exit with an error.
		util.CheckErr(err)
	}
}
