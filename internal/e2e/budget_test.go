package e2e

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// period is one period as the runtime recorded it.
type period struct {
	idx, start, granted, used, recorded, suppressed, enabled uint64
	next                                                     uint64 // start of the next period (0 for the last)
}

// periods pairs the KindPeriod and KindPeriodStats rows of a trace.
func periods(t *testing.T, tr *formats.Trace) []period {
	t.Helper()
	var ps []period
	for _, e := range tr.Events {
		switch e.Kind {
		case formats.KindPeriod:
			ps = append(ps, period{idx: e.Src, start: e.Time, granted: e.Dst, used: e.Value})
		case formats.KindPeriodStats:
			if len(ps) == 0 || ps[len(ps)-1].start != e.Time {
				t.Fatalf("period-stats row at %d without its period row", e.Time)
			}
			p := &ps[len(ps)-1]
			p.recorded, p.suppressed, p.enabled = e.Src, e.Dst, e.Value
		}
	}
	for i := range ps {
		if i+1 < len(ps) {
			ps[i].next = ps[i+1].start
		}
	}
	return ps
}

// checkCloses checks the period-close rows of a trace against its
// periods: a close row for each period whose gate closed before its end
// and for none other (the last period, cut short by the exit, may have
// one or not); a known way of closing; a close by a charge or at the
// roll only once used + reserve reached the budget, and with no more
// used then than in the whole period (both allow 1%: the runtime
// compares ticks and writes ns with a calibration refined at each
// roll). Returns how many closes kept a reserve.
func checkCloses(t *testing.T, events []formats.Event) (closes, reserved int) {
	t.Helper()
	ps := formats.Periods(events)
	for i, p := range ps {
		last := i+1 == len(ps)
		early := !last && p.HasStats && p.Enabled < ps[i+1].Start-p.Start
		if !p.HasClose {
			if early {
				t.Errorf("period %d: gate closed after %d ns, but no period-close row", p.Index, p.Enabled)
			}
			continue
		}
		closes++
		if p.CloseReserve > 0 {
			reserved++
		}
		if !last && p.HasStats && !early {
			t.Errorf("period %d: a period-close row (%+v), but the gate was open to the end", p.Index, p)
		}
		switch p.ClosedHow {
		case formats.CloseByCharge, formats.CloseAtRoll:
			if reach := p.CloseUsed + p.CloseReserve; reach < p.Granted-p.Granted/100 {
				t.Errorf("period %d: closed with %d ns used and %d in reserve, short of the budget %d", p.Index, p.CloseUsed, p.CloseReserve, p.Granted)
			}
			if p.CloseUsed > p.Used+p.Used/100 {
				t.Errorf("period %d: %d ns used at the close, %d in the whole period", p.Index, p.CloseUsed, p.Used)
			}
		case formats.CloseAtStart:
		case formats.CloseUnknown:
			// a charge descheduled between closing the gate and noting
			// how, when the period rolled (TestCloseNoteAcrossRoll)
			if p.CloseUsed != 0 || p.CloseReserve != 0 {
				t.Errorf("period %d: closed how unknown, yet %d ns used and %d in reserve", p.Index, p.CloseUsed, p.CloseReserve)
			}
		default:
			t.Errorf("period %d: closed how %d", p.Index, p.ClosedHow)
		}
	}
	return closes, reserved
}

// eventsWithin counts the events (not the runtime's rows) written after
// from and before to.
func eventsWithin(events []formats.Event, from, to uint64) int {
	n := 0
	for _, e := range events {
		if !e.Kind.IsRecord() && e.Time > from && e.Time < to {
			n++
		}
	}
	return n
}

func buildSpin(t *testing.T) string {
	t.Helper()
	return fixtures.Build(t, "spin", fixtures.Variant{Opt: fixtures.O2, PIE: true})
}

