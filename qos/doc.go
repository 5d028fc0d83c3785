// Package qos is QDIME's metric analyzer (Arafa et al., "QDIME: QoS-aware
// dynamic binary instrumentation", sections III and IV): a process beside
// the traced program that measures the program's quality of service
// (throughput, latency) every period and publishes it on the QoS page,
// from which the runtime's controller sets each period's instrumentation
// budget (Equation 1, runtime/src/budget.c). The page layout and its
// rules are in runtime/include/stint_abi.h ("The QoS page"); this package
// is the writer ([CreatePage], [Page.Publish]) and a reader ([ReadPage]).
//
// # Metric sources
//
// [ParseSource] makes a [Source] from one of:
//
//	file-rate:PATH          bytes per second written to PATH (gzip -c > PATH)
//	log-rate:PATH           lines per second appended to PATH (an access log)
//	redis://HOST:PORT       commands per second the server executed
//	redis://HOST:PORT?field=NAME   an INFO field as it is
//	redis://HOST:PORT?rate=NAME    the rate of an INFO counter field
//	prom:URL#SERIES         a series of a Prometheus text endpoint
//	prom:URL#rate(SERIES)   ... as a per-second rate
//	prom:URL#value(SERIES)  ... as it is
//	cmd:COMMAND             the first number `sh -c COMMAND` prints
//
// Rates come from two observations and the CLOCK_MONOTONIC time between
// them, not the nominal period. file-rate is also watched between
// samples and its rate is over whole writes (see [Watcher]). A
// Prometheus SERIES is NAME or NAME{label="v",...}; every series that
// has those label values is summed. Without rate() or value(), a series is a rate when the
// exposition's TYPE lines make it a counter (or a histogram's or
// summary's _count, _sum or _bucket) or, with no TYPE line, when its
// name ends in _total; otherwise it is used as it is.
//
// # Running
//
// [RunProgram] creates the page, runs a program with STINT_QOS,
// STINT_PERIOD and STINT_BUDGET set and samples until it exits; [Watch]
// serves a page for a program started elsewhere. [Analyzer] is the loop
// both use. A source that fails never harms the program: the page says
// Failing, the runtime falls back to its default budget, and the source
// is tried again next period.
//
// # Hostile input
//
// Replies from metric sources are untrusted: the RESP reader and the
// Prometheus parser return errors (never panic) and cap what they
// allocate (16 MiB bodies, 64 KiB lines, 65536-element arrays nested at
// most 8 deep). A page file read by [ReadPage] is checked for size,
// magic and version before use.
package qos
