package rewrite

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// End-to-end checks: the rewritten program must behave exactly as the
// original (stdout, stderr, exit status) and leave a trace file.

const fixtureC = `
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }
static int add(int a, int b) { return a + b; }
static int sub(int a, int b) { return a - b; }
static int mul(int a, int b) { return a * b; }
static int xor_(int a, int b) { return a ^ b; }
typedef int (*op_fn)(int, int);
static op_fn ops[] = {add, sub, mul, xor_};
static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) static int sw(int x) {
	switch (x % 9) {
	case 0: return x * 3;
	case 1: return x + 7;
	case 2: return x ^ 0x55;
	case 3: return x - 100;
	case 4: return x << 2;
	case 5: return x >> 1;
	case 6: return -x;
	case 7: return x | 1;
	default: return 42;
	}
}
static jmp_buf jb;
__attribute__((noinline)) static void thrower(int d) {
	if (!d)
		longjmp(jb, 7);
	thrower(d - 1);
}
int main(int argc, char **argv) {
	int a[64];
	for (int i = 0; i < 64; i++)
		a[i] = (i * 7919) % 101;
	qsort(a, 64, sizeof a[0], cmp);
	printf("sorted %d %d %d\n", a[0], a[31], a[63]);
	int acc = argc;
	for (int i = 0; i < 1000; i++)
		acc = ops[(i + argc) & 3](acc, i) & 0xffffff;
	printf("ops %d fib %d\n", acc, fib(22));
	long s = 0;
	for (int i = 0; i < 5000; i++)
		s += sw(i);
	printf("switch %ld\n", s);
	int r = setjmp(jb);
	if (r == 0)
		thrower(10);
	printf("longjmp %d\n", r);
	char buf[64];
	int n = snprintf(buf, sizeof buf, "write %zu\n", strlen(argv[0]) > 0 ? (size_t)argc : 0);
	write(1, buf, n);
	fprintf(stderr, "stderr line\n");
	return 3;
}
`

const fixtureCXX = `
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>
#include <algorithm>
struct Shape { virtual ~Shape() {} virtual int area() const = 0; };
struct Sq : Shape { int s; Sq(int s) : s(s) {} int area() const override { return s * s; } };
struct Re : Shape { int w, h; Re(int w, int h) : w(w), h(h) {} int area() const override { return w * h; } };
__attribute__((noinline)) int deep(int n) {
	if (n == 0) throw std::runtime_error("bottom");
	return deep(n - 1) + 1;
}
int main() {
	std::vector<Shape *> v;
	for (int i = 0; i < 50; i++) v.push_back(i % 2 ? (Shape *)new Sq(i) : (Shape *)new Re(i, 3));
	long t = 0;
	for (auto *s : v) t += s->area();
	std::sort(v.begin(), v.end(), [](Shape *a, Shape *b) { return a->area() < b->area(); });
	std::printf("total %ld first %d\n", t, v[0]->area());
	try { deep(20); } catch (const std::exception &e) { std::printf("caught %s\n", e.what()); }
	for (auto *s : v) delete s;
	return 0;
}
`

type runResult struct {
	stdout, stderr []byte
	code           int
}

func runProg(t *testing.T, env []string, stdin []byte, path string, args ...string) runResult {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode() // -1 if killed by a signal
		if code < 0 {
			e.WriteString("[" + ee.String() + "]")
		}
	} else if err != nil {
		t.Fatalf("run %s: %v", path, err)
	}
	return runResult{o.Bytes(), e.Bytes(), code}
}

// compareRun runs orig and rewritten and compares their behaviour; it
// returns the trace files written.
func compareRun(t *testing.T, orig, rewritten string, env []string, stdin []byte, args ...string) []string {
	t.Helper()
	return compareRunEnv(t, orig, rewritten, env, env, stdin, args...)
}

