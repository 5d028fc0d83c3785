package formats

import (
	"fmt"
	"strings"
)

// Kind is the value of the trace's kind column. The values mirror the
// STINT_K_* constants of runtime/include/stint_abi.h.
type Kind uint8

// Event kinds.
const (
	KindJccTaken    Kind = 1 // conditional branch, taken
	KindJccNotTaken Kind = 2 // conditional branch, not taken (dst = fall-through)
	KindJmp         Kind = 3 // direct jmp
	KindCall        Kind = 4 // direct call
	KindRet         Kind = 5 // ret (dst = return address)
	KindIndJmp      Kind = 6 // indirect jmp
	KindIndCall     Kind = 7 // indirect call
	KindSyscall     Kind = 8 // syscall: dst = 0, value = syscall number
	KindBlock       Kind = 9 // basic block entered: src = dst = its first instruction
	// A calling context seen for the first time (rewrite --context):
	// src = call site, dst = callee, value = parent context id << 32 |
	// context id; id 0 is a thread's root (its caller unknown).
	KindContext Kind = 10
)

// MaxKind is the largest defined event Kind.
const MaxKind = KindContext

// Record kinds: rows that are not events but the runtime's own records,
// written with tid 0 and src_module = dst_module = NoModule. A budgeted
// run writes one KindPeriod and one KindPeriodStats row per period (and a
// KindPeriodQoS row when a QoS metric drives the budget, a
// KindPeriodSwitch row when the off-switch is on, a KindPeriodClose row
// when the period's gate closed), all with the period's start as time;
// KindRunEnd is written once when the process leaves through exit or a
// fatal signal. See [Period].
const (
	// src = period index (0 = first), dst = budget granted (ns),
	// value = budget used (ns, measured; may exceed dst: overshoot).
	KindPeriod Kind = 32
	// src = events recorded, dst = events suppressed (runtime calls
	// that recorded nothing), value = time instrumentation was
	// enabled during the period (ns).
	KindPeriodStats Kind = 33
	// src = metric value and dst = threshold (float64 bits),
	// value = budget computed by the controller (ns).
	KindPeriodQoS Kind = 34
	// time = end (CLOCK_MONOTONIC ns), src = exit status or
	// RunEndStatusUnknown, value = run time (ns since mono_start_ns),
	// dst = traps the int3 sites took until then (ABI 21).
	// The runtime writes it when the executable's finaliser runs (exit
	// or return from main), after the last, partial period's rows; a
	// process killed by a signal or leaving through _exit has none.
	KindRunEnd Kind = 35
	// src = sites switched back on at the period's start, dst = sites
	// switched off during it (the off-switch: patches undone while the
	// budget is spent), value = time the switching took (ns, part of
	// the KindPeriod row's used time). Written when the off-switch is on.
	KindPeriodSwitch Kind = 36
	// The period's gate closed (its budget was spent): src = how
	// (CloseByCharge, CloseAtStart, CloseAtRoll or CloseUnknown), dst = the reserve
	// the close kept (ns: what switching the sites still on off, and
	// the switching that follows a close, were expected to cost), value
	// = the budget used when it closed (ns). A gate closes once used +
	// reserve reaches the budget, so a period can end up to the reserve
	// under its budget; the switching it was kept for is in the
	// KindPeriod row's used time. Written for each period whose gate
	// closed.
	KindPeriodClose Kind = 37
	// A sampled run (rewrite --sample), once at its start: src = the
	// method (SampleRate, SampleEvery, SampleReservoir, SampleResSite),
	// dst = its parameter (ppm of the events, or N), value = the
	// interval (ns).
	KindSampleRun Kind = 38
	// A stratum's interval in a sampled run: src_module and src = the
	// stratum (a function or site; NoModule and 0: all events, for rate
	// and every), dst = the events it had in the interval, value = the
	// samples written for it; time = the interval's end, which its
	// samples' rows carry too. Each sample stands for dst/value events.
	KindSampleSet Kind = 39
	// A sampled run's end: src = ns the reader thread worked, dst = ns it
	// lived, value = samples lost (no slot free, or no room for the
	// stratum).
	KindSampleReader Kind = 40
	// A block's exact count (rewrite --tool block --counts): src_module
	// and src = the block's first instruction, dst = its executions
	// since its previous row, value = since the process began; time =
	// when the runtime read the counters (each period's end, the run's
	// end). A block has a row only when its count moved.
	KindBlockCount Kind = 41
)

// Sampling methods: a [KindSampleRun] row's src.
const (
	SampleRate      = 1 // each event with probability dst/1e6
	SampleEvery     = 2 // every dst-th event
	SampleReservoir = 3 // a reservoir per function (a call's callee, other events' site) and interval
	SampleResSite   = 4 // a reservoir per site and interval
	// SampleSites, or'ed into the method: every method's strata are
	// sites (a sampled call tool's call sites count down to their next
	// sample: rewrite --sample with --tool call).
	SampleSites = 0x10
	// SampleEntries, or'ed into the method: every method's strata are
	// the called functions (a sampled call tool's function entries count
	// down to their next sample).
	SampleEntries = 0x20
)

// KindSampledBase + an event kind marks a sample: an event the sampler
// took (rewrite --sample), with the event's fields and tid; its time is
// its interval's end (the [KindSampleSet] row of its stratum).
const KindSampledBase Kind = 96

// Sampled returns the event kind of a sample row, and whether k is one.
func (k Kind) Sampled() (Kind, bool) {
	if k > KindSampledBase && k-KindSampledBase <= MaxKind {
		return k - KindSampledBase, true
	}
	return 0, false
}

