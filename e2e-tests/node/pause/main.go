// Command pause is the process that keeps a pod's sandbox (its network namespace) alive on
// the test node: it does nothing but wait, reaps any child it inherits (it is PID 1 of the
// pod), and exits 0 on SIGINT or SIGTERM, as the Kubernetes pause container does. Built
// static (CGO_ENABLED=0) into the offline pause image by e2e-tests/node/build.sh.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("nsb-pause")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "shutting down, got signal: %v\n", sig)
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
