package report

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/formats"
)

// Synthetic traces with known contents: a full run of 40 distinct events
// in 4 functions-to-be (4 KiB pages of a module without a readable file),
// and three budgeted runs that cover 10, 10 (5 new) and 20 (15 new) of
// them, with known periods, QoS rows in run 2, close rows in run 3 and
// run-end records in runs 1 and 2 only.

const (
	synthBinary  = "/opt/stint-test/demo"
	synthBuildID = "0123456789abcdef"
	monoStart    = 1_000_000_000
	periodNS     = 10_000_000
	grantNS      = 1_000_000
)

var synthModules = []formats.Module{{ID: 0, Path: synthBinary, BuildID: synthBuildID, Base: 0x555555554000, Size: 0x10000, Rewritten: true}}

func synthRun(pid int64, budget bool) formats.Run {
	r := formats.Run{Binary: synthBinary, BuildID: synthBuildID, Tool: "branch", Options: "tool=branch", PID: pid, PPID: 1, StartNS: 1795000000000000000, MonoStartNS: monoStart}
	if budget {
		r.BudgetNS, r.PeriodNS = grantNS, periodNS
	}
	return r
}

// synthEvent is distinct event i of the full run: function i/10 (page
// 0x1000*(i/10+1)).
func synthEvent(i int, t uint64) formats.Event {
	page := uint64(0x1000 * (i/10 + 1))
	return formats.Event{Kind: formats.KindJccTaken, TID: 7, Time: t, SrcModule: 0, Src: page + uint64(i%10)*16, DstModule: 0, Dst: page + 0x800}
}

func writeSynth(t testing.TB, path string, run formats.Run, rows []formats.Event) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := formats.NewWriter(f, run, synthModules, formats.WithBatchRows(16))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

type synthPeriod struct {
	used          uint64
	metric, thres float64 // QoS when thres > 0
	reserve       uint64  // > 0: the gate closed (a close row) keeping this reserve
}

// synthTraces writes full.arrow and run1..3.arrow into dir.
func synthTraces(t testing.TB, dir string) (runs []string, full string) {
	t.Helper()
	var rows []formats.Event
	for i := range 40 {
		rows = append(rows, synthEvent(i, monoStart+uint64(i)*1000))
	}
	rows = append(rows, formats.Event{Kind: formats.KindRunEnd, Time: monoStart + 50_000_000, Src: 0, Value: 50_000_000, SrcModule: formats.NoModule, DstModule: formats.NoModule})
	full = filepath.Join(dir, "full.arrow")
	writeSynth(t, full, synthRun(100, false), rows)

	specs := []struct {
		events  []int
		periods []synthPeriod
		end     uint64 // run time; 0: no run-end row
	}{
		{seq(0, 10), []synthPeriod{{used: 1_000_500}, {used: 400_000}, {used: 1_020_000}, {used: 300_000}}, 40_000_000},
		{seq(5, 15), []synthPeriod{{used: 1_003_000, metric: 900, thres: 1000}, {used: 1_000_100, metric: 1100, thres: 1000}, {used: 800_000, metric: 1050, thres: 1000}, {used: 500_000, metric: 950, thres: 1000}, {used: 200_000, metric: 990, thres: 1000}}, 52_000_000},
		{seq(15, 35), []synthPeriod{{used: 960_000, reserve: 40_000}, {used: 1_009_000}, {used: 950_000, reserve: 50_000}}, 0},
	}
	for ri, sp := range specs {
		var rows []formats.Event
		for j, i := range sp.events {
			rows = append(rows, synthEvent(i, monoStart+uint64(j)*100_000))
		}
		for pi, p := range sp.periods {
			start := monoStart + uint64(pi)*periodNS
			var rec uint16 = formats.NoModule
			rows = append(rows,
				formats.Event{Kind: formats.KindPeriod, Time: start, Src: uint64(pi), Dst: grantNS, Value: p.used, SrcModule: rec, DstModule: rec},
				formats.Event{Kind: formats.KindPeriodStats, Time: start, Src: 3, Dst: 1, Value: 2_000_000, SrcModule: rec, DstModule: rec})
			if p.reserve > 0 {
				rows = append(rows, formats.Event{Kind: formats.KindPeriodClose, Time: start, Src: formats.CloseByCharge, Dst: p.reserve, Value: grantNS - p.reserve, SrcModule: rec, DstModule: rec})
			}
			if p.thres > 0 {
				rows = append(rows, formats.Event{Kind: formats.KindPeriodQoS, Time: start, Src: math.Float64bits(p.metric), Dst: math.Float64bits(p.thres), Value: grantNS / 2, SrcModule: rec, DstModule: rec})
			}
		}
		if sp.end > 0 {
			rows = append(rows, formats.Event{Kind: formats.KindRunEnd, Time: monoStart + sp.end, Src: 0, Value: sp.end, SrcModule: formats.NoModule, DstModule: formats.NoModule})
		}
		name := filepath.Join(dir, "run"+string(rune('1'+ri))+".arrow")
		writeSynth(t, name, synthRun(int64(101+ri), true), rows)
		runs = append(runs, name)
	}
	return runs, full
}

func seq(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}
