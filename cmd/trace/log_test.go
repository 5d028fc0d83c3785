package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/formats/redlog"
)

// logFiles writes a trace with modules with and without build-ids, an
// exact log built from it by redlog itself, and a hash log.
func logFiles(t *testing.T) (dir string, f map[string]string) {
	t.Helper()
	dir = t.TempDir()
	run := formats.Run{Binary: "/usr/bin/demo", BuildID: "beef", Tool: "branch", PID: 10, PPID: 1}
	mods := []formats.Module{
		{ID: 0, Path: "/usr/bin/demo", BuildID: "beef", Base: 0x555555554000, Size: 0x3000, Rewritten: true},
		{ID: 1, Path: "/lib/libc.so.6", BuildID: "c0ffee", Base: 0x7ffff7d80000, Size: 0x1d5000},
		{ID: 2, Path: "/opt/nobid.so", Base: 0x7000000, Size: 0x1000},
	}
	events := []formats.Event{
		{Kind: formats.KindCall, TID: 10, SrcModule: 0, Src: 0x1130, DstModule: 1, Dst: 0x28000},
		{Kind: formats.KindSyscall, TID: 10, SrcModule: 1, Src: 0x28010, DstModule: formats.NoModule, Value: 1},
		{Kind: formats.KindRet, TID: 10, SrcModule: 1, Src: 0x28020, DstModule: 0, Dst: 0x1135},
		{Kind: formats.KindIndJmp, TID: 10, SrcModule: 0, Src: 0x1200, DstModule: formats.NoModule, Dst: 0x7fffff000000},
		{Kind: formats.KindCall, TID: 10, SrcModule: 0, Src: 0x1300, DstModule: 2, Dst: 0x10},
		{Kind: formats.KindJccTaken, TID: 10, SrcModule: 2, Src: 0x20, DstModule: 2, Dst: 0x30},
		{Kind: formats.KindCall, TID: 11, SrcModule: 0, Src: 0x1130, DstModule: 1, Dst: 0x28000},
	}
	var buf bytes.Buffer
	w, err := formats.NewWriter(&buf, run, mods, formats.WithBatchRows(3))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(events...)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f = map[string]string{}
	put := func(name string, b []byte) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		f[name] = p
	}
	put("run.arrow", buf.Bytes())
	put("cut.arrow", buf.Bytes()[:buf.Len()-30])
	put("text.arrow", []byte("not a trace\n"))
	put("text.log", []byte("not a log, though long enough to hold a header\n"))
	f["new.log"] = filepath.Join(dir, "new.log")
	f["hash.log"] = filepath.Join(dir, "hash.log")
	if _, err := redlog.Append(f["hash.log"], redlog.Hash, map[string][]redlog.Entry{"beef": {{A: 0x1100, B: 0x40}, {A: 0x1000, B: 0x10}}}); err != nil {
		t.Fatal(err)
	}
	return dir, f
}

func runArgs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	return stdout.String(), err
}

