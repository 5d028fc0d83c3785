package e2e

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/formats/redlog"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// eventKeys returns the distinct events of the traces in dir, keyed
// without load addresses.
func eventKeys(t *testing.T, dir string) map[edge]bool {
	t.Helper()
	out := map[edge]bool{}
	for _, tr := range readTraces(t, dir) {
		for _, e := range tr.Events {
			if e.Kind.IsRecord() {
				continue
			}
			k := edge{Kind: uint8(e.Kind), Src: e.Src, Dst: e.Dst, Value: e.Value}
			if m := tr.Module(e.DstModule); m != nil {
				k.DstMod = filepath.Base(m.Path)
			}
			out[k] = true
		}
	}
	return out
}

func readLog(t *testing.T, path string) (*redlog.Log, []redlog.Problem) {
	t.Helper()
	l, probs, err := redlog.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	return l, probs
}

// TestLogAcrossRuns: with the exact policy, a second run (on a larger
// input) records none of the first run's events, and together the two
// runs hold every event of a run without a log. The log file is
// what package redlog reads, without problems.
func TestLogAcrossRuns(t *testing.T) {
	bin := buildSpin(t)
	args := []string{"10"}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spin.log")
	out, _ := rewritten(t, bin, dir, rewrite.Options{Log: logPath})
	run := func(name string, args []string, env ...string) map[edge]bool {
		traces := filepath.Join(dir, name)
		o, e, code, err := fixtures.Run(out, args, append(traceEnv(traces), env...))
		if err != nil || code != 0 || len(e) != 0 {
			t.Fatalf("%s: exit %d, err %v, stderr %q, stdout %q", name, code, err, e, o)
		}
		return eventKeys(t, traces)
	}
	full := run("full", args, "STINT_LOG=") // empty: no log
	if len(full) < 30 {
		t.Fatalf("a run without the log recorded only %d events", len(full))
	}
	if _, err := os.Stat(logPath); err == nil {
		t.Fatal("a run with STINT_LOG= wrote the log")
	}
	first := run("first", []string{"0"}) // main and exit only: a subset
	l, probs := readLog(t, logPath)
	if len(probs) != 0 {
		t.Errorf("log problems after one run: %v", probs)
	}
	if l.Distinct() != len(first) {
		t.Errorf("log holds %d entries after a run that recorded %d events", l.Distinct(), len(first))
	}
	// .fini's ret runs after the finaliser, which records it: to ld.so,
	// where _fini returns, and in the log with the rest
	fini, finiRet := finiRange(t, bin), false
	for k := range first {
		finiRet = finiRet || fini(k.Src) && k.Kind == uint8(formats.KindRet) && strings.HasPrefix(k.DstMod, "ld-linux")
	}
	if !finiRet {
		t.Error("the first run did not record .fini's ret to the dynamic loader")
	}
	second := run("second", args)
	if len(second) == 0 {
		t.Error("the second run recorded nothing new")
	}
	for k := range second {
		if first[k] {
			t.Errorf("second run recorded %v again", k)
		}
	}
	union := map[edge]bool{}
	for k := range first {
		union[k] = true
	}
	for k := range second {
		union[k] = true
	}
	for k := range full {
		if !union[k] {
			t.Errorf("event %v of the full run is in neither logged run", k)
		}
	}
	t.Logf("full %d, first %d, second %d events", len(full), len(first), len(second))
}

// TestLogConcurrentRuns: four processes share one log; afterwards it
// reads without problems and holds every event any of them recorded.
func TestLogConcurrentRuns(t *testing.T) {
	bin := buildSpin(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spin.log")
	out, _ := rewritten(t, bin, dir, rewrite.Options{Log: logPath})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			traces := filepath.Join(dir, "t", string(rune('a'+i)))
			o, e, code, err := fixtures.Run(out, []string{"10"}, traceEnv(traces))
			if err != nil || code != 0 || len(e) != 0 {
				errs <- string(o) + string(e)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a run failed: %s", e)
	}
	l, probs := readLog(t, logPath)
	if len(probs) != 0 {
		t.Errorf("log problems after concurrent runs: %v", probs)
	}
	all := map[edge]bool{}
	for i := 0; i < 4; i++ {
		for k := range eventKeys(t, filepath.Join(dir, "t", string(rune('a'+i)))) {
			all[k] = true
		}
	}
	if l.Distinct() != len(all) {
		t.Errorf("log holds %d distinct entries, the runs recorded %d distinct events", l.Distinct(), len(all))
	}
}

// TestLogSavedAtExit: a program that exits while the runtime's thread is
// saving the log still leaves every event it recorded in the log. The
// exit path used to give up when that save held the lock, and the saving
// thread died with the process: a sqlite3 run of 1.1 s left no log. With
// STINT_TEST_SAVE_HOLD the first periodic save (a second into the run)
// announces itself and holds the lock for 300 ms; sqlite3 (a rewritten
// libsqlite3 with a log) is told to exit in that time.
func TestLogSavedAtExit(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib, "/usr/bin/sqlite3")
	dir := t.TempDir()
	logPath := filepath.Join(dir, "sqlite.log")
	rewritten(t, lib, dir, rewrite.Options{Log: logPath})
	hold := filepath.Join(dir, "saving")
	traces := filepath.Join(dir, "traces")
	env := append(traceEnv(traces), "LD_LIBRARY_PATH="+dir, runtime.TestSaveHoldEnv+"="+hold)
	q := "create table t(x); insert into t values (1), (2), (3); select sum(x) from t;\n.print ready\n"
	cmd, stdin, stderr := startSqlite3(t, env, q, "6\nready\n")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(hold); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no periodic save of the log began within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stdin.Close() // sqlite3 exits while the save holds the lock
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sqlite3: %v, stderr %q", err, stderr.String())
	}
	if _, err := os.Stat(logPath); err != nil {
		t.Fatalf("no log after the run: %v", err)
	}
	l, probs := readLog(t, logPath)
	if len(probs) != 0 {
		t.Errorf("log problems: %v", probs)
	}
	recorded := eventKeys(t, traces)
	if len(recorded) < 100 || l.Distinct() != len(recorded) {
		t.Errorf("log holds %d entries, the run recorded %d events", l.Distinct(), len(recorded))
	}
}