// spinNative builds the spin fixture and returns it with the stdout of a
// native run on args.
func spinNative(t *testing.T, args []string) (bin string, stdout []byte) {
	t.Helper()
	bin = buildSpin(t)
	out, _, _, err := fixtures.Run(bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bin, out
}

// spinBudgetTrace runs "spin 400" rewritten with --every (a row per
// event, whose times place each in its period), a 10% budget and 20 ms
// periods (env added to the trace environment), checks that its output
// equals native, and returns its one trace.
func spinBudgetTrace(t *testing.T, env ...string) *formats.Trace {
	t.Helper()
	return spinTrace(t, []string{"400"}, rewrite.Options{Every: true, Rows: true, Budget: "10%", Period: "20ms"}, env...)
}

// spinTrace runs spin on args rewritten with opts (env added to the
// trace environment), checks that its output equals native, and returns
// its one trace.
func spinTrace(t *testing.T, args []string, opts rewrite.Options, env ...string) *formats.Trace {
	t.Helper()
	bin, nOut := spinNative(t, args)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, opts)
	traces := filepath.Join(dir, "traces")
	rOut, rErr, code, err := fixtures.Run(out, args, append(traceEnv(traces), env...))
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !bytes.Equal(nOut, rOut) {
		t.Fatalf("rewritten run: exit %d, stdout %q (native %q), stderr %q", code, rOut, nOut, rErr)
	}
	trs := readTraces(t, traces)
	if len(trs) != 1 {
		t.Fatalf("%d traces, want 1", len(trs))
	}
	return trs[0]
}

// TestBudgetAccounting: a CPU-bound program rewritten with --every (each
// occurrence is an event, so the budget is always the limit) and a 10%
// budget. The runtime's own period records must be consistent: periods
// numbered in order with the configured grant, the gate closed (enabled
// time shorter than the period) whenever the grant was used up, no event
// written while the gate was closed, and the recorded counts adding up
// to the events in the file.
func TestBudgetAccounting(t *testing.T) {
	tr := spinBudgetTrace(t)
	if tr.Run.BudgetNS != 2000000 || tr.Run.PeriodNS != 20000000 {
		t.Fatalf("run metadata: budget %d ns, period %d ns; want 2000000 and 20000000", tr.Run.BudgetNS, tr.Run.PeriodNS)
	}
	ps := periods(t, tr)
	if len(ps) < 3 {
		t.Fatalf("%d periods recorded; the run is too short to test the budget", len(ps))
	}
	var events []formats.Event
	for _, e := range tr.Events {
		if !e.Kind.IsRecord() {
			events = append(events, e)
		}
	}
	var recorded uint64
	spent := 0
	for i, p := range ps {
		if p.idx != uint64(i) {
			t.Errorf("period %d has index %d", i, p.idx)
		}
		if p.granted != tr.Run.BudgetNS {
			t.Errorf("period %d: granted %d ns, want %d", i, p.granted, tr.Run.BudgetNS)
		}
		if i > 0 && p.start <= ps[i-1].start {
			t.Errorf("period %d starts at %d, not after period %d (%d)", i, p.start, i-1, ps[i-1].start)
		}
		recorded += p.recorded
		if p.next == 0 {
			continue
		}
		length := p.next - p.start
		if p.used >= p.granted {
			spent++
			if p.enabled >= length {
				t.Errorf("period %d: budget spent (used %d of %d ns) but enabled for %d of %d ns", i, p.used, p.granted, p.enabled, length)
			}
			// Nothing may be written while the gate is closed (allow
			// the TSC-to-clock conversion 1% of the period): with
			// --every no site switches itself off, so none records on
			// its way off either (TestLateRecord).
			if late := eventsWithin(events, p.start+p.enabled+length/100, p.next); late > 0 {
				t.Errorf("period %d: %d events written after the gate closed", i, late)
			}
		}
		n := 0
		for _, e := range events {
			if e.Time >= p.start && e.Time < p.next {
				n++
			}
		}
		// An event written while the period thread rolls the period
		// over may count in the neighbouring period.
		if d := int64(n) - int64(p.recorded); d < -2 || d > 2 {
			t.Errorf("period %d: records %d events recorded, the file has %d in it", i, p.recorded, n)
		}
	}
	if spent < len(ps)/2 {
		t.Errorf("the budget was used up in only %d of %d periods of a CPU-bound --every run", spent, len(ps))
	}
	if recorded > uint64(len(events)) {
		t.Errorf("periods record %d events, the file has %d", recorded, len(events))
	}
	// --every: no off-switch, so no reserve, and a gate closes when the
	// budget is spent, not before
	closes, reserved := checkCloses(t, tr.Events)
	if closes < spent || reserved > 0 {
		t.Errorf("%d period-close rows (%d with a reserve) for %d spent periods", closes, reserved, spent)
	}
	t.Logf("%d periods, budget used up in %d, %d events", len(ps), spent, len(events))
}

