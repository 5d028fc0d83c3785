package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stint-project/stint/formats"
)

// files writes the test traces into a temporary directory.
func files(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	run := formats.Run{Binary: "/usr/bin/demo", BuildID: "beef", Tool: "branch", Options: "tool=branch every=0",
		PID: 10, PPID: 1, StartNS: 1795000000000000000, MonoStartNS: 5000000000}
	mods := []formats.Module{
		{ID: 0, Path: "/usr/bin/demo", BuildID: "beef", Base: 0x555555554000, Size: 0x3000, Rewritten: true},
		{ID: 1, Path: "/lib/libc.so.6", Base: 0x7ffff7d80000, Size: 0x1d5000},
	}
	events := []formats.Event{
		{Kind: formats.KindCall, TID: 10, Time: 5000001000, SrcModule: 0, Src: 0x1130, DstModule: 1, Dst: 0x28000},
		{Kind: formats.KindSyscall, TID: 10, Time: 5000002000, SrcModule: 1, Src: 0x28010, DstModule: 0, Value: 1},
		{Kind: formats.KindRet, TID: 11, Time: 5000003000, SrcModule: 1, Src: 0x28020, DstModule: 0, Dst: 0x1135},
		{Kind: formats.KindIndJmp, TID: 10, Time: 5000004000, SrcModule: 0, Src: 0x1200, DstModule: formats.NoModule, Dst: 0x7fffff000000},
		{Kind: formats.KindSyscall, TID: 11, Time: 5000005000, SrcModule: 1, Src: 0x28010, DstModule: 0, Value: 60},
	}
	writeRun := func(run formats.Run, rows []formats.Event, opts ...formats.Option) []byte {
		var buf bytes.Buffer
		w, err := formats.NewWriter(&buf, run, mods, opts...)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(rows...)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	write := func(rows []formats.Event, opts ...formats.Option) []byte { return writeRun(run, rows, opts...) }
	good := write(events, formats.WithBatchRows(2))
	rec := func(k formats.Kind, t, src, dst, v uint64) formats.Event {
		return formats.Event{Kind: k, Time: t, SrcModule: formats.NoModule, DstModule: formats.NoModule, Src: src, Dst: dst, Value: v}
	}
	// a budgeted run: period 0 closed by a charge, 2 us over; period 1 open
	periods := write([]formats.Event{events[0],
		rec(formats.KindPeriod, 5000000000, 0, 10000000, 10002000),
		rec(formats.KindPeriodClose, 5000000000, formats.CloseByCharge, 1000000, 8500000),
		rec(formats.KindPeriod, 5100000000, 1, 10000000, 3000000)})
	// a period whose gate a charge closed without noting how before the
	// roll (CloseUnknown: no used or reserve to report)
	unknown := write([]formats.Event{events[0],
		rec(formats.KindPeriod, 5000000000, 0, 10000000, 9900000),
		rec(formats.KindPeriodClose, 5000000000, formats.CloseUnknown, 0, 0)})
	// a sampled run (reservoir per function): 1000 calls of 0x2000 in
	// one interval, 5 samples (3 from 0x1130, 2 from 0x1150)
	smp := func(src uint64) formats.Event {
		return formats.Event{Kind: formats.KindSampledBase + formats.KindCall, TID: 10, Time: 6000000000, Src: src, Dst: 0x2000}
	}
	srun := run
	srun.Tool, srun.Options = "call", "tool=call every=1 sample=reservoir:20%"
	sampled := writeRun(srun, []formats.Event{
		rec(formats.KindSampleRun, 5000000000, formats.SampleReservoir, 200000, 1000000000),
		smp(0x1130), smp(0x1130), smp(0x1130), smp(0x1150), smp(0x1150),
		{Kind: formats.KindSampleSet, Time: 6000000000, SrcModule: 0, Src: 0x2000, DstModule: formats.NoModule, Dst: 1000, Value: 5},
		rec(formats.KindSampleReader, 6000000000, 2000000, 1000000000, 0)})
	var other bytes.Buffer
	ow := ipc.NewWriter(&other, ipc.WithSchema(arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int32}}, nil)))
	ow.Close()
	m := map[string][]byte{
		"good.arrow":    good,
		"periods.arrow": periods,
		"sampled.arrow": sampled,
		"unknown.arrow": unknown,
		"cut.arrow":     good[:len(good)-20],
		"zeros.arrow":   append(append([]byte(nil), good[:len(good)-8]...), make([]byte, 100)...),
		"text.arrow":    []byte("this is not arrow\n"),
		"other.arrow":   other.Bytes(),
	}
	names := map[string]string{}
	for n, b := range m {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		names[n] = p
	}
	names["missing.arrow"] = filepath.Join(dir, "missing.arrow")
	return names
}