// TestLogKilled: a run killed with SIGKILL leaves a log that reads (its
// last block may be torn, which is reported, not fatal), and the next
// run still works with it.
func TestLogKilled(t *testing.T) {
	bin := buildSpin(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spin.log")
	out, _ := rewritten(t, bin, dir, rewrite.Options{Log: logPath, Every: false})
	cmd := exec.Command(out, "100000")
	cmd.Env = traceEnv(filepath.Join(dir, "killed"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The log is saved every second: wait for a first save, then kill.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := os.Stat(logPath); err == nil && st.Size() > 32 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	l, probs := readLog(t, logPath)
	for _, p := range probs {
		if !p.Torn {
			t.Errorf("damage after SIGKILL: %v", p)
		}
	}
	if l.Distinct() == 0 {
		t.Error("nothing saved before the kill")
	}
	o, e, code, err := fixtures.Run(out, []string{"3"}, traceEnv(filepath.Join(dir, "after")))
	if err != nil || code != 0 || len(e) != 0 || !strings.HasPrefix(string(o), "spin 3 ") {
		t.Errorf("run after the kill: exit %d, stdout %q, stderr %q", code, o, e)
	}
}

// TestLogDamaged: a log with a damaged block or one that is not a log
// at all is reported on stderr, left as it is, and the program's
// behaviour does not change.
func TestLogDamaged(t *testing.T) {
	args := []string{"3"}
	bin, nOut := spinNative(t, args)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spin.log")
	out, _ := rewritten(t, bin, dir, rewrite.Options{Log: logPath})
	// Two runs: the second (larger input) appends a second block.
	for i, a := range []string{"0", "3"} {
		if _, e, code, err := fixtures.Run(out, []string{a}, traceEnv(filepath.Join(dir, "t0", a))); err != nil || code != 0 || len(e) != 0 {
			t.Fatalf("run %d: exit %d, %v, %q", i, code, err, e)
		}
	}
	if l, _ := readLog(t, logPath); l.Blocks != 2 {
		t.Fatalf("log has %d blocks, want 2", l.Blocks)
	}
	good, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		damage  func([]byte) []byte
		wantErr string
	}{
		{"flipped byte", func(b []byte) []byte { c := bytes.Clone(b); c[32+48+5] ^= 0xff; return c }, "damaged block"},
		{"count of the first block", func(b []byte) []byte { c := bytes.Clone(b); c[32+4] = 0xff; c[32+5] = 0xff; return c }, "damaged block"},
		{"not a log", func(b []byte) []byte { return []byte("this is not a log file at all, not even close\n") }, "not a stint redundancy log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.damage(good)
			if err := os.WriteFile(logPath, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			o, e, code, err := fixtures.Run(out, args, traceEnv(filepath.Join(t.TempDir(), "t")))
			if err != nil || code != 0 || !bytes.Equal(o, nOut) {
				t.Fatalf("exit %d, %v, stdout %q (want %q)", code, err, o, nOut)
			}
			if !strings.Contains(string(e), tc.wantErr) {
				t.Errorf("stderr %q, want %q", e, tc.wantErr)
			}
			now, _ := os.ReadFile(logPath)
			if len(now) < len(bad) || !bytes.Equal(now[:len(bad)], bad) {
				t.Errorf("the damaged log was changed (%d bytes, was %d)", len(now), len(bad))
			}
			if tc.name != "not a log" {
				// the good block after the damage still counts
				l, probs := readLog(t, logPath)
				if l.Blocks < 1 || len(probs) == 0 {
					t.Errorf("after the run: %d good blocks, problems %v", l.Blocks, probs)
				}
			}
		})
	}
}

// spinLogged builds spin, runs it natively with args, rewrites it with
// an exact log in a temporary directory and runs that once: the native
// binary and output, the rewritten file, the log and the rewrite's
// statistics.
func spinLogged(t *testing.T, args []string) (bin string, nOut []byte, out, logPath string, st *rewrite.Stats) {
	t.Helper()
	bin, nOut = spinNative(t, args)
	dir := t.TempDir()
	logPath = filepath.Join(dir, "spin.log")
	out, st = rewritten(t, bin, dir, rewrite.Options{Log: logPath})
	if _, e, code, err := fixtures.Run(out, args, traceEnv(filepath.Join(dir, "t0"))); err != nil || code != 0 || len(e) != 0 {
		t.Fatalf("logged run: exit %d, %v, %q", code, err, e)
	}
	return bin, nOut, out, logPath, st
}

// probedSites returns the sites (sources) the probes ps are for.
func probedSites(ps []runtime.Probe) map[uint64]bool {
	m := map[uint64]bool{}
	for _, p := range ps {
		m[p.Src] = true
	}
	return m
}

// TestSkipCovered: coverage(t, "--skip-covered", rewriting) with --skip-covered leaves unpatched exactly
// the sites whose every outcome is in the log (direct sites only: the
// outcomes of returns and indirect branches cannot be listed in full; a
// direct call's return counts as one of its outcomes), and the program
// still behaves as before.
func TestSkipCovered(t *testing.T) {
	args := []string{"5"}
	bin, nOut, out, logPath, stOrig := spinLogged(t, args)
	_, all, err := Probed(out)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := readLog(t, logPath)
	bid := ""
	for _, id := range l.BuildIDs() {
		bid = id
	}
	raw, _ := redlog.ParseBuildID(bid)
	self := redlog.BuildIDHash(raw)
	retTo := map[uint64]bool{} // where the module's logged returns into itself went
	for _, e := range l.Modules[bid] {
		if e.Kind == uint32(runtime.KRet) && e.DstMod == self {
			retTo[e.B] = true
		}
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	// Site -> all its probes' outcomes logged?
	covered := map[uint64]bool{}
	sites := map[uint64]bool{}
	for _, p := range all {
		sites[p.Src] = true
		if _, ok := covered[p.Src]; !ok {
			covered[p.Src] = true
		}
		if p.Flags&1 == 0 || !l.Has(bid, redlog.Entry{A: p.Src, B: p.Dst, DstMod: self, Kind: uint32(p.Kind)}) {
			covered[p.Src] = false
		}
		if runtime.Kind(p.Kind) == runtime.KCall {
			// e8 rel32, or f2 e8 rel32 (bnd)
			b, err := readVaddr(ef, p.Src, 2)
			if err != nil {
				t.Fatal(err)
			}
			n := uint64(5)
			if b[0] != 0xe8 {
				n = 6
			}
			if !retTo[p.Src+n] {
				covered[p.Src] = false
			}
		}
	}
	want := map[uint64]bool{}
	nCovered := 0
	for s := range sites {
		if covered[s] {
			nCovered++
		} else {
			want[s] = true
		}
	}
	if nCovered == 0 {
		t.Fatal("the logged run covered no site")
	}
	skipDir := t.TempDir()
	skipped, st := rewritten(t, bin, skipDir, rewrite.Options{SkipCovered: coverage(t, "--skip-covered", logPath)})
	if st.Covered != nCovered {
		t.Errorf("stats: %d covered, want %d", st.Covered, nCovered)
	}
	_, left, err := Probed(skipped)
	if err != nil {
		t.Fatal(err)
	}
	have := probedSites(left)
	// A site left unpatched although not covered must be one the
	// planner could no longer patch: with covered neighbours left alone,
	// a short site (a 1-byte ret) may lose the tactic that evicted one.
	// Those are counted as failures, so there can be no more of them
	// than the failures this rewrite added.
	var missing []uint64
	for s := range want {
		if !have[s] {
			missing = append(missing, s)
		}
	}
	if extra := st.Failed - stOrig.Failed; len(missing) > max(extra, 0) {
		t.Errorf("sites %#x are not fully covered but were left unpatched (%d more failed sites than without --skip-covered)", missing, extra)
	} else if len(missing) > 0 {
		t.Logf("sites %#x not covered and not patched: the planner failed them (%d more failures than without --skip-covered)", missing, extra)
	}
	// A site the first rewrite could not patch (so nothing logged it)
	// may be patched now that covered neighbours are left alone.
	for s := range have {
		if !want[s] && sites[s] {
			t.Errorf("site %#x is covered but still patched", s)
		}
	}
	// A jcc's outcomes may be probed at their destinations instead
	// (rewrite/edges.go): such a probe must be for an outcome the log
	// lacks, and a jcc with one outcome logged and the other probed so
	// has no patch itself.
	loggedOutcomes := map[uint64]int{}
	for _, p := range all {
		if (p.Kind == 1 || p.Kind == 2) && l.Has(bid, redlog.Entry{A: p.Src, B: p.Dst, DstMod: self, Kind: uint32(p.Kind)}) {
			loggedOutcomes[p.Src]++
		}
	}
	_, patches, err := Patched(skipped)
	if err != nil {
		t.Fatal(err)
	}
	atPatch := map[uint64]bool{}
	for _, pt := range patches {
		for a := pt.Addr; a < pt.Addr+uint64(pt.Len); a++ {
			atPatch[a] = true
		}
	}
	edges := 0
	for _, p := range left {
		if p.Kind != 1 && p.Kind != 2 || int(p.Patch) >= len(patches) {
			continue
		}
		if pt := patches[p.Patch]; p.Src >= pt.Addr && p.Src < pt.Addr+uint64(pt.Len) {
			continue
		}
		edges++
		if l.Has(bid, redlog.Entry{A: p.Src, B: p.Dst, DstMod: self, Kind: uint32(p.Kind)}) {
			t.Errorf("edge probe for the logged outcome %#x -> %#x (kind %d)", p.Src, p.Dst, p.Kind)
		}
		if atPatch[p.Src] && loggedOutcomes[p.Src] == 1 {
			t.Errorf("jcc %#x has one outcome logged and the other probed at its destination %#x, yet it is patched", p.Src, p.Dst)
		}
	}
	if st.Patched["edge"] == 0 || edges < st.Patched["edge"] {
		t.Errorf("%d jccs handled by edge probes, %d edge probes: spin's jccs should have some", st.Patched["edge"], edges)
	}
	o, e, code, err := fixtures.Run(skipped, args, traceEnv(filepath.Join(skipDir, "t")))
	if err != nil || code != 0 || !bytes.Equal(o, nOut) || len(e) != 0 {
		t.Errorf("skip-covered run: exit %d, %v, stdout %q (want %q), stderr %q", code, err, o, nOut, e)
	}
	t.Logf("%d sites, %d covered, %d jccs probed at %d destinations", len(sites), nCovered, st.Patched["edge"], edges)
}

// TestRetireSince: coverage(t, "--retire-since", with) --retire-since OLD beside --skip-covered LOG, a
// site that is not covered but has outcomes in OLD and none added in LOG
// since is left unpatched too; a site whose outcomes grew since OLD, or
// that OLD lacks, stays patched. OLD here is the logged run's log with a
// jcc's outcome taken out (a jcc with one outcome logged), and LOG has a
// destination added to a ret. An OLD that is not an older copy of LOG,
// or --retire-since alone, is an error.
func TestRetireSince(t *testing.T) {
	args := []string{"5"}
	bin, nOut, out, logPath, _ := spinLogged(t, args)
	dir := filepath.Dir(logPath)
	l, _ := readLog(t, logPath)
	var bid string
	for _, id := range l.BuildIDs() {
		bid = id
	}
	raw, _ := redlog.ParseBuildID(bid)
	self := redlog.BuildIDHash(raw)
	logged := l.Modules[bid]
	_, all, err := Probed(out)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[uint64]map[uint64]bool{} // the kinds of each site's probes
	for _, p := range all {
		if kinds[p.Src] == nil {
			kinds[p.Src] = map[uint64]bool{}
		}
		kinds[p.Src][uint64(p.Kind)] = true
	}
	patched := func(path string) map[uint64]bool {
		_, left, err := Probed(path)
		if err != nil {
			t.Fatal(err)
		}
		return probedSites(left)
	}
	skipped, _ := rewritten(t, bin, t.TempDir(), rewrite.Options{SkipCovered: coverage(t, "--skip-covered", logPath)})
	inLogged := patched(skipped)
	// OLD: the logged run's log without the outcome of one half-logged
	// jcc. LOG: that log with a destination added to one ret.
	count := func(es []redlog.Entry) map[[2]uint64]int {
		m := map[[2]uint64]int{}
		for _, e := range es {
			m[[2]uint64{e.A, uint64(e.Kind)}]++
		}
		return m
	}
	n := count(logged)
	var jcc, ret uint64
	var old []redlog.Entry
	for _, e := range logged {
		k := runtime.Kind(e.Kind)
		if jcc == 0 && (k == runtime.KJccTaken || k == runtime.KJccNotTaken) && inLogged[e.A] &&
			n[[2]uint64{e.A, uint64(runtime.KJccTaken)}]+n[[2]uint64{e.A, uint64(runtime.KJccNotTaken)}] == 1 {
			jcc = e.A
			continue
		}
		if ret == 0 && k == runtime.KRet && inLogged[e.A] {
			ret = e.A
		}
		old = append(old, e)
	}
	if jcc == 0 || ret == 0 {
		t.Fatalf("no half-logged jcc (%#x) or logged ret (%#x) still patched", jcc, ret)
	}
	newer := append(append([]redlog.Entry(nil), logged...), redlog.Entry{A: ret, B: 0x10, DstMod: self, Kind: uint32(runtime.KRet)})
	newPath := filepath.Join(dir, "new.log")
	writeLog(t, newPath, raw, newer)
	plainDir := t.TempDir()
	plain, stPlain := rewritten(t, bin, plainDir, rewrite.Options{SkipCovered: coverage(t, "--skip-covered", newPath)})
	inPlain := patched(plain)
	count0, count1 := count(old), count(newer)
	oldPath := filepath.Join(dir, "old.log")
	writeLog(t, oldPath, raw, old)
	// what the rule leaves unpatched beyond --skip-covered
	want := map[uint64]bool{}
	for s := range inPlain {
		seen, same := false, true
		for k := range kinds[s] {
			n := count0[[2]uint64{s, k}]
			seen = seen || n > 0
			same = same && n == count1[[2]uint64{s, k}]
		}
		if seen && same {
			want[s] = true
		}
	}
	if want[jcc] || want[ret] || len(want) == 0 {
		t.Fatalf("test setup: %d sites to retire (jcc %#x %v, ret %#x %v)", len(want), jcc, want[jcc], ret, want[ret])
	}
	retDir := t.TempDir()
	retired, st := rewritten(t, bin, retDir, rewrite.Options{SkipCovered: coverage(t, "--skip-covered", newPath), RetireSince: coverage(t, "--retire-since", oldPath)})
	if st.Retired != len(want) || st.Covered != stPlain.Covered {
		t.Errorf("stats: %d retired, %d covered; want %d retired, %d covered", st.Retired, st.Covered, len(want), stPlain.Covered)
	}
	// what the runtime reads to skip its start-up copies (init.c)
	for _, c := range []struct {
		path string
		want bool
	}{{retired, true}, {plain, false}} {
		if mod, _, _ := probesAndPatches(t, c.path); (mod.Flags&runtime.MFRetired != 0) != c.want {
			t.Errorf("%s: module flags %#x, STINT_MF_RETIRED wanted: %v", c.path, mod.Flags, c.want)
		}
	}
	inRetired := patched(retired)
	for s := range want {
		if inRetired[s] {
			t.Errorf("site %#x has outcomes in OLD and none added since, yet it is patched", s)
		}
	}
	var lost []uint64
	for s := range inPlain {
		if !want[s] && !inRetired[s] {
			lost = append(lost, s)
		}
	}
	// (as in TestSkipCovered, a site whose neighbour's tactic is gone
	// may fail; each such is a failure the stats count)
	if extra := st.Failed - stPlain.Failed; len(lost) > max(extra, 0) {
		t.Errorf("sites %#x have new outcomes since OLD (or none in it) but were left unpatched", lost)
	}
	if !inRetired[jcc] || !inRetired[ret] {
		t.Errorf("jcc %#x (its outcome not in OLD) patched: %v; ret %#x (a destination added since OLD) patched: %v", jcc, inRetired[jcc], ret, inRetired[ret])
	}
	o, e, code, err := fixtures.Run(retired, args, traceEnv(filepath.Join(retDir, "t")))
	if err != nil || code != 0 || !bytes.Equal(o, nOut) || len(e) != 0 {
		t.Errorf("retired run: exit %d, %v, stdout %q (want %q), stderr %q", code, err, o, nOut, e)
	}
	t.Logf("%d sites patched by --skip-covered alone, %d retired", len(inPlain), st.Retired)

	// an OLD without an entry of this module retires nothing, and says so
	empty := filepath.Join(dir, "empty.log")
	writeLog(t, empty, raw, nil)
	outEmpty, stEmpty := rewritten(t, bin, t.TempDir(), rewrite.Options{SkipCovered: coverage(t, "--skip-covered", newPath), RetireSince: coverage(t, "--retire-since", empty)})
	if stEmpty.Retired != 0 || !strings.Contains(strings.Join(stEmpty.Notes, "\n"), "no entry of this module") {
		t.Errorf("empty OLD: %d retired, notes %q", stEmpty.Retired, stEmpty.Notes)
	}
	if mod, _, _ := probesAndPatches(t, outEmpty); mod.Flags&runtime.MFRetired != 0 {
		t.Errorf("empty OLD: nothing retired, yet module flags %#x have STINT_MF_RETIRED", mod.Flags)
	}

	// OLD with an entry LOG lacks; OLD without --skip-covered; OLD not a log
	alien := filepath.Join(dir, "alien.log")
	writeLog(t, alien, raw, append(append([]redlog.Entry(nil), old...), redlog.Entry{A: 1, B: 2, Kind: uint32(runtime.KJccTaken)}))
	junk := filepath.Join(dir, "junk.log")
	if err := os.WriteFile(junk, []byte("not a log at all, just text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts rewrite.Options
		want string
	}{
		{rewrite.Options{SkipCovered: coverage(t, "--skip-covered", newPath), RetireSince: coverage(t, "--retire-since", alien)}, "not in the --skip-covered log"},
		{rewrite.Options{RetireSince: coverage(t, "--retire-since", oldPath)}, "needs --skip-covered"},
	} {
		_, err := rewrite.RewriteFile(bin, filepath.Join(t.TempDir(), "out"), c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--retire-since %s: error %v, want one saying %q", c.opts.RetireSince.Path, err, c.want)
		}
	}
	// OLD not a log: the reader refuses it (cmd/rewrite names the flag).
	if _, _, err := redlog.ReadFile(junk); err == nil {
		t.Errorf("--retire-since %s: read without error", junk)
	}
}

// coverage reads the exact log at path for option flag, as cmd/rewrite
// does.
func coverage(t *testing.T, flag, path string) *rewrite.Coverage {
	t.Helper()
	l, probs, err := redlog.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", flag, err)
	}
	c, err := rewrite.NewCoverage(flag, path, l, probs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeLog writes an exact log of entries for the module with build-id bid.
func writeLog(t *testing.T, path string, bid []byte, es []redlog.Entry) {
	t.Helper()
	b, err := redlog.AppendBlocks(redlog.EncodeHeader(redlog.Exact), bid, es)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRegionPolicies: the DIME* paper's region logs (hash, bst, merger)
// run the program unchanged, write a log of their policy that package
// redlog reads, and suppress in a second run: a bst run records fewer
// events than the first one (it skips every trace that starts inside a
// logged one).
func TestRegionPolicies(t *testing.T) {
	args := []string{"5"}
	bin, nOut := spinNative(t, args)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{})
	for _, pol := range []string{"hash", "bst", "merger"} {
		t.Run(pol, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), pol+".log")
			var counts []int
			for i := 0; i < 2; i++ {
				traces := filepath.Join(t.TempDir(), "t")
				env := append(traceEnv(traces), "STINT_LOG="+logPath, "STINT_LOG_POLICY="+pol)
				o, e, code, err := fixtures.Run(out, args, env)
				if err != nil || code != 0 || !bytes.Equal(o, nOut) || len(e) != 0 {
					t.Fatalf("run %d: exit %d, %v, stdout %q (want %q), stderr %q", i, code, err, o, nOut, e)
				}
				n := 0
				for _, tr := range readTraces(t, traces) {
					if tr.Run.LogPolicy != pol {
						t.Errorf("run metadata: log policy %q", tr.Run.LogPolicy)
					}
					for _, ev := range tr.Events {
						if !ev.Kind.IsRecord() {
							n++
						}
					}
				}
				counts = append(counts, n)
			}
			l, probs := readLog(t, logPath)
			if l.Policy.String() != pol || len(probs) != 0 || l.Distinct() == 0 {
				t.Errorf("log: policy %v, %d regions, problems %v", l.Policy, l.Distinct(), probs)
			}
			if counts[0] == 0 {
				t.Error("first run recorded nothing")
			}
			if pol == "bst" && counts[1] >= counts[0] {
				t.Errorf("bst: second run recorded %d events, first %d", counts[1], counts[0])
			}
			t.Logf("%s: events per run %v, %d regions", pol, counts, l.Distinct())
		})
	}
}

// TestStaticExitHook: a static executable has no DT_FINI; the rewriter
// hooks _fini, so a run shorter than the log's save interval still saves
// its log at exit and seals its trace.
func TestStaticExitHook(t *testing.T) {
	bin := fixtures.Build(t, "spin", fixtures.Variant{Opt: fixtures.O2, Static: true})
	args := []string{"3"}
	nOut, _, _, err := fixtures.Run(bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spin.log")
	out, st := rewritten(t, bin, dir, rewrite.Options{Log: logPath})
	if r := st.Reasons["reserved for the exit hook (a static executable's .fini)"]; r == nil {
		t.Errorf("no site reserved for the exit hook; notes %v", st.Notes)
	}
	traces := filepath.Join(dir, "t")
	o, e, code, err := fixtures.Run(out, args, traceEnv(traces))
	if err != nil || code != 0 || !bytes.Equal(o, nOut) || len(e) != 0 {
		t.Fatalf("exit %d, %v, stdout %q (want %q), stderr %q", code, err, o, nOut, e)
	}
	// glibc's exit runs _fini before it flushes stdio (_IO_cleanup),
	// whose events, in a static program, come after the hook's save.
	recorded := eventKeys(t, traces)
	l, probs := readLog(t, logPath)
	if len(probs) != 0 || l.Distinct() > len(recorded) || l.Distinct() < len(recorded)*9/10 {
		t.Errorf("log: %d entries, problems %v; the run recorded %d events", l.Distinct(), probs, len(recorded))
	}
	for _, tr := range readTraces(t, traces) {
		if !tr.End.Clean() {
			t.Errorf("trace ended with %v", tr.End)
		}
	}
}

// TestLogWatchedSites: a site whose one outcome an earlier run logged and
// whose other is still to come stays patched in a logged run. The spin
// fixture's "watch" mode has two such branches: hot() runs a million
// times a round, cold() once a round. A first run without a budget logs
// one outcome of each; a second run, with a 1 µs window so that
// practically all of it lies outside the windows, must record cold()'s
// other outcome when it comes in round 3N/4, after cold() has run more
// than SW_WATCH_MAX times (a site that runs rarely stays on, with its
// arm watched again each period), and must be seen with hot()'s original
// bytes in place (a site the program keeps running is switched off
// outside the windows like any listed site, not kept on for its other
// outcome at the price of a detour on every run). Output equals native
// in both runs.
func TestLogWatchedSites(t *testing.T) {
	bin := buildSpin(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spin.log")
	out, _ := rewritten(t, bin, dir, rewrite.Options{Budget: "10%", Period: "20ms", Log: logPath})

	// the jcc of each function, and its patch
	_, probes, patches := probesAndPatches(t, out)
	jccOf := func(name string) (src uint64, patch runtime.Patch) {
		lo, hi := funcRange(t, bin, name)
		for _, p := range probes {
			if p.Kind == uint8(formats.KindJccTaken) && p.Src >= lo && p.Src < hi && int(p.Patch) < len(patches) {
				return p.Src, patches[p.Patch]
			}
		}
		t.Fatalf("no probed jcc in %s", name)
		return 0, runtime.Patch{}
	}
	hotSrc, hotPatch := jccOf("hot")
	coldSrc, _ := jccOf("cold")
	var hotSite []switchSite
	for _, s := range switchSites(t, out) {
		if s.addr == hotPatch.Addr {
			hotSite = append(hotSite, s)
		}
	}
	if len(hotSite) != 1 {
		t.Fatalf("hot()'s jcc at %#x (patch %#x+%d, flags %#x) is not switchable: the fixture's layout changed", hotSrc, hotPatch.Addr, hotPatch.Len, hotPatch.Flags)
	}

	native := func(mode string) []byte {
		o, _, _, err := fixtures.Run(bin, []string{"40", mode}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	first := filepath.Join(dir, "first")
	o, e, code, err := fixtures.Run(out, []string{"40", "watch"}, append(traceEnv(first), "STINT_BUDGET=none"))
	if want := native("watch"); err != nil || code != 0 || !bytes.Equal(o, want) {
		t.Fatalf("first run: exit %d, %v, stderr %q, stdout %q, want %q", code, err, e, o, want)
	}
	firstEv := eventKeys(t, first)
	for _, src := range []uint64{hotSrc, coldSrc} {
		n := 0
		for k := range firstEv {
			if k.Src == src && (k.Kind == uint8(formats.KindJccTaken) || k.Kind == uint8(formats.KindJccNotTaken)) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("first run: the jcc at %#x has %d outcomes, want 1", src, n)
		}
	}

	second := filepath.Join(dir, "second")
	cmd, stdout, stderr, done := startTraced(t, out, []string{"40", "watch-rare"}, append(traceEnv(second), "STINT_WINDOW=1us"), nil)
	seen := watchSwitching(t, cmd, stderr, done, out, hotSite)
	if want := native("watch-rare"); !bytes.Equal(stdout.Bytes(), want) {
		t.Fatalf("second run: stdout %q, want %q", stdout.String(), want)
	}
	if !seen.seenOrig[0] {
		t.Errorf("hot()'s jcc at %#x was patched in all %d samples of the logged run: its detour cost every run outside the windows", hotSrc, seen.samples)
	}
	got := false
	for k := range eventKeys(t, second) {
		if k.Src == coldSrc && k.Kind == uint8(formats.KindJccTaken) {
			got = true
		}
	}
	if !got {
		t.Errorf("the logged run did not record cold()'s new outcome (jcc-taken at %#x)", coldSrc)
	}
	t.Logf("%d samples of hot()'s jcc, seen original: %v", seen.samples, seen.seenOrig[0])
}

// TestLogRestoresAtLoad: a patch whose outcomes are all in the log has
// nothing left to record, so the runtime gives it its original bytes
// when the module loads (nothing of it runs yet, so plain stores do,
// even for a patch that straddles a word), and so is a readee whose own
// outcomes are logged once every patch that reads it has its original
// bytes. libsqlite3, rewritten with a budget (switchable patches and
// readees), runs a small workload without a budget, which logs every
// outcome it reaches; a second sqlite3 is then read through
// /proc/PID/mem after start-up, while it waits for input.
func TestLogRestoresAtLoad(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib, "/usr/bin/sqlite3")
	sql, err := os.ReadFile("../../benchmarks/workloads/sqlite.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql = bytes.Replace(sql, []byte("x < 200000"), []byte("x < 2000"), 1)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "sqlite.log")
	out, _ := rewritten(t, lib, dir, rewrite.Options{Budget: "10%", Period: "100ms", Log: logPath})
	env := func(traces string, more ...string) []string {
		return append(append(traceEnv(traces), "LD_LIBRARY_PATH="+dir), more...)
	}
	first := filepath.Join(dir, "first")
	run(t, sql, env(first, "STINT_BUDGET=none"), "/usr/bin/sqlite3", ":memory:")
	logged := eventKeys(t, first)

	_, probes, patches := probesAndPatches(t, out)
	reads, err := ReadsTable(out)
	if err != nil {
		t.Fatal(err)
	}
	// done[i]: every probe of patch i has its outcome in the log
	done := make([]bool, len(patches))
	for i := range done {
		done[i] = true
	}
	mod := filepath.Base(out)
	rets, err := RetsTable(out)
	if err != nil {
		t.Fatal(err)
	}
	// returnLogged: a call with a list of its callee's rets keeps its
	// patch until one of them has logged the return (runtime/src/rets.c;
	// another direct probe's list, call length 0, is its own function's
	// sites, which nothing waits for)
	returnLogged := func(p runtime.Probe) bool {
		off := p.Rets&(1<<28-1) - 1
		if p.Rets == 0 || p.Rets>>28 == 0 || int(off) >= len(rets) {
			return true
		}
		for k := uint32(0); k < rets[off] && int(off+1+k) < len(rets); k++ {
			r := probes[rets[off+1+k]]
			if logged[edge{Kind: r.Kind, Src: r.Src, DstMod: mod, Dst: p.Src + uint64(p.Rets>>28)}] {
				return true
			}
		}
		return false
	}
	for _, p := range probes {
		if int(p.Patch) >= len(patches) {
			continue
		}
		if p.Flags&runtime.PFDirect == 0 || !logged[edge{Kind: p.Kind, Src: p.Src, DstMod: mod, Dst: p.Dst}] || !returnLogged(p) {
			done[p.Patch] = false
		}
	}
	// want[i]: the runtime must have restored patch i at load
	want := make([]bool, len(patches))
	nStraddle := 0
	for i, p := range patches {
		if p.NProbes > 0 && done[i] && p.Flags&runtime.PatchRestorable != 0 {
			want[i] = true
			if p.Addr&^15 != (p.Addr+uint64(p.Len)-1)&^15 {
				nStraddle++
			}
		}
	}
	nRead := 0
	for pass := 0; pass < 4; pass++ {
		readers := map[uint32][]uint32{}
		for _, r := range reads[len(reads)/2:] {
			readers[r.Read] = append(readers[r.Read], r.Reader)
		}
		for i, p := range patches {
			if want[i] || p.Flags&runtime.PatchRead == 0 || !done[i] || len(readers[uint32(i)]) == 0 {
				continue
			}
			free := true
			for _, r := range readers[uint32(i)] {
				free = free && int(r) < len(want) && want[r]
			}
			if free {
				want[i] = true
				nRead++
			}
		}
	}
	if nStraddle == 0 || nRead == 0 {
		t.Fatalf("the first run left %d straddling patches and %d readees to restore at load: this test would not exercise them", nStraddle, nRead)
	}

	second := filepath.Join(dir, "second")
	cmd, stdin, stderr := startSqlite3(t, env(second), ".print ready\n", "ready\n")
	base, mem := openMem(t, cmd.Process.Pid, out)
	bad := 0
	for i, p := range patches {
		if !want[i] {
			continue
		}
		b := make([]byte, p.Len)
		if _, err := mem.ReadAt(b, int64(base+p.Addr)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, p.Orig[:p.Len]) {
			if bad++; bad <= 10 {
				t.Errorf("patch %#x+%d (flags %#x): % x, want its original % x", p.Addr, p.Len, p.Flags, b, p.Orig[:p.Len])
			}
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sqlite3: %v, stderr %q", err, stderr.String())
	}
	n := 0
	for _, w := range want {
		if w {
			n++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d patches with all outcomes logged kept their patch", bad, n)
	}
	t.Logf("%d patches restored at load, %d of them straddling a word, %d readees", n, nStraddle, nRead)
}

// probesAndPatches reads a rewritten file's module record and its probe
// and patch tables.
func probesAndPatches(t *testing.T, path string) (*runtime.Module, []runtime.Probe, []runtime.Patch) {
	t.Helper()
	m, probes, err := Probed(path)
	if err != nil {
		t.Fatal(err)
	}
	_, patches, err := Patched(path)
	if err != nil {
		t.Fatal(err)
	}
	return m, probes, patches
}

// TestColdRets: a skip-covered rewrite starts the rets and indirect jumps
// the log saw switched off (STINT_PATCH_COLD), and new code switches
// them on. The coldret fixture's leaf is only ever called directly; a
// logged run of mode a records its ret's return to call site A. In the
// skip-covered rewrite (with a budget) that ret is cold: mode b's calls
// from A never reach the runtime (no refusal row for the ret, where
// STINT_COLD=0, which leaves it on, gives one), and the new call from B
// switches it on before leaf runs, so that its return to B is recorded
// either way.
func TestColdRets(t *testing.T) {
	bin := fixtures.Build(t, "coldret", fixtures.Variant{Opt: fixtures.O2, PIE: true})
	args := []string{"b", "1000"}
	want, _, _, err := fixtures.Run(bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "coldret.log")
	logged, _ := rewritten(t, bin, dir, rewrite.Options{Log: logPath})
	if _, e, code, err := fixtures.Run(logged, []string{"a", "1000"}, traceEnv(filepath.Join(dir, "t0"))); err != nil || code != 0 || len(e) != 0 {
		t.Fatalf("logged run: exit %d, %v, %q", code, err, e)
	}
	l, _ := readLog(t, logPath)
	seen := map[[2]uint64]bool{} // (src, kind) with a logged outcome
	for _, id := range l.BuildIDs() {
		for _, e := range l.Modules[id] {
			seen[[2]uint64{e.A, uint64(e.Kind)}] = true
		}
	}
	skipDir := t.TempDir()
	out, st := rewritten(t, bin, skipDir, rewrite.Options{SkipCovered: coverage(t, "--skip-covered", logPath), Budget: "10%", Period: "100ms"})
	lo, hi := funcRange(t, bin, "leaf")
	bLo, bHi := funcRange(t, bin, "site_b")
	mod, probes, patches := probesAndPatches(t, out)
	if mod.Flags&runtime.MFCold == 0 {
		t.Errorf("skip-covered rewrite: module flags %#x lack STINT_MF_COLD", mod.Flags)
	}
	if lm, _, _ := probesAndPatches(t, logged); lm.Flags&runtime.MFCold != 0 {
		t.Errorf("rewrite without --skip-covered: module flags %#x have STINT_MF_COLD", lm.Flags)
	}
	var ret uint64
	var retFlags uint8
	probesOf := map[uint32][]runtime.Probe{}
	for _, p := range probes {
		if int(p.Patch) < len(patches) {
			probesOf[p.Patch] = append(probesOf[p.Patch], p)
		}
		if runtime.Kind(p.Kind) == runtime.KRet && p.Src >= lo && p.Src < hi && int(p.Patch) < len(patches) {
			ret, retFlags = p.Src, patches[p.Patch].Flags
		}
	}
	if ret == 0 {
		t.Fatal("leaf's ret is not patched in the skip-covered rewrite")
	}
	if retFlags&runtime.PatchCold == 0 {
		t.Fatalf("leaf's ret %#x has patch flags %#x, want STINT_PATCH_COLD", ret, retFlags)
	}
	// Every cold patch: switchable, not a sync site or readee, and every
	// probe of it a ret or indirect jump (or syscall) the log saw.
	nCold := 0
	for k, pt := range patches {
		if pt.Flags&runtime.PatchCold == 0 {
			continue
		}
		nCold++
		if pt.Flags&runtime.PatchSwitch == 0 || pt.Flags&(runtime.PatchSync|runtime.PatchRead) != 0 {
			t.Errorf("cold patch %d at %#x has flags %#x", k, pt.Addr, pt.Flags)
		}
		for _, p := range probesOf[uint32(k)] {
			switch runtime.Kind(p.Kind) {
			case runtime.KRet, runtime.KIndJmp, runtime.KSyscall:
			default:
				t.Errorf("cold patch %d at %#x has a probe of kind %d at %#x", k, pt.Addr, p.Kind, p.Src)
			}
			if !seen[[2]uint64{p.Src, uint64(p.Kind)}] {
				t.Errorf("cold patch %d: probe at %#x (kind %d) has no logged outcome", k, p.Src, p.Kind)
			}
		}
	}
	if nCold != st.Cold {
		t.Errorf("%d cold patches, stats say %d", nCold, st.Cold)
	}
	// the module's cold list: exactly the probes of its cold patches, in
	// order (the runtime lists them off at load from it alone)
	var wantCold []uint32
	for i, p := range probes {
		if int(p.Patch) < len(patches) && patches[p.Patch].Flags&runtime.PatchCold != 0 {
			wantCold = append(wantCold, uint32(i))
		}
	}
	if _, list, err := moduleTable[uint32](out, func(m *runtime.Module) (uint64, uint32) { return m.ColdVaddr, m.NCold }); err != nil || !slices.Equal(list, wantCold) {
		t.Errorf("cold list %v (%v), want the cold patches' probes %v", list, err, wantCold)
	}
	run := func(env ...string) (refused, toB bool) {
		d := t.TempDir()
		lp := filepath.Join(d, "log")
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		traces := filepath.Join(d, "traces")
		got, e, code, err := fixtures.Run(out, args, append(append(traceEnv(traces), "STINT_LOG="+lp), env...))
		if err != nil || code != 0 || !bytes.Equal(got, want) || len(e) != 0 {
			t.Fatalf("skip-covered coldret %v: %q, exit %d, %v, stderr %q; want %q", env, got, code, err, e, want)
		}
		trs := readTraces(t, traces)
		if len(trs) != 1 {
			t.Fatalf("%d traces, want 1", len(trs))
		}
		for _, ev := range trs[0].Events {
			switch {
			case ev.Kind == formats.KindRefusedBase+formats.KindRet && ev.Src == ret:
				refused = true
			case ev.Kind == formats.KindRet && ev.Src == ret && ev.Dst >= bLo && ev.Dst < bHi:
				toB = true
			}
		}
		return refused, toB
	}
	if refused, toB := run(); refused || !toB {
		t.Errorf("cold: leaf's ret refused a logged return %v (want false), recorded its return to site_b %v (want true)", refused, toB)
	}
	if refused, toB := run("STINT_COLD=0"); !refused || !toB {
		t.Errorf("STINT_COLD=0: leaf's ret refused a logged return %v (want true: the test cannot tell otherwise), recorded its return to site_b %v (want true)", refused, toB)
	}
}

// TestLogLoadList: a --skip-covered rewrite lists the direct probes whose
// outcome its log has, with a digest of the log (STINT_MF_LOGGED), so
// that a run whose log is still that one retires them without looking
// up every probe, and with the log's length and last block, so that it
// reads only what was appended to that file (a lazy start); any other
// log is read whole and looked up in full. spin's logged run without one
// outcome of a jcc it runs (OLD), rewritten with --edges none so that
// the jcc stays patched with its other outcome listed:
//   - with OLD, the runtime takes the list, reads nothing past the
//     header, and the missing outcome is recorded; the trace is the one
//     a forced full read and lookup gives;
//   - with OLD and that outcome appended, it reads the appended block
//     alone, looks every probe up in it, and does not record it;
//   - with the full log (another file, one entry more) it reads it whole
//     and looks every probe up, and the outcome is not recorded.
func TestLogLoadList(t *testing.T) {
	args := []string{"5"}
	bin, nOut, _, logPath, _ := spinLogged(t, args)
	l, _ := readLog(t, logPath)
	var bid string
	for _, id := range l.BuildIDs() {
		bid = id
	}
	raw, _ := redlog.ParseBuildID(bid)
	var drop redlog.Entry
	var old []redlog.Entry
	for _, e := range l.Modules[bid] {
		if k := runtime.Kind(e.Kind); drop.A == 0 && (k == runtime.KJccTaken || k == runtime.KJccNotTaken) {
			drop = e
			continue
		}
		old = append(old, e)
	}
	if drop.A == 0 {
		t.Fatal("the logged run has no jcc outcome")
	}
	dir := t.TempDir()
	oldPath := filepath.Join(dir, "old.log")
	writeLog(t, oldPath, raw, old)
	out, _ := rewritten(t, bin, dir, rewrite.Options{SkipCovered: coverage(t, "--skip-covered", oldPath), Edges: "none", Budget: "10%", Period: "100ms"})
	mod, probes, err := Probed(out)
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[redlog.Entry]bool{}
	for _, e := range old {
		distinct[e] = true
	}
	if mod.Flags&runtime.MFLogged == 0 || mod.LogCount != uint32(len(distinct)) || mod.NLogged == 0 {
		t.Fatalf("module: flags %#x, log count %d (want %d), %d probes listed", mod.Flags, mod.LogCount, len(distinct), mod.NLogged)
	}
	// run with log path lp (a copy), the test hook set to hook; returns
	// the hook's line and the trace's events and refusals
	type key struct {
		kind           formats.Kind
		srcMod, dstMod uint16
		src, dst, val  uint64
	}
	run := func(name, lp, hook string) (string, map[key]bool) {
		cp := filepath.Join(dir, name+".log")
		b, err := os.ReadFile(lp)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		traces := filepath.Join(dir, name)
		env := append(traceEnv(traces), "STINT_LOG="+cp, runtime.TestLogLoadEnv+"="+hook)
		o, e, code, err := fixtures.Run(out, args, env)
		if err != nil || code != 0 || !bytes.Equal(o, nOut) {
			t.Fatalf("%s: exit %d, %v, stdout %q (want %q), stderr %q", name, code, err, o, nOut, e)
		}
		evs := map[key]bool{}
		for _, tr := range readTraces(t, traces) {
			for _, ev := range tr.Events {
				if eventOrRefusal(ev.Kind) {
					evs[key{ev.Kind, ev.SrcModule, ev.DstModule, ev.Src, ev.Dst, ev.Value}] = true
				}
			}
		}
		return strings.TrimSpace(string(e)), evs
	}
	probed := false
	for _, p := range probes {
		probed = probed || p.Src == drop.A && p.Dst == drop.B && uint32(p.Kind) == drop.Kind && p.Flags&runtime.PFDirect != 0
	}
	if !probed {
		t.Fatalf("the dropped outcome %+v has no probe in the rewrite", drop)
	}
	// recorded: whether evs has the dropped outcome as an event
	recorded := func(evs map[key]bool) bool {
		for k := range evs {
			if k.kind == formats.Kind(drop.Kind) && k.src == drop.A && k.dst == drop.B && k.srcMod == k.dstMod {
				return true
			}
		}
		return false
	}
	if mod.LogEnd == 0 || mod.NSeen == 0 {
		t.Fatalf("module: log end %d, %d seen keys: no lazy start", mod.LogEnd, mod.NSeen)
	}
	wantList := fmt.Sprintf("stint: test: log load: lazy list %d", mod.NLogged)
	wantScan := fmt.Sprintf("stint: test: log load: scan %d", mod.NProbes)
	said, listed := run("list", oldPath, "1")
	if said != wantList {
		t.Errorf("with the rewrite's log: %q, want %q", said, wantList)
	}
	if !recorded(listed) {
		t.Errorf("with the rewrite's log, the outcome it lacks (%+v) was not recorded", drop)
	}
	// what the lazy start knows of returns, indirect branches and
	// syscalls it knows from the seen table alone
	open := 0
	for k := range listed {
		if base, ok := k.kind.Refused(); ok && base != formats.KindJccTaken && base != formats.KindJccNotTaken && base != formats.KindJmp && base != formats.KindCall {
			open++
		}
	}
	if open == 0 {
		t.Error("the lazy start refused no logged return, indirect branch or syscall: nothing asked its seen table")
	}
	said, scanned := run("scan", oldPath, "2")
	if said != wantScan {
		t.Errorf("forced lookup: %q, want %q", said, wantScan)
	}
	if len(listed) != len(scanned) {
		t.Errorf("the list's run wrote %d distinct events and refusals, the full lookup's %d", len(listed), len(scanned))
	}
	for ev := range scanned {
		if !listed[ev] {
			t.Errorf("the full lookup's run wrote %+v, the list's did not", ev)
		}
	}
	appended := filepath.Join(dir, "appended.log")
	b, err := os.ReadFile(oldPath)
	if err == nil {
		b, err = redlog.AppendBlocks(b, raw, []redlog.Entry{drop})
	}
	if err == nil {
		err = os.WriteFile(appended, b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	said, tail := run("appended", appended, "1")
	if want := fmt.Sprintf("stint: test: log load: lazy list %d, scan %d", mod.NLogged, mod.NProbes); said != want {
		t.Errorf("with the rewrite's log appended to: %q, want %q", said, want)
	}
	if recorded(tail) {
		t.Errorf("with the rewrite's log appended to, its new outcome %+v was recorded again", drop)
	}
	said, full := run("grown", logPath, "1")
	if said != wantScan {
		t.Errorf("with another log, grown since the rewrite: %q, want %q", said, wantScan)
	}
	if recorded(full) {
		t.Errorf("with another log, grown since the rewrite, its new outcome %+v was recorded again", drop)
	}
	t.Logf("%d probes, %d listed; %d events and refusals", mod.NProbes, mod.NLogged, len(listed))
}