// TestChargeAcrossRoll: a probe call whose charge spends the budget
// closes the gate for the period it was made in, even when the period
// rolls over before it gets there (its thread descheduled between adding
// the charge and closing: STINT_TEST_CHARGE_STALL makes the first such
// call sleep there longer than a period). The roll must record that
// period closed when the charge ended, and the late close must not shut
// the next period's gate from its start with nothing spent. Every period must be closed exactly
// when it is spent (--every: no switching reserve closes a gate early),
// and the output must equal native.
func TestChargeAcrossRoll(t *testing.T) {
	ps := periods(t, spinBudgetTrace(t, runtime.TestChargeStallEnv+"=25ms"))
	spent := 0
	for i, p := range ps {
		if p.next == 0 {
			continue
		}
		length := p.next - p.start
		switch {
		case p.used >= p.granted && p.enabled >= length:
			t.Errorf("period %d: spent (used %d of %d ns) but enabled for %d of %d ns", i, p.used, p.granted, p.enabled, length)
		case p.used < p.granted*99/100 && p.enabled < length*99/100:
			// (the record converts ticks to ns with the period's
			// calibration, the gate compared ticks: allow 1%)
			t.Errorf("period %d: closed after %d of %d ns with %d of %d ns used", i, p.enabled, length, p.used, p.granted)
		}
		if p.used >= p.granted {
			spent++
		}
	}
	if spent < 2 {
		t.Errorf("the budget was spent in %d of %d periods: the stall was not exercised", spent, len(ps))
	}
	t.Logf("%d periods, %d spent", len(ps), spent)
}