func wantOut(t *testing.T, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func wantErr(t *testing.T, err error, code int, text string) {
	t.Helper()
	if have := exitCode(err); have != code || code != 0 && !strings.Contains(err.Error(), text) {
		t.Errorf("error %v (exit %d), want exit %d with %q", err, have, code, text)
	}
}

func TestLogAddShow(t *testing.T) {
	_, f := logFiles(t)
	out, err := runArgs(t, "log", "add", f["new.log"], f["run.arrow"])
	wantErr(t, err, 0, "")
	wantOut(t, out, "added 5 entries (2 blocks) of 5 distinct in 7 events of 1 traces",
		"1 events of modules without a build-id not logged")

	out, err = runArgs(t, "log", "show", "--entries", f["new.log"])
	wantErr(t, err, 0, "")
	wantOut(t, out,
		"policy     exact",
		"size       ", "2 blocks, 5 entries (5 distinct)",
		"problems   none",
		"modules    2\n    beef                                              3\n    c0ffee                                            2\n",
		"entries of beef\n  call          0x1130 -> 0x28000 (c0ffee)\n  ind-jmp       0x1200 -> 0x7fffff000000 (absolute, or a module without build-id)\n  call          0x1300 -> 0x10 (absolute, or a module without build-id)\n",
		"entries of c0ffee\n  syscall       0x28010 nr 1\n  ret           0x28020 -> 0x1135 (beef)\n",
	)

	// The same trace again adds nothing; the cut trace is used up to its
	// last complete batch.
	out, err = runArgs(t, "log", "add", "--policy", "exact", f["new.log"], f["run.arrow"], f["cut.arrow"])
	wantErr(t, err, 0, "")
	wantOut(t, out, "added 0 entries", "cut.arrow: cut at offset")

	// The log agrees with redlog's own reading.
	l, probs, err := redlog.ReadFile(f["new.log"])
	if err != nil || len(probs) != 0 || !l.Has("beef", redlog.Entry{A: 0x1130, B: 0x28000, DstMod: redlog.BuildIDHash([]byte{0xc0, 0xff, 0xee}), Kind: 4}) {
		t.Errorf("ReadFile: %v %v %v", err, probs, l.Modules)
	}

	out, err = runArgs(t, "log", "show", "--entries", f["hash.log"])
	wantErr(t, err, 0, "")
	wantOut(t, out, "policy     hash", "  0x1000         len 16       (..0x100f)\n  0x1100         len 64       (..0x113f)\n")
}

func TestLogErrors(t *testing.T) {
	_, f := logFiles(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		text string
	}{
		{"no-sub", []string{"log"}, 2, "no subcommand"},
		{"bogus-sub", []string{"log", "frob"}, 2, `unknown subcommand "frob"`},
		{"show-none", []string{"log", "show"}, 2, "want one LOG"},
		{"show-missing", []string{"log", "show", f["new.log"]}, 1, "new.log: no such file"},
		{"show-text", []string{"log", "show", f["text.log"]}, 1, "not a stint redundancy log"},
		{"check-none", []string{"log", "check"}, 2, "no LOG"},
		{"add-policy", []string{"log", "add", "--policy", "hash", f["new.log"], f["run.arrow"]}, 2, "only an exact log"},
		{"add-bad-policy", []string{"log", "add", "--policy", "tree", f["new.log"], f["run.arrow"]}, 2, `unknown log policy "tree"`},
		{"add-no-trace", []string{"log", "add", f["new.log"]}, 2, "at least one TRACE"},
		{"add-text", []string{"log", "add", f["new.log"], f["text.arrow"]}, 1, "text.arrow: offset 0"},
		{"add-to-hash", []string{"log", "add", f["hash.log"], f["run.arrow"]}, 1, "log has another policy"},
		{"add-to-text", []string{"log", "add", f["text.log"], f["run.arrow"]}, 1, "not a stint redundancy log"},
		{"merge-no-out", []string{"log", "merge", f["hash.log"]}, 2, "-o OUT is required"},
		{"merge-none", []string{"log", "merge", "-o", f["new.log"]}, 2, "no LOG"},
		{"merge-text", []string{"log", "merge", "-o", f["new.log"], f["text.log"]}, 1, "text.log: offset 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runArgs(t, tc.args...)
			wantErr(t, err, tc.code, tc.text)
		})
	}
	if _, err := os.Stat(f["new.log"]); err == nil {
		t.Errorf("a failed command created new.log")
	}
	if b, _ := os.ReadFile(f["text.log"]); !strings.HasPrefix(string(b), "not a log") || len(b) != 47 {
		t.Errorf("a failed command changed text.log: %q", b)
	}
	out, err := runArgs(t, "log", "--help")
	wantErr(t, err, 0, "")
	wantOut(t, out, "trace log merge -o|--output OUT LOG...")
	out, _ = runArgs(t, "help", "log")
	wantOut(t, out, "trace log check LOG...")
	out, _ = runArgs(t, "--help")
	wantOut(t, out, "trace log show|check|add|merge")
}

