// Command pause is the sandbox ("pause") container of the real-node VM test:
// it holds a pod's namespaces, reaps orphans as PID 1 would, and exits on
// SIGINT or SIGTERM. It is built static and packed into an OCI archive,
// because the test node reaches no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