// TestCloseNoteAcrossRoll: a charge that closes a period's gate and is
// descheduled before it notes how (STINT_TEST_CHARGE_STALL=note:25ms:
// the first close after period 0 sleeps there, longer than the rest of
// its 20 ms period) leaves a close row that says "unknown", not an
// earlier period's note (the last note held period 0's used time and
// reserve, as if this close had them). Its enabled time ends where the budget was spent, not at an
// earlier period's close. And the charge, when it wakes in the next
// period, leaves that period's gates alone: it used to close them, so
// the next period recorded nothing after it and said its gate was open.
func TestCloseNoteAcrossRoll(t *testing.T) {
	tr := spinBudgetTrace(t, runtime.TestChargeStallEnv+"=note:25ms")
	ps := formats.Periods(tr.Events)
	checkCloses(t, tr.Events)
	at := -1
	for i, p := range ps {
		if p.HasClose && p.ClosedHow == formats.CloseUnknown {
			if at >= 0 {
				t.Errorf("periods %d and %d: closed how unknown; only the stalled charge's should be", ps[at].Index, p.Index)
			}
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("no period closed how unknown: the stall was not exercised, or the roll wrote a stale note (%d periods)", len(ps))
	}
	p := ps[at]
	if at+2 >= len(ps) {
		t.Fatalf("the stalled close was in period %d of %d: too late to check the next one", p.Index, len(ps))
	}
	if length := ps[at+1].Start - p.Start; !p.HasStats || p.Enabled == 0 || p.Enabled >= length {
		t.Errorf("period %d: enabled %d ns of %d: want its gate closed where the budget was spent", p.Index, p.Enabled, length)
	}
	// the next period, whole, with the charge awake for over half of it:
	// spin spends its budget in a few ms, and its gate closes by a charge
	if n := ps[at+1]; n.Used < n.Granted-n.Granted/100 || !n.HasClose {
		t.Errorf("period %d (after the stalled close): used %d ns of %d, close row %v: the late charge closed its gates", n.Index, n.Used, n.Granted, n.HasClose)
	}
	t.Logf("%d periods, period %d closed how unknown (enabled %d ns)", len(ps), p.Index, p.Enabled)
}

// TestSwitchOnWithinBudget: a period's switch-on batch that costs far
// more than its estimate (STINT_TEST_SWITCH_STALL: 2 ms after each site,
// against an estimate of a few hundred ns; on this VM a descheduled
// thread, or membarriers waiting on busy cores, can do that) stops at
// half of what the period has left, so that switching its sites off
// again still fits: no period may go more than 1 ms over its budget
// (spin rewritten with a 10% budget of 100 ms periods). Without the
// stop, the first period's batch switched a dozen sites on and the
// period used 26 ms of its 10.
func TestSwitchOnWithinBudget(t *testing.T) {
	tr := spinTrace(t, []string{"20000"}, rewrite.Options{Budget: "10%", Period: "100ms"}, runtime.TestSwitchStallEnv+"=2ms")
	ps := periods(t, tr)
	var ons, worst uint64
	for _, e := range tr.Events {
		if e.Kind == formats.KindPeriodSwitch && e.Src > 0 {
			ons += e.Src
		}
	}
	for i, p := range ps {
		if p.used > p.granted && p.used-p.granted > worst {
			worst = p.used - p.granted
		}
		if p.used > p.granted+1000000 {
			t.Errorf("period %d: used %d ns of %d", i, p.used, p.granted)
		}
	}
	if len(ps) < 3 || ons == 0 {
		t.Errorf("%d periods, %d sites switched on: the stall was not exercised", len(ps), ons)
	}
	t.Logf("%d periods, %d sites switched on, worst overshoot %d ns", len(ps), ons, worst)
}

// TestBudgetEnvironment: STINT_BUDGET=none turns a rewritten budget off
// (no period records); a bad STINT_BUDGET, STINT_PERIOD or STINT_WINDOW
// is reported on stderr and the rewrite's own value holds (a typo must
// not lift the budget: the old runtime ran without one); a good
// override replaces it.
func TestBudgetEnvironment(t *testing.T) {
	args := []string{"5"}
	bin, nOut := spinNative(t, args)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Budget: "10%", Period: "10ms"})
	for _, tc := range []struct {
		name, budget, period, window string
		wantErr                      string
		wantBudget                   uint64 // ns; 0: no budget, no period records
	}{
		{"none", "none", "", "", "", 0},
		{"bad", "ten percent", "", "", "bad budget (STINT_BUDGET)", 1e6},
		{"zero", "0%", "", "", "bad budget (STINT_BUDGET)", 1e6},
		{"bad-period", "", "soon", "", "bad period (STINT_PERIOD)", 1e6},
		{"bad-window", "", "", "wide", "bad window (STINT_WINDOW)", 1e6},
		{"good", "20%", "", "", "", 2e6},
		{"good-period", "", "20ms", "", "", 2e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			traces := filepath.Join(t.TempDir(), "traces")
			env := traceEnv(traces)
			if tc.budget != "" {
				env = append(env, "STINT_BUDGET="+tc.budget)
			}
			if tc.period != "" {
				env = append(env, "STINT_PERIOD="+tc.period)
			}
			if tc.window != "" {
				env = append(env, "STINT_WINDOW="+tc.window)
			}
			rOut, rErr, code, err := fixtures.Run(out, args, env)
			if err != nil {
				t.Fatal(err)
			}
			if code != 0 || !bytes.Equal(rOut, nOut) {
				t.Fatalf("exit %d, stdout %q, want %q", code, rOut, nOut)
			}
			if tc.wantErr == "" && len(rErr) != 0 || tc.wantErr != "" && !strings.Contains(string(rErr), tc.wantErr) {
				t.Errorf("stderr %q, want %q", rErr, tc.wantErr)
			}
			trs := readTraces(t, traces)
			if len(trs) == 0 {
				t.Fatal("no trace")
			}
			for _, tr := range trs {
				ps := periods(t, tr)
				if tr.Run.BudgetNS != tc.wantBudget {
					t.Errorf("budget %d ns, want %d", tr.Run.BudgetNS, tc.wantBudget)
				}
				if tc.wantBudget == 0 && len(ps) != 0 || tc.wantBudget != 0 && len(ps) == 0 {
					t.Errorf("%d period records with a budget of %d ns", len(ps), tc.wantBudget)
				}
				for _, p := range ps {
					if p.granted != tc.wantBudget {
						t.Errorf("period %d granted %d ns, want %d", p.idx, p.granted, tc.wantBudget)
						break
					}
				}
			}
		})
	}
}

