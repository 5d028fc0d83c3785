package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/rewrite"
)

const libdir = "/usr/lib/x86_64-linux-gnu"

// need skips the test when a program or library of this machine is missing.
func need(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s not installed (scripts/setup.sh installs it)", p)
		}
	}
}

// run runs argv with stdin and extra environment and returns stdout; a
// failure or any stderr output fails the test.
func run(t *testing.T, stdin []byte, env []string, argv ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\nstderr: %s", argv, err, clip(errb.Bytes()))
	}
	if errb.Len() > 0 {
		t.Errorf("%v wrote to stderr: %s", argv, clip(errb.Bytes()))
	}
	return out.Bytes()
}

// input returns n bytes of something worth compressing: this machine's
// own binaries and text, deterministic for a given machine.
func input(t *testing.T, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, f := range []string{"/usr/bin/gzip", "/etc/services", "/usr/bin/xz", "/etc/protocols"} {
		data, err := os.ReadFile(f)
		if err == nil {
			b.Write(data)
		}
	}
	if b.Len() == 0 {
		t.Fatal("no input files")
	}
	for b.Len() < n {
		b.Write(b.Bytes()[:min(b.Len(), n-b.Len())])
	}
	return b.Bytes()[:n]
}

// checkLibTraces requires traces in dir whose events from the rewritten
// module are all probed sites, and returns how many such events there were.
func checkLibTraces(t *testing.T, rewrittenPath, dir string) int {
	t.Helper()
	m, probes, err := Probed(rewrittenPath)
	if err != nil {
		t.Fatal(err)
	}
	probed := probedKinds(probes)
	trs := readTraces(t, dir)
	if len(trs) == 0 {
		t.Fatalf("no trace written to %s", dir)
	}
	set, _ := traceEdges(t, trs, fmt.Sprintf("%x", m.BuildID[:m.BuildIDLen]))
	for e := range set {
		if !probed[[2]uint64{e.Src, uint64(e.Kind)}] {
			t.Errorf("event %v: not a probed site", e)
		}
	}
	if len(set) == 0 {
		t.Errorf("no event from the rewritten module %s", filepath.Base(rewrittenPath))
	}
	return len(set)
}

func TestGzipRoundTrip(t *testing.T) {
	need(t, "/usr/bin/gzip")
	dir := t.TempDir()
	gz, st := rewritten(t, "/usr/bin/gzip", dir, rewrite.Options{})
	t.Logf("gzip: %d of %d sites patched", st.PatchedTotal(), st.Sites)
	data := input(t, 3<<20)
	traces := filepath.Join(dir, "traces")
	env := []string{"STINT_OUT=" + traces}
	native := run(t, data, nil, "/usr/bin/gzip", "-c")
	packed := run(t, data, env, gz, "-c")
	if !bytes.Equal(native, packed) {
		t.Fatalf("rewritten gzip output differs from native (%d vs %d bytes)", len(packed), len(native))
	}
	unpacked := run(t, packed, env, gz, "-d", "-c")
	if !bytes.Equal(unpacked, data) {
		t.Fatalf("rewritten gunzip did not restore the input")
	}
	n := checkLibTraces(t, gz, traces)
	t.Logf("gzip: %d distinct events over 2 runs", n)
}

// libTest rewrites lib into a directory that is put on LD_LIBRARY_PATH
// and runs the program natively and with the rewritten library.
func libTest(t *testing.T, lib string, stdin []byte, argv ...string) *rewrite.Stats {
	return libTestOpts(t, lib, rewrite.Options{}, stdin, argv...)
}

func libTestOpts(t *testing.T, lib string, opts rewrite.Options, stdin []byte, argv ...string) *rewrite.Stats {
	out, st, traces := libRun(t, lib, opts, stdin, argv...)
	t.Logf("%s: %d of %d sites patched", lib, st.PatchedTotal(), st.Sites)
	n := checkLibTraces(t, out, traces)
	t.Logf("%s: %d distinct events", lib, n)
	return st
}