func TestLogCheck(t *testing.T) {
	dir, f := logFiles(t)
	if _, err := runArgs(t, "log", "add", f["new.log"], f["run.arrow"]); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(f["new.log"])
	out, err := runArgs(t, "log", "check", f["new.log"], f["hash.log"])
	wantErr(t, err, 0, "")
	wantOut(t, out, "new.log: ok: exact, 2 blocks, 5 distinct entries", "hash.log: ok: hash, 1 blocks, 2 distinct entries")

	// A flipped byte in the first block (at 32): damage at its offset,
	// and the second block still read.
	damaged := bytes.Clone(good)
	damaged[32+60] ^= 0x10
	dp := filepath.Join(dir, "damaged.log")
	os.WriteFile(dp, damaged, 0o644)
	// A cut inside the second block: a torn append.
	tp := filepath.Join(dir, "torn.log")
	os.WriteFile(tp, good[:len(good)-5], 0o644)
	second := int64(redlog.HeaderSize + redlog.BlockHead + 3*redlog.EntrySize)

	out, err = runArgs(t, "log", "check", f["new.log"], dp, tp, f["text.log"])
	wantErr(t, err, 1, "3 of 4 logs damaged or unreadable")
	wantOut(t, out,
		"new.log: ok",
		"damaged.log: offset 32: damaged (144 bytes): block CRC",
		"torn.log: offset "+itoa(second)+": torn append (",
		"text.log: offset 0: not a stint redundancy log",
	)

	out, err = runArgs(t, "log", "show", dp)
	wantErr(t, err, 0, "")
	wantOut(t, out, "1 blocks, 2 entries", "problems   1\n    offset 32: damaged", "c0ffee")

	// Adding to the torn log repairs it; merging the damaged log keeps
	// what it can read and says what it could not.
	out, err = runArgs(t, "log", "add", tp, f["run.arrow"])
	wantErr(t, err, 0, "")
	wantOut(t, out, "warning: the log was damaged", "torn append", "added 2 entries")
	if out, err = runArgs(t, "log", "check", tp); err != nil {
		t.Errorf("after add: %v\n%s", err, out)
	}
	mp := filepath.Join(dir, "merged.log")
	out, err = runArgs(t, "log", "merge", "-o", mp, dp, tp)
	wantErr(t, err, 0, "")
	wantOut(t, out, "damaged.log: warning: offset 32: damaged", "exact log, 5 distinct entries of 2 logs, 5 added")
}

func TestLogMerge(t *testing.T) {
	dir, f := logFiles(t)
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	redlog.Append(a, redlog.Merger, map[string][]redlog.Entry{"beef": {{A: 100, B: 50}}, "01": {{A: 1, B: 1}}})
	redlog.Append(b, redlog.Merger, map[string][]redlog.Entry{"beef": {{A: 100, B: 50}, {A: 150, B: 50}}})
	out := filepath.Join(dir, "out.log")
	o, err := runArgs(t, "log", "merge", "-o", out, a, b)
	wantErr(t, err, 0, "")
	wantOut(t, o, "out.log: merger log, 3 distinct entries of 2 logs, 3 added")
	l, probs, err := redlog.ReadFile(out)
	if err != nil || len(probs) != 0 || l.Policy != redlog.Merger || len(l.Modules["beef"]) != 2 || len(l.Modules["01"]) != 1 {
		t.Errorf("merged: %v %v %v", err, probs, l)
	}
	// Again: nothing new.
	o, err = runArgs(t, "log", "merge", "-o", out, a, b)
	wantErr(t, err, 0, "")
	wantOut(t, o, "0 added")
	// Mixed policies.
	_, err = runArgs(t, "log", "merge", "-o", out, a, f["hash.log"])
	wantErr(t, err, 1, "hash.log: log has another policy: hash, not merger")
	_, err = runArgs(t, "log", "merge", "-o", f["hash.log"], a)
	wantErr(t, err, 1, "hash.log: log has another policy")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