// TestBudgetForkedChild: the child of a fork has its own trace with its
// own periods (the parent's period thread does not survive fork).
func TestBudgetForkedChild(t *testing.T) {
	bin := buildSpin(t)
	args := []string{"400", "fork"}
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Every: true, Rows: true, Budget: "10%", Period: "20ms"})
	traces := filepath.Join(dir, "traces")
	rOut, rErr, code, err := fixtures.Run(out, args, traceEnv(traces))
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !strings.Contains(string(rOut), "child ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, rOut, rErr)
	}
	trs := readTraces(t, traces)
	if len(trs) != 2 {
		t.Fatalf("%d traces, want 2 (parent and child)", len(trs))
	}
	for _, tr := range trs {
		ps := periods(t, tr)
		if len(ps) < 2 {
			t.Errorf("pid %d: %d periods", tr.Run.PID, len(ps))
		}
		if len(ps) > 0 && ps[0].idx != 0 {
			t.Errorf("pid %d: first period has index %d", tr.Run.PID, ps[0].idx)
		}
	}
}

// TestTaskFdForkedChild: the runtime counts the program's threads (the
// off-switch's self mode: may one thread write code no other can run?)
// by an fstat of a descriptor it keeps open on /proc/<pid>/task. A forked
// child inherits its parent's, where its own threads are not counted: it
// must close that one and count its own. spin's "fork-fds" mode has
// parent and child look through their descriptors after spinning under a
// budget; stdout must equal native's ("fds ok"), and stderr must show
// that each held one of its own, or the check checked nothing.
func TestTaskFdForkedChild(t *testing.T) {
	bin := buildSpin(t)
	args := []string{"400", "fork-fds"}
	want, _, _, err := fixtures.Run(bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Budget: "10%", Period: "20ms"})
	got, stderr, code, err := fixtures.Run(out, args, traceEnv(filepath.Join(dir, "traces")))
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !bytes.Equal(got, want) {
		t.Fatalf("exit %d, stdout %q, want %q (stderr %q)", code, got, want, stderr)
	}
	for _, who := range []string{"parent", "child"} {
		if !strings.Contains(string(stderr), who+" own task fd: yes") {
			t.Errorf("the %s held no descriptor on its own task directory (stderr %q): nothing was checked", who, stderr)
		}
	}
}

// TestRunEnd: a process that leaves through exit writes one run-end row
// (its run time, the status unknown) after the rows of its last, partial
// period, with or without a budget, and so does a forked child in its
// own trace. The run time lies within the wall time the test measured.
func TestRunEnd(t *testing.T) {
	bin := buildSpin(t)
	for _, tc := range []struct {
		name   string
		opts   rewrite.Options
		args   []string
		traces int
	}{
		{"no budget", rewrite.Options{}, []string{"50"}, 1},
		{"budget", rewrite.Options{Budget: "10%", Period: "10ms"}, []string{"400"}, 1},
		{"fork", rewrite.Options{Budget: "10%", Period: "10ms"}, []string{"400", "fork"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out, _ := rewritten(t, bin, dir, tc.opts)
			traces := filepath.Join(dir, "traces")
			began := time.Now()
			_, rErr, code, err := fixtures.Run(out, tc.args, traceEnv(traces))
			wall := time.Since(began)
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v, stderr %q", code, err, rErr)
			}
			trs := readTraces(t, traces)
			if len(trs) != tc.traces {
				t.Fatalf("%d traces, want %d", len(trs), tc.traces)
			}
			for _, tr := range trs {
				var ends []formats.Event
				var beforeEnd []formats.Kind // kinds of the period rows right before the run end
				for i, e := range tr.Events {
					if e.Kind == formats.KindRunEnd {
						ends = append(ends, e)
						j := i
						for j > 0 && tr.Events[j-1].Kind.IsRecord() && tr.Events[j-1].Kind != formats.KindRunEnd &&
							tr.Events[j-1].Time == tr.Events[i-1].Time {
							j--
						}
						beforeEnd = nil
						for _, b := range tr.Events[j:i] {
							beforeEnd = append(beforeEnd, b.Kind)
						}
					}
				}
				if len(ends) != 1 {
					t.Fatalf("pid %d: %d run-end rows, want 1", tr.Run.PID, len(ends))
				}
				e := ends[0]
				if e.Src != formats.RunEndStatusUnknown {
					t.Errorf("run-end status %#x, want unknown", e.Src)
				}
				if e.Value == 0 || e.Value > uint64(wall) || e.Time != tr.Run.MonoStartNS+e.Value {
					t.Errorf("run-end: time %d, run time %d ns (start %d, wall %v)", e.Time, e.Value, tr.Run.MonoStartNS, wall)
				}
				if tc.opts.Budget != "" {
					// The exit path writes the last, partial period
					// right before the run end (the fixture has one
					// thread at exit, and the period thread is locked
					// out meanwhile).
					// (and its period-switch row: the off-switch is on)
					// (and a period-close row if its gate closed)
					want := []formats.Kind{formats.KindPeriod, formats.KindPeriodStats, formats.KindPeriodSwitch}
					if len(beforeEnd) == len(want)+1 && beforeEnd[len(want)] == formats.KindPeriodClose {
						beforeEnd = beforeEnd[:len(want)]
					}
					if !slices.Equal(beforeEnd, want) {
						t.Errorf("rows before the run end: %v, want the partial period's period and period-stats rows", beforeEnd)
					}
				}
			}
		})
	}
}

