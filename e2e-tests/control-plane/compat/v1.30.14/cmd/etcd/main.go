// Command etcd is the upstream etcd server (same go.etcd.io/etcd/server/v3
// version that k8s.io/kubernetes pins), used as the API server's storage.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