func TestRun(t *testing.T) {
	f := files(t)
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		out     []string // substrings of stdout
		notOut  []string
		errText string // substring of the error
	}{
		{name: "no-args", args: nil, code: 2, errText: "no command"},
		{name: "help", args: []string{"--help"}, code: 0, out: []string{"trace cat", "trace stats", "Exit status"}},
		{name: "help-cat", args: []string{"help", "cat"}, code: 0, out: []string{"Usage: trace cat", "--limit"}},
		{name: "cat-help", args: []string{"cat", "--help"}, code: 0, out: []string{"Usage: trace cat"}},
		{name: "stats-help", args: []string{"stats", "-h"}, code: 0, out: []string{"Usage: trace stats"}},
		{name: "help-bogus", args: []string{"help", "bogus"}, code: 2, errText: "unknown command"},
		{name: "unknown", args: []string{"frob"}, code: 2, errText: `unknown command "frob"`},
		{name: "cat-no-file", args: []string{"cat"}, code: 2, errText: "want exactly one FILE"},
		{name: "cat-bad-flag", args: []string{"cat", "--bogus", f["good.arrow"]}, code: 2, errText: "unknown flag: --bogus"},
		{name: "cat-bad-kind", args: []string{"cat", "--kind", "jump", f["good.arrow"]}, code: 2, errText: `unknown kind "jump"`},
		{name: "cat-neg-limit", args: []string{"cat", "--limit=-1", f["good.arrow"]}, code: 2, errText: "negative"},
		{name: "stats-no-file", args: []string{"stats"}, code: 2, errText: "no FILE"},
		{
			name: "cat", args: []string{"cat", f["good.arrow"]}, code: 0,
			out: []string{
				"/usr/bin/demo pid 10 (parent 1), tool branch",
				"started    2026-11-18T11:06:40Z",
				"0     0x555555554000     0x3000     yes       /usr/bin/demo [beef]",
				"call          10       +0.000001000   demo+0x1130            libc.so.6+0x28000\n",
				"syscall       10       +0.000002000   libc.so.6+0x28010      -                      1 write\n",
				"ind-jmp       10       +0.000004000   demo+0x1200            0x7fffff000000\n",
			},
		},
		{
			name: "cat-filter", args: []string{"cat", "-k", "syscall", "--limit", "1", f["good.arrow"]}, code: 0,
			out:    []string{"syscall       10 "},
			notOut: []string{"syscall       11 ", "call          10"},
		},
		{
			name: "cat-kinds", args: []string{"cat", "--kind", "ret,ind-jmp", f["good.arrow"]}, code: 0,
			out:    []string{"ret           11", "ind-jmp"},
			notOut: []string{"syscall       1"},
		},
		{
			name: "cat-cut", args: []string{"cat", f["cut.arrow"]}, code: 1,
			out:     []string{"ret           11"},
			notOut:  []string{"syscall       11"},
			errText: "cut.arrow: offset ",
		},
		{name: "cat-missing", args: []string{"cat", f["missing.arrow"]}, code: 1, errText: "missing.arrow: no such file or directory"},
		{name: "cat-text", args: []string{"cat", f["text.arrow"]}, code: 1, errText: "text.arrow: offset 0: not an Arrow IPC stream"},
		{name: "cat-other", args: []string{"cat", f["other.arrow"]}, code: 1, errText: "other.arrow: offset 0: not a stint trace: schema has 1 columns"},
		{
			name: "stats", args: []string{"stats", f["good.arrow"], f["zeros.arrow"], f["cut.arrow"]}, code: 0,
			out: []string{
				"ended      cleanly: end-of-stream marker at offset",
				"ended      cleanly: zero padding (unsealed tail) at offset",
				"ended      CUT at offset",
				"batches    3\n  events     5 (distinct (src,dst,kind): 4)", // the two syscalls share src, dst, kind
				"batches    2\n  events     4 (distinct (src,dst,kind): 4)",
				"time span  0.000004000s (first +0.000001000s, last +0.000005000s after start)",
				"    syscall                   2  40.0%",
				"    1 libc.so.6                                3          1",
				"    - (no module)                              0          1",
				"threads    2\n    tid 10                    3  60.0%\n    tid 11                    2  40.0%",
			},
		},
		{
			// two periods, 3 ms and 10.002 ms used: the nearest-rank
			// median of an even count is the lower one, as in cov compare
			name: "stats-periods", args: []string{"stats", f["periods.arrow"]}, code: 0,
			out: []string{
				"  periods    2 (budget 10ms); used median 3ms, max 10.002ms; 1 over budget (median 2µs, max 2µs)\n" +
					"    1 gates closed: 1 by a probe's charge, 0 at the period's start, 0 at its end\n" +
					"    at the close (medians): used 8.5ms, reserve kept 1ms; unspent at the end 0s\n",
			},
		},
		{
			name: "stats-close-unknown", args: []string{"stats", f["unknown.arrow"]}, code: 0,
			out: []string{
				"    1 gates closed: 0 by a probe's charge, 0 at the period's start, 0 at its end, 1 unknown\n" +
					"    unspent at the end (median) 100µs\n",
			},
			notOut: []string{"at the close"},
		},
		{name: "stats-no-periods", args: []string{"stats", f["good.arrow"]}, code: 0, notOut: []string{"periods", "sampling"}},
		{
			// a reservoir per function counts its calls exactly; the
			// callers' shares come from the 5 samples
			name: "stats-sampled", args: []string{"stats", f["sampled.arrow"]}, code: 0,
			out: []string{
				"  sampling   reservoir per function 20%, interval 1s: 1 intervals, 1 strata-intervals, 5 samples for 1000 events\n",
				"    reader thread worked 2ms of 1s (0.20%); 0 samples lost\n",
				"    calls to demo+0x2000", "1000  exact", "5 samples\n",
				"      from demo+0x1130", "60.00%", "      from demo+0x1150", "40.00%",
			},
		},
		{
			// each sample stands for 1000/5 calls: caller -> callee stacks
			name: "export-sampled", args: []string{"export", "--no-symbols", "-f", "collapsed", "-o", "-", f["sampled.arrow"]}, code: 0,
			out: []string{"demo+0x1130;demo+0x2000 600\n", "demo+0x1150;demo+0x2000 400\n"},
		},
		{
			name: "stats-bad", args: []string{"stats", f["text.arrow"], f["good.arrow"], f["missing.arrow"]}, code: 1,
			out:     []string{"events     5"},
			errText: "text.arrow: offset 0: not an Arrow IPC stream",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, &stderr)
			if have := exitCode(err); have != tc.code {
				t.Fatalf("exit code %d, want %d (err %v)\nstdout:\n%s", have, tc.code, err, stdout.String())
			}
			if tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)) {
				t.Errorf("error %v, want it to contain %q", err, tc.errText)
			}
			if tc.errText == "" && err != nil {
				t.Errorf("unexpected error %v", err)
			}
			for _, s := range tc.out {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tc.notOut {
				if strings.Contains(stdout.String(), s) {
					t.Errorf("stdout has %q:\n%s", s, stdout.String())
				}
			}
		})
	}
}

func TestStatsBadOneLinePerFile(t *testing.T) {
	f := files(t)
	err := run(context.Background(), []string{"stats", f["text.arrow"], f["missing.arrow"]}, &bytes.Buffer{}, &bytes.Buffer{})
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "missing.arrow: no such file") {
		t.Errorf("error lines %q, want one per bad file", lines)
	}
}