// How a period's gate closed: a [KindPeriodClose] row's src.
const (
	// CloseUnknown: a probe's charge closed the gate but had not noted
	// how when the period ended (its thread descheduled in between); dst
	// and value are 0.
	CloseUnknown  = 0
	CloseByCharge = 1 // a probe's charge brought used + reserve to the budget
	CloseAtStart  = 2 // at the period's start: no budget, or earlier periods' debt spent it
	CloseAtRoll   = 3 // at the period's end: a charge spent it but had not closed the gate yet
)

// RunEndStatusUnknown is a KindRunEnd row's src when the runtime did not
// see the exit status (exit passes it to no finaliser).
const RunEndStatusUnknown = 0xFFFFFFFF

// IsRecord reports whether k is one of the record kinds (not an event):
// a period record, the run end, or a refusal.
func (k Kind) IsRecord() bool {
	_, refused := k.Refused()
	return k >= KindPeriod && k <= KindBlockCount || refused
}

// KindRefusedBase + an event kind marks a refusal: an event that
// occurred but was not recorded because the redundancy log said it was
// (exact) or that its trace was (hash, bst, merger). The row carries the
// event's fields; each refused event appears at most once per run. The
// DIME* paper's false negatives are the refusals of events no earlier
// run recorded.
const KindRefusedBase Kind = 64

// Refused returns the event kind of a refusal row, and whether k is one.
func (k Kind) Refused() (Kind, bool) {
	if k > KindRefusedBase && k-KindRefusedBase <= MaxKind {
		return k - KindRefusedBase, true
	}
	return 0, false
}

var kindNames = [...]string{
	KindJccTaken:    "jcc-taken",
	KindJccNotTaken: "jcc-not-taken",
	KindJmp:         "jmp",
	KindCall:        "call",
	KindRet:         "ret",
	KindIndJmp:      "ind-jmp",
	KindIndCall:     "ind-call",
	KindSyscall:     "syscall",
	KindBlock:       "block",
	KindContext:     "context",
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= KindJccTaken && k <= MaxKind }

// String returns the kind's name, e.g. "jcc-taken", or "kind(N)" for an
// undefined value.
func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	switch k {
	case KindPeriod:
		return "period"
	case KindPeriodStats:
		return "period-stats"
	case KindPeriodQoS:
		return "period-qos"
	case KindRunEnd:
		return "run-end"
	case KindPeriodSwitch:
		return "period-switch"
	case KindPeriodClose:
		return "period-close"
	case KindSampleRun:
		return "sample-run"
	case KindSampleSet:
		return "sample-set"
	case KindSampleReader:
		return "sample-reader"
	case KindBlockCount:
		return "block-count"
	}
	if e, ok := k.Refused(); ok {
		return "refused-" + kindNames[e]
	}
	if e, ok := k.Sampled(); ok {
		return "sampled-" + kindNames[e]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind returns the Kind named s (as printed by [Kind.String]: an
// event kind, a record kind such as "period" or "run-end", or a refusal
// such as "refused-ret"; case does not matter, and "_" may stand for "-").
func ParseKind(s string) (Kind, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-")
	for k := KindJccTaken; k <= MaxKind; k++ {
		if kindNames[k] == n {
			return k, nil
		}
	}
	for _, k := range []Kind{KindPeriod, KindPeriodStats, KindPeriodQoS, KindRunEnd, KindPeriodSwitch, KindPeriodClose,
		KindSampleRun, KindSampleSet, KindSampleReader, KindBlockCount} {
		if k.String() == n {
			return k, nil
		}
	}
	if e, ok := strings.CutPrefix(n, "refused-"); ok {
		if k, err := ParseKind(e); err == nil && k.Valid() {
			return KindRefusedBase + k, nil
		}
	}
	if e, ok := strings.CutPrefix(n, "sampled-"); ok {
		if k, err := ParseKind(e); err == nil && k.Valid() {
			return KindSampledBase + k, nil
		}
	}
	return 0, fmt.Errorf("unknown kind %q (want one of %s; period, period-stats, period-qos, period-switch, period-close, run-end, sample-run, sample-set, sample-reader, block-count; or refused-EVENT, sampled-EVENT)", s, strings.Join(kindNames[1:], ", "))
}

// Tool is what a rewritten module traces. The values mirror the
// STINT_TOOL_* constants of runtime/include/stint_abi.h; the trace's run
// metadata carries the tool's name.
type Tool uint8

// Tools.
const (
	ToolBranch  Tool = 1 // every branch: jcc, jmp, call, ret, indirect jmp/call
	ToolCall    Tool = 2 // calls and returns
	ToolSyscall Tool = 3 // syscall instructions
	ToolBlock   Tool = 4 // basic block entries
)

var toolNames = [...]string{
	ToolBranch:  "branch",
	ToolCall:    "call",
	ToolSyscall: "syscall",
	ToolBlock:   "block",
}

// String returns the tool's name ("branch", "call", "syscall", "block"),
// or "tool(N)" for an undefined value.
func (t Tool) String() string {
	if t >= ToolBranch && t <= ToolBlock {
		return toolNames[t]
	}
	return fmt.Sprintf("tool(%d)", uint8(t))
}

// ParseTool returns the Tool named s.
func ParseTool(s string) (Tool, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	for t := ToolBranch; t <= ToolBlock; t++ {
		if toolNames[t] == n {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tool %q (want one of %s)", s, strings.Join(toolNames[1:], ", "))
}