// TestRewrittenLibc: libc.so.6 itself. Its IFUNC resolvers run while
// ld.so relocates and __libc_early_init before any initializer, so
// before the runtime maps the module's stubs; the rewriter leaves that
// code alone (it used to crash every program). gzip's output must not
// change, libc's events must come from probed sites, and the reserved
// code must be reported.
func TestRewrittenLibc(t *testing.T) {
	for _, tool := range []rewrite.Tool{rewrite.ToolSyscall, rewrite.ToolBranch} {
		t.Run(tool.String(), func(t *testing.T) {
			st := libTestOpts(t, "libc.so.6", rewrite.Options{Tool: tool}, input(t, 1<<20), "/usr/bin/gzip", "-c")
			early := 0
			for why, r := range st.Reasons {
				if strings.Contains(why, "before the module's initializer") {
					early += r.Count
				}
			}
			if early == 0 {
				t.Errorf("no site of libc reported as running before its initializer (reasons: %v)", st.Reasons)
			}
		})
	}
	// Beside a rewritten executable, whose runtime starts first (its
	// DT_PREINIT_ARRAY hook) and maps the trace file: that mapping used
	// to land where libc's stub chunks go (EEXIST on stderr, libc's
	// sites left unprobed and no libc events).
	t.Run("rewritten gzip", func(t *testing.T) {
		need(t, "/usr/bin/gzip")
		gz, _ := rewritten(t, "/usr/bin/gzip", t.TempDir(), rewrite.Options{Tool: rewrite.ToolSyscall})
		libTestOpts(t, "libc.so.6", rewrite.Options{Tool: rewrite.ToolSyscall}, input(t, 1<<20), gz, "-c")
	})
}

func TestBzip2WithRewrittenLibbz2(t *testing.T) {
	libTest(t, "libbz2.so.1.0", input(t, 2<<20), "/usr/bin/bzip2", "-c")
}

func TestXzWithRewrittenLiblzma(t *testing.T) {
	libTest(t, "liblzma.so.5", input(t, 2<<20), "/usr/bin/xz", "-c")
}

func TestSqlite3WithRewrittenLibsqlite3(t *testing.T) {
	sql, err := os.ReadFile("../../benchmarks/workloads/sqlite.sql")
	if err != nil {
		t.Fatal(err)
	}
	libTest(t, "libsqlite3.so.0", sql, "/usr/bin/sqlite3", ":memory:")
}

// startSqlite3 starts sqlite3 :memory: with env, writes input to it and
// waits until its output begins with want. It returns the running
// command, its stdin (closing it lets sqlite3 exit) and its stderr; the
// process is killed when the test ends.
func startSqlite3(t *testing.T, env []string, input, want string) (*exec.Cmd, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command("/usr/bin/sqlite3", ":memory:")
	cmd.Env = env
	stdin, _, stderr := startWaiting(t, cmd, input, want)
	return cmd, stdin, stderr
}

// startWaiting starts cmd (killed and reaped at the test's end), writes input to
// its stdin and reads what it prints until want, which must be all of
// it: a program that then waits for more input, to be looked at. It
// returns stdin (open), stdout (the rest) and stderr.
func startWaiting(t *testing.T, cmd *exec.Cmd, input, want string) (io.WriteCloser, io.Reader, *bytes.Buffer) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// killed and reaped: a zombie left to the test process makes the
	// oracle's waits, which see every child's exit, spin on it for good
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait() // an error when the test waited already
	})
	if _, err := stdin.Write([]byte(input)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(stdout, got); err != nil || string(got) != want {
		t.Fatalf("%s said %q (%v), stderr %q", filepath.Base(cmd.Path), got, err, stderr.String())
	}
	return stdin, stdout, stderr
}