// TestQuietWindows: windows back off in periods that record nothing
// (runtime/src/budget.c, sw_quiet_skip). spin's "watch" mode (hot() a
// million times a round, its jcc listed with one outcome still to come)
// rewritten with a 10% budget of 20 ms periods records everything it
// will in its first rounds and then runs quiet for some 20 periods.
// With STINT_QUIET=0 every period but the last switches the listed
// sites on (a window), except one that the runtime finds too costly to
// switch in (budget_gates_start: the switching estimate or a debt; a
// loaded CI machine made period 11 of 11 skip once, at 04633fa): at
// most one in eight periods, where the back-off would skip half of
// them; by default every period that follows one that recorded has its
// window, and at least half of the others have none.
// window is a period, the sites it switched on and its switching time.
type window struct {
	period
	ons, swNS uint64
}

// spinWindows runs the spin fixture ("150 watch", 10% of 20 ms) with env
// and returns its periods with the sites each switched on, the last one
// (cut short by the exit) left out.
func spinWindows(t *testing.T, env ...string) []window {
	t.Helper()
	tr := spinTrace(t, []string{"150", "watch"}, rewrite.Options{Budget: "10%", Period: "20ms"}, env...)
	sw := map[uint64]formats.Event{}
	for _, e := range tr.Events {
		if e.Kind == formats.KindPeriodSwitch {
			sw[e.Time] = e
		}
	}
	var ws []window
	for _, p := range periods(t, tr) {
		ws = append(ws, window{p, sw[p.start].Src, sw[p.start].Value})
	}
	if len(ws) < 8 {
		t.Fatalf("%d periods: too few to see windows back off", len(ws))
	}
	return ws[:len(ws)-1]
}

func TestQuietWindows(t *testing.T) {
	all := spinWindows(t, "STINT_QUIET=0")
	var none []int
	for i, w := range all {
		if i > 0 && w.ons == 0 {
			none = append(none, i)
		}
	}
	if len(none) > max(1, (len(all)-1)/8) {
		t.Errorf("STINT_QUIET=0: periods %v of %d switched no site on", none, len(all)-1)
	} else if len(none) > 0 {
		t.Logf("STINT_QUIET=0: periods %v of %d switched no site on (too costly, at most one in eight)", none, len(all)-1)
	}

	ws := spinWindows(t)
	skipped, quiet := 0, 0
	for i := 1; i < len(ws); i++ {
		if ws[i-1].recorded > 0 && ws[i].ons == 0 {
			t.Errorf("period %d follows one that recorded %d events but switched no site on", i, ws[i-1].recorded)
		}
		if ws[i-1].recorded == 0 {
			quiet++
			if ws[i].ons == 0 {
				skipped++
			}
		}
	}
	if quiet < 4 || 2*skipped < quiet {
		t.Errorf("%d of %d periods after a quiet one had no window, want at least half", skipped, quiet)
	}
	t.Logf("%d periods, %d after a quiet one, %d of those without a window", len(ws), quiet, skipped)
}

