// Command qos is QDIME's metric analyzer: it measures a traced program's
// quality of service every period and tells the stint runtime on a QoS
// page, from which the runtime sets each period's instrumentation budget.
//
//	$ qos run --metric file-rate:out.gz --threshold 1MB/s -- sh -c 'gzip-stint -c big > out.gz'
//	$ qos show /dev/shm/stint-qos.4242.1a2b3c4d
//
// Run 'qos --help' for the metric sources and examples.
package main

import "github.com/stint-project/stint/internal/cli"

func main() { cli.Main("qos", run) }