// TestTraceEndMarker: a finished row trace ends with the end-of-stream
// marker however its last batch falls against the file's growth steps
// (a last batch that ended the file exactly once left it out: 2 of these
// 10 sizes).
func TestTraceEndMarker(t *testing.T) {
	need(t, "/usr/bin/gzip")
	dir := t.TempDir()
	gz, _ := rewritten(t, "/usr/bin/gzip", dir, rewrite.Options{Tool: rewrite.ToolCall, Every: true, Rows: true})
	data := input(t, 500000)
	for i, n := range []int{1000, 20000, 50000, 100000, 150000, 200000, 250000, 300000, 400000, 500000} {
		traces := filepath.Join(dir, fmt.Sprint("traces", i))
		run(t, data[:n], []string{"STINT_OUT=" + traces}, gz, "-c")
		names, _ := filepath.Glob(filepath.Join(traces, "*.arrow"))
		if len(names) != 1 {
			t.Fatalf("%d bytes: %d traces", n, len(names))
		}
		tr, err := formats.ReadFile(names[0])
		if err != nil {
			t.Fatal(err)
		}
		if tr.End != formats.EndMarker {
			t.Errorf("%d bytes of input: the trace ends with %s, want the marker", n, tr.End)
		}
	}
}

// TestLibraryRunEnds: with only a library rewritten, the run still ends
// at exit (the library's finalizer does it when no rewritten executable
// will): block counts are written, and a compact trace's paths file gets
// its end marker. Before, both were lost: a counted libbz2 left no count.
func TestLibraryRunEnds(t *testing.T) {
	data := input(t, 1<<20)
	t.Run("counts", func(t *testing.T) {
		_, _, traces := libRun(t, "libbz2.so.1.0", rewrite.Options{Tool: rewrite.ToolBlock, Counts: true}, data, "/usr/bin/bzip2", "-c")
		blocks, ends := 0, 0
		for _, tr := range readTraces(t, traces) {
			for _, e := range tr.Events {
				switch e.Kind {
				case formats.KindBlockCount:
					blocks++
				case formats.KindRunEnd:
					ends++
				}
			}
		}
		if blocks == 0 || ends != 1 {
			t.Errorf("%d block counts and %d run ends, want counts and one end", blocks, ends)
		}
	})
	t.Run("compact", func(t *testing.T) {
		_, _, traces := libRun(t, "libbz2.so.1.0", rewrite.Options{Tool: rewrite.ToolCall, Every: true}, data, "/usr/bin/bzip2", "-c")
		names, _ := filepath.Glob(filepath.Join(traces, "*"+formats.PathsSuffix))
		if len(names) != 1 {
			t.Fatalf("%d paths files, want 1", len(names))
		}
		f, err := os.Open(names[0])
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pr, err := formats.NewPathsReader(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for pr.Next() {
			n++
		}
		if pr.Err() != nil || pr.End() != formats.EndMarker || n == 0 {
			t.Errorf("%d chunks, end %v, err %v: want chunks and the end marker", n, pr.End(), pr.Err())
		}
	})
}

// libRun rewrites lib with opts into a directory put on
// LD_LIBRARY_PATH, runs argv natively and with it, requires the same
// output, and returns the rewritten library, its stats and the trace
// directory.
func libRun(t *testing.T, lib string, opts rewrite.Options, stdin []byte, argv ...string) (string, *rewrite.Stats, string) {
	t.Helper()
	need(t, filepath.Join(libdir, lib), argv[0])
	dir := t.TempDir()
	out, st := rewritten(t, filepath.Join(libdir, lib), dir, opts)
	traces := filepath.Join(dir, "traces")
	native := run(t, stdin, nil, argv...)
	traced := run(t, stdin, []string{"LD_LIBRARY_PATH=" + dir, "STINT_OUT=" + traces}, argv...)
	if !bytes.Equal(native, traced) {
		t.Fatalf("output with rewritten %s differs from native (%d vs %d bytes)", lib, len(traced), len(native))
	}
	return out, st, traces
}
