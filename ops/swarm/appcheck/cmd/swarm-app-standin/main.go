// Command swarm-app-standin is the application stand-in of package
// appcheck as a process: it follows a `slipway swarm worker`'s jobs file,
// takes --stop-delay to stop a job, acknowledges (--ack) and reports what
// it runs (--report). SIGTERM stops it the way a pod's application stops.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"slipway.dev/slipway/ops/swarm/appcheck"
)

func main() {
	var s appcheck.StandIn
	flag.StringVar(&s.Jobs, "jobs", "", "the worker's jobs file")
	flag.StringVar(&s.Ack, "ack", "", "the acknowledgement file (empty: none)")
	flag.StringVar(&s.Report, "report", "", "where to report what runs")
	flag.DurationVar(&s.StopDelay, "stop-delay", 0, "how long stopping jobs takes")
	flag.DurationVar(&s.Poll, "poll", 0, "how often the jobs file is read")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