func compareRunEnv(t *testing.T, orig, rewritten string, envOrig, envRw []string, stdin []byte, args ...string) []string {
	t.Helper()
	traces := t.TempDir()
	want := runProg(t, envOrig, stdin, orig, args...)
	have := runProg(t, append(envRw, "STINT_OUT="+traces), stdin, rewritten, args...)
	if have.code != want.code {
		t.Errorf("exit status: have %d, want %d (stderr %q)", have.code, want.code, have.stderr)
	}
	if !bytes.Equal(have.stdout, want.stdout) {
		t.Errorf("stdout differs: have %d bytes, want %d\nhave %q\nwant %q", len(have.stdout), len(want.stdout), trunc(have.stdout), trunc(want.stdout))
	}
	if !bytes.Equal(have.stderr, want.stderr) {
		t.Errorf("stderr differs:\nhave %q\nwant %q", trunc(have.stderr), trunc(want.stderr))
	}
	files, _ := filepath.Glob(filepath.Join(traces, "*.arrow"))
	return files
}

func trunc(b []byte) []byte {
	if len(b) > 300 {
		return b[:300]
	}
	return b
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed", name)
	}
	return p
}

func TestRunFixtures(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs programs; skipped with -short")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fixture.c")
	if err := os.WriteFile(src, []byte(fixtureC), 0o644); err != nil {
		t.Fatal(err)
	}
	cxx := filepath.Join(dir, "fixture.cc")
	if err := os.WriteFile(cxx, []byte(fixtureCXX), 0o644); err != nil {
		t.Fatal(err)
	}
	builds := []struct {
		name     string
		compiler string
		src      string
		flags    []string
	}{
		{"O0-nopie", "gcc", src, []string{"-O0", "-no-pie", "-fno-pie"}},
		{"O2-pie", "gcc", src, []string{"-O2", "-pie", "-fpie"}},
		{"O2-nopie-cet", "gcc", src, []string{"-O2", "-no-pie", "-fno-pie", "-fcf-protection"}},
		{"O2-pie-noplt", "gcc", src, []string{"-O2", "-pie", "-fpie", "-fno-plt"}},
		{"O2-static", "gcc", src, []string{"-O2", "-static"}},
		{"cxx-O2", "g++", cxx, []string{"-O2"}},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			cc := needTool(t, b.compiler)
			bin := filepath.Join(dir, b.name)
			args := append(append([]string{}, b.flags...), "-o", bin, b.src)
			if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
				t.Skipf("cannot build fixture: %v\n%s", err, out)
			}
			for _, tool := range []Tool{ToolBranch, ToolCall, ToolSyscall, ToolBlock} {
				t.Run(tool.String(), func(t *testing.T) {
					rw := filepath.Join(dir, b.name+"."+tool.String())
					st, err := RewriteFile(bin, rw, Options{Tool: tool})
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("%s: %d sites, patched %v, failed %d", tool, st.Sites, st.Patched, st.Failed)
					traces := compareRun(t, bin, rw, nil, nil, "x", "y")
					if len(traces) != 1 {
						t.Errorf("%d trace files, want 1", len(traces))
					}
				})
			}
		})
	}
}

// TestRunCtorCallback: a library constructor calls into the executable
// before the executable's entry point runs; its patched code must already
// work then (the runtime starts from DT_PREINIT_ARRAY).
func TestRunCtorCallback(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs programs; skipped with -short")
	}
	cc := needTool(t, "gcc")
	dir := t.TempDir()
	lib := `
extern int exe_callback(int);
int lib_value;
__attribute__((constructor)) static void init(void) { lib_value = exe_callback(1000); }
`
	exe := `
#include <stdio.h>
extern int lib_value;
__attribute__((noinline)) int exe_callback(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += (i & 1) ? i : (i & 4) ? -i : 3;
	return s;
}
int main(void) { printf("lib_value %d again %d\n", lib_value, exe_callback(10)); return 0; }
`
	for name, src := range map[string]string{"lib.c": lib, "exe.c": exe} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"-O1", "-shared", "-fPIC", "-o", "libcb.so", "lib.c"},
		{"-O1", "-rdynamic", "-o", "exe", "exe.c", "-L.", "-lcb", "-Wl,-rpath," + dir},
	} {
		c := exec.Command(cc, args...)
		c.Dir = dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Skipf("cannot build: %v\n%s", err, out)
		}
	}
	for _, tool := range []Tool{ToolBranch, ToolBlock} {
		rw := filepath.Join(dir, "exe."+tool.String())
		st, err := RewriteFile(filepath.Join(dir, "exe"), rw, Options{Tool: tool})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: patched %v", tool, st.Patched)
		compareRun(t, filepath.Join(dir, "exe"), rw, nil, nil)
	}
}