// TestSlowBatchWindows: one small switching batch that takes 3 ms of
// the runtime thread's time in a 2 ms budget (STINT_TEST_BATCH_STALL; a
// loaded VM made one take 1.4 ms in CI) must not keep windows shut for
// the rest of the run. It is charged (its debt may close a period or
// two), but its cost must not become the planned cost of every batch: a
// fixed part taken at once, twice over, left no room for any window,
// and with none there were few batches to bring it down again.
func TestSlowBatchWindows(t *testing.T) {
	ws := spinWindows(t, "STINT_QUIET=0", "STINT_TEST_BATCH_STALL=3ms")
	var pattern []byte
	run, longest, stalled := 0, 0, 0
	for i, w := range ws {
		if w.swNS > ws[stalled].swNS {
			stalled = i
		}
		if w.ons > 0 {
			pattern = append(pattern, '+')
			run = 0
			continue
		}
		pattern = append(pattern, '.')
		if i > 0 {
			run++
			longest = max(longest, run)
		}
	}
	var used []uint64
	for _, w := range ws[:min(len(ws), 8)] {
		used = append(used, w.used/1000)
	}
	t.Logf("windows by period (+ switched sites on): %s; the most switching, %d us, in period %d; used (us) %v", pattern, ws[stalled].swNS/1000, stalled, used)
	if ws[stalled].swNS < 3000000 {
		t.Fatalf("no period switched for 3 ms or more: the hook made no batch slow (%s)", pattern)
	}
	if longest > 3 {
		t.Errorf("%d periods in a row switched no site on after one slow batch: %s", longest, pattern)
	}
}

// TestOtherVersionState: a module whose runtime finds the process-wide
// state made by a runtime of another ABI version (a module rewritten by
// another stint) must not join it, whose layout differs: it runs
// untraced and says why. testdata/oldstate.c makes such a state (as ABI
// 10 would) and then dlopens a rewritten libz.
func TestOtherVersionState(t *testing.T) {
	const libz = "/usr/lib/x86_64-linux-gnu/libz.so.1"
	dir := t.TempDir()
	prog := filepath.Join(dir, "oldstate")
	if out, err := exec.Command("gcc", "-O2", "-o", prog, filepath.Join("testdata", "oldstate.c"), "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	nOut, _, _, err := fixtures.Run(prog, []string{libz}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lib, _ := rewritten(t, libz, dir, rewrite.Options{Budget: "10%", Period: "20ms"})
	traces := filepath.Join(dir, "traces")
	rOut, rErr, code, err := fixtures.Run(prog, []string{lib}, traceEnv(traces))
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !bytes.Equal(rOut, nOut) || !bytes.HasPrefix(nOut, []byte("zlib ")) {
		t.Fatalf("exit %d, stdout %q (native %q), stderr %q", code, rOut, nOut, rErr)
	}
	if !strings.Contains(string(rErr), "process state made by another stint version") || !strings.Contains(string(rErr), "running untraced") {
		t.Errorf("stderr %q does not say why the run is untraced", rErr)
	}
	if names, _ := filepath.Glob(filepath.Join(traces, "*.arrow")); len(names) > 0 {
		t.Errorf("traces written into another version's state: %v", names)
	}
}

// TestBudgetCompactTrace: a compact complete trace under a budget. Where
// a period's gate closed, probes stopped, so the next probe of each
// thread marks a gap (LOST 0, then a SYNC) and the decoder carries on
// from there: the trace decodes whole, its gaps counted, with the events
// of the open windows.
func TestBudgetCompactTrace(t *testing.T) {
	bin, nOut := spinNative(t, []string{"400"})
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Every: true, Budget: "10%", Period: "20ms"})
	traces := filepath.Join(dir, "traces")
	rOut, rErr, code, err := fixtures.Run(out, []string{"400"}, traceEnv(traces))
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !bytes.Equal(nOut, rOut) {
		t.Fatalf("rewritten run: exit %d, stdout %q (native %q), stderr %q", code, rOut, nOut, rErr)
	}
	name, n, st, err := countCompact(t, traces)
	if err != nil {
		t.Fatalf("decode: %v (%+v)", err, st)
	}
	tr, err := formats.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	ps := formats.Periods(tr.Events)
	closed := 0
	for _, p := range ps {
		if p.HasClose {
			closed++
		}
	}
	if closed == 0 || st.Lost == 0 || n == 0 {
		t.Errorf("%d of %d periods closed their gate, %d gaps decoded, %d events: want gates closed, gaps and events", closed, len(ps), st.Lost, n)
	}
	t.Logf("%d periods (%d closed), %d events, %d gaps, %d bytes of packets", len(ps), closed, n, st.Lost, st.Bytes)
}
