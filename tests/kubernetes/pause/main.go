// Command pause holds a pod's namespaces open, as registry.k8s.io/pause does:
// no registry is reachable here, so the sandbox image is built locally.
// It sleeps until SIGINT or SIGTERM; as PID 1 of the pod it also reaps
// orphaned children so they do not linger as zombies.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
