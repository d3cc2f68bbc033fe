package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newMetricsRegistry returns the registry a `canopy start` node serves at
// /metrics: the node registers its own metrics on it (kvserver.Config.Metrics),
// beside the Go runtime's (go_*) and the process's (process_*: CPU, memory,
// open files), which only the command knows to be the node's own process.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