func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("runs programs; skipped with -short")
	}
	rw := filepath.Join(t.TempDir(), "tiny")
	if _, err := RewriteFile("testdata/tiny", rw, Options{}); err != nil {
		t.Fatal(err)
	}
	compareRun(t, "testdata/tiny", rw, nil, nil)
}

func TestRunGzip(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gzip; skipped with -short")
	}
	input := readInput(t, gzipPath) // compress gzip itself
	for _, tool := range []Tool{ToolBranch, ToolBlock} {
		t.Run(tool.String(), func(t *testing.T) {
			rw := filepath.Join(t.TempDir(), "gzip")
			st, err := RewriteFile(gzipPath, rw, Options{Tool: tool})
			if err != nil {
				t.Fatal(err)
			}
			if tool == ToolBranch && st.Failed != 0 { // .fini's ret too: the finaliser records it
				for why, r := range st.Reasons {
					t.Errorf("%d sites left unprobed: %s (%v)", r.Count, why, r.First)
				}
			}
			if len(compareRun(t, gzipPath, rw, nil, input, "-c", "-9")) != 1 {
				t.Error("no trace file")
			}
			var zipped bytes.Buffer
			c := exec.Command(gzipPath, "-c")
			c.Stdin, c.Stdout = bytes.NewReader(input), &zipped
			if err := c.Run(); err != nil {
				t.Fatal(err)
			}
			compareRun(t, gzipPath, rw, nil, zipped.Bytes(), "-dc")
			compareRun(t, gzipPath, rw, []string{"STINT_DISABLE=1"}, input, "-c")
		})
	}
}

// sqliteLib is the shared object the sqlite3 tests rewrite.
const sqliteLib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"

// rewrittenSqlite rewrites libsqlite3 into a new directory for a test
// that runs the sqlite3 shell against it (skipped with -short): the
// directory for LD_LIBRARY_PATH, the shell, the rewrite's stats.
func rewrittenSqlite(t *testing.T) (dir, shell string, st *Stats) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs sqlite3; skipped with -short")
	}
	readInput(t, sqliteLib)
	shell = needTool(t, "sqlite3")
	dir = t.TempDir()
	st, err := RewriteFile(sqliteLib, filepath.Join(dir, "libsqlite3.so.0"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return dir, shell, st
}

// TestRunSharedSqlite rewrites libsqlite3 and runs the sqlite3 shell
// against it.
func TestRunSharedSqlite(t *testing.T) {
	dir, shell, _ := rewrittenSqlite(t)
	sql := "create table t(a integer, b text);" +
		"with recursive c(x) as (select 1 union all select x+1 from c where x < 2000) insert into t select x, printf('%08x-%d', x*2654435761 % 4294967296, x) from c;" +
		"select count(*), sum(a), max(b) from t where a % 7 = 3;" +
		"select group_concat(b, ',') from (select b from t order by b desc limit 5);"
	traces := compareRunEnv(t, shell, shell, nil, []string{"LD_LIBRARY_PATH=" + dir}, []byte(sql), ":memory:")
	if len(traces) != 1 {
		t.Errorf("%d trace files, want 1", len(traces))
	}
	// Make sure the rewritten library is the one loaded.
	out, _ := exec.Command("env", "LD_LIBRARY_PATH="+dir, "ldd", shell).Output()
	if !strings.Contains(string(out), dir) {
		t.Errorf("ldd does not show the rewritten library:\n%s", out)
	}
}

const gzipPath = "/usr/bin/gzip"

func readInput(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("need %s: %v", path, err)
	}
	return b
}
