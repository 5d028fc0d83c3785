package oracle

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stint-project/stint/internal/fixtures"
)

// Single-stepping is slow; these tests run only without -short and use
// static fixtures, whose start-up is short (no ld.so).
var (
	staticNoPIE = fixtures.Variant{Opt: fixtures.O2, Static: true}
	asmNoPIE    = fixtures.Variant{Opt: fixtures.O0, Static: true}
	asmPIE      = fixtures.Variant{Opt: fixtures.O0, Static: true, PIE: true}
)

func recordT(t *testing.T, o Options) *Result {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 8 * time.Minute
	}
	res, err := RecordWith(o)
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("ptrace not permitted here: %v", err)
	}
	if err != nil {
		t.Fatalf("RecordWith(%s): %v", o.Path, err)
	}
	return res
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("single-steps a program; skipped under -short")
	}
}

// symbol returns the link vaddr and size of a symbol of the ELF file path.
func symbol(t *testing.T, path, name string) (uint64, uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s.Value, s.Size
		}
	}
	t.Fatalf("%s: no function %s", path, name)
	return 0, 0
}

func count(evs []Event, f func(Event) bool) int {
	n := 0
	for _, e := range evs {
		if f(e) {
			n++
		}
	}
	return n
}

// TestRecordLoop3 checks every event of loop3.S, whose branches are known
// by construction: the loop's jnz is taken twice and not taken once.
func TestRecordLoop3(t *testing.T) {
	skipShort(t)
	for _, v := range []fixtures.Variant{asmNoPIE, asmPIE} {
		t.Run(v.String(), func(t *testing.T) {
			path := fixtures.Build(t, "loop3", v)
			res := recordT(t, Options{Path: path})
			if res.ExitCode != 3 || string(res.Stdout) != "ok\n" {
				t.Fatalf("exit %d stdout %q; want 3 %q", res.ExitCode, res.Stdout, "ok\n")
			}
			if len(res.Processes) != 1 {
				t.Fatalf("processes: have %d, want 1", len(res.Processes))
			}
			p := res.Processes[0]
			if p.Module == "" {
				t.Fatal("module not found in the maps")
			}
			if (p.Base == 0) == v.PIE {
				t.Errorf("base %#x for PIE=%v", p.Base, v.PIE)
			}
			s, _ := symbol(t, path, "_start")
			c, _ := symbol(t, path, "count3")
			at := func(off uint64) Loc { return Loc{Module: p.Module, Off: off} }
			blk := func(a uint64) Event { return Event{Kind: Block, Src: a, Dst: at(a)} }
			loop, jnz, ret := c+7, c+13, c+15
			want := []Event{
				blk(s),
				{Kind: Call, Src: s, Dst: at(c)},
				blk(c),
				{Kind: JccTaken, Src: jnz, Dst: at(loop)},
				blk(loop),
				{Kind: JccTaken, Src: jnz, Dst: at(loop)},
				blk(loop),
				{Kind: JccNotTaken, Src: jnz, Dst: at(ret)},
				blk(ret),
				{Kind: Ret, Src: ret, Dst: at(s + 5)},
				blk(s + 5),
				{Kind: Syscall, Src: s + 0x1d, Value: 1},
				{Kind: Syscall, Src: s + 0x26, Value: 60},
			}
			have := p.Threads[p.Pid]
			if !reflect.DeepEqual(have, want) {
				t.Errorf("events:\nhave %v\nwant %v", have, want)
			}
			if have, want := res.Edges[Event{Kind: JccTaken, Src: jnz, Dst: at(loop)}], 2; have != want {
				t.Errorf("jcc taken: have %d, want %d", have, want)
			}
			if have, want := res.Edges[Event{Kind: JccNotTaken, Src: jnz, Dst: at(ret)}], 1; have != want {
				t.Errorf("jcc not taken: have %d, want %d", have, want)
			}
			if have, want := len(res.Edges), 11; have != want {
				t.Errorf("distinct edges: have %d, want %d", have, want)
			}
		})
	}
}

func TestRecordModuleAndLeaders(t *testing.T) {
	skipShort(t)
	path := fixtures.Build(t, "loop3", asmNoPIE)
	c, _ := symbol(t, path, "count3")

	// By base name, with the add after the loop head as an extra leader.
	base := path[len(path)-len("loop3-O0-nopie-static-")-16:]
	res := recordT(t, Options{Path: path, Module: base, Leaders: map[uint64]bool{c + 10: true}})
	if have, want := count(res.Events(), func(e Event) bool { return e.Kind == Block && e.Src == c+10 }), 3; have != want {
		t.Errorf("blocks at leader: have %d, want %d", have, want)
	}
	// A module that never appears: no events, but the run is complete.
	res = recordT(t, Options{Path: path, Module: "libnothing.so"})
	if len(res.Edges) != 0 || res.ExitCode != 3 || res.Processes[0].Module != "" {
		t.Errorf("unknown module: %d edges, exit %d, module %q", len(res.Edges), res.ExitCode, res.Processes[0].Module)
	}
}

// TestRecordThreads follows the 8 worker threads of the threads fixture.
func TestRecordThreads(t *testing.T) {
	skipShort(t)
	path := fixtures.Build(t, "threads", staticNoPIE)
	native, _, _, err := fixtures.Run(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := recordT(t, Options{Path: path})
	if !bytes.Equal(res.Stdout, native) || res.ExitCode != 0 {
		t.Fatalf("traced run differs: exit %d\n%s\nnative:\n%s", res.ExitCode, res.Stdout, native)
	}
	if len(res.Processes) != 1 {
		t.Fatalf("processes: have %d, want 1", len(res.Processes))
	}
	p := res.Processes[0]
	if have, want := len(p.Threads), 9; have != want {
		t.Fatalf("threads: have %d, want %d", have, want)
	}
	w, _ := symbol(t, path, "worker")
	var workers int
	for tid, evs := range p.Threads {
		n := count(evs, func(e Event) bool { return e.Kind == Block && e.Src == w })
		switch {
		case tid == p.Pid && n != 0:
			t.Errorf("main thread entered worker %d times", n)
		case tid != p.Pid && n != 1:
			t.Errorf("thread %d entered worker %d times, want 1", tid, n)
		case n == 1:
			workers++
		}
	}
	if workers != 8 {
		t.Errorf("worker threads: have %d, want 8", workers)
	}
}

// TestRecordFork follows a fork child that execs this same program and
// one that exits without exec.
func TestRecordFork(t *testing.T) {
	skipShort(t)
	path := fixtures.Build(t, "forkexec", staticNoPIE)
	args := []string{"noecho"}
	native, _, _, err := fixtures.Run(path, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := recordT(t, Options{Path: path, Args: args})
	if !bytes.Equal(res.Stdout, native) || res.ExitCode != 0 {
		t.Fatalf("traced run differs: exit %d\n%s\nnative:\n%s", res.ExitCode, res.Stdout, native)
	}
	root := res.Processes[0]
	var execed, plain *Process
	nexec := 0
	for _, p := range res.Processes[1:] {
		switch {
		case p.Exec == 1:
			// the fork+exec child first, then the posix_spawn one
			if execed == nil {
				execed = p
			}
			nexec++
			if p.PPid != root.Pid || p.ExitCode != 7 || len(p.Threads[p.Pid]) == 0 {
				t.Errorf("exec'd child %d: parent %d exit %d, %d events", p.Pid, p.PPid, p.ExitCode, len(p.Threads[p.Pid]))
			}
		case p.Exec == 0 && p.ExitCode == 3:
			plain = p
		}
	}
	if nexec != 2 {
		t.Errorf("exec'd children: have %d, want 2 (fork+exec, posix_spawn)", nexec)
	}
	if execed == nil || plain == nil {
		for _, p := range res.Processes {
			t.Logf("process %+v", *p)
		}
		t.Fatal("missing the exec'd child or the plain child")
	}
	if plain.PPid != root.Pid || execed.PPid != root.Pid {
		t.Errorf("parents: plain %d, exec'd %d, want %d", plain.PPid, execed.PPid, root.Pid)
	}
	if execed.ExitCode != 7 {
		t.Errorf("exec'd child exit: have %d, want 7", execed.ExitCode)
	}
	isSys := func(nr uint64) func(Event) bool {
		return func(e Event) bool { return e.Kind == Syscall && e.Value == nr }
	}
	const sysExitGroup, sysClone, sysExecve = 231, 56, 59
	for _, c := range []struct {
		p    *Process
		what string
		f    func(Event) bool
	}{
		{root, "clone", isSys(sysClone)},
		{plain, "exit_group", isSys(sysExitGroup)},
		{execed, "exit_group", isSys(sysExitGroup)},
		{execed, "block", func(e Event) bool { return e.Kind == Block }},
	} {
		if count(c.p.Threads[c.p.Pid], c.f) == 0 {
			t.Errorf("process %d (exec %d): no %s event", c.p.Pid, c.p.Exec, c.what)
		}
	}
	// The image before the exec did the execve.
	var pre *Process
	for _, p := range res.Processes {
		if p.Pid == execed.Pid && p.Exec == 0 {
			pre = p
		}
	}
	if pre == nil || count(pre.Threads[pre.Pid], isSys(sysExecve)) != 1 {
		t.Errorf("no execve in the child before its exec")
	}
}

// TestRecordSignals checks that handlers entered by the kernel are block
// entries, never the destination of a recorded transfer.
func TestRecordSignals(t *testing.T) {
	skipShort(t)
	path := fixtures.Build(t, "signals", staticNoPIE)
	native, _, _, err := fixtures.Run(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := recordT(t, Options{Path: path})
	if !bytes.Equal(res.Stdout, native) || res.ExitCode != 0 {
		t.Fatalf("traced run differs: exit %d\n%s\nnative:\n%s", res.ExitCode, res.Stdout, native)
	}
	evs := res.Events()
	for _, h := range []string{"on_alrm", "on_usr1"} {
		a, _ := symbol(t, path, h)
		if have, want := count(evs, func(e Event) bool { return e.Kind == Block && e.Src == a }), 2; have != want {
			t.Errorf("%s entered %d times, want %d", h, have, want)
		}
		if n := count(evs, func(e Event) bool { return e.Kind.IsTransfer() && e.Dst.Off == a }); n != 0 {
			t.Errorf("%d transfers to %s recorded", n, h)
		}
	}
	// The read on the pipe is interrupted and restarted by the kernel:
	// the syscall instruction runs twice but is passed once.
	const sysRead = 0
	if have, want := count(evs, func(e Event) bool { return e.Kind == Syscall && e.Value == sysRead }), 1; have != want {
		t.Errorf("read syscalls: have %d, want %d", have, want)
	}
}

func TestRecordDeaths(t *testing.T) {
	skipShort(t)
	for _, c := range []struct {
		name string
		want int
	}{{"abort", 134}, {"fatal", 139}, {"uexit", 5}} {
		path := fixtures.Build(t, c.name, staticNoPIE)
		res := recordT(t, Options{Path: path})
		if res.ExitCode != c.want {
			t.Errorf("%s: exit code: have %d, want %d", c.name, res.ExitCode, c.want)
		}
		if len(res.Stdout) == 0 {
			t.Errorf("%s: no output captured", c.name)
		}
	}
}

// TestRecordJumpTable records a dynamically linked PIE with CET: the
// switch's indirect jumps must land inside step(), in module-relative
// terms, once per call.
func TestRecordJumpTable(t *testing.T) {
	skipShort(t)
	path := fixtures.Build(t, "switch", fixtures.Variant{Opt: fixtures.O2, PIE: true, CET: true})
	res := recordT(t, Options{Path: path})
	p := res.Processes[0]
	if p.Base == 0 || p.Module == "" {
		t.Fatalf("PIE module %q base %#x", p.Module, p.Base)
	}
	lo, size := symbol(t, path, "step")
	in := func(a uint64) bool { return a >= lo && a < lo+size }
	n := count(res.Events(), func(e Event) bool {
		return e.Kind == IndJmp && in(e.Src) && e.Dst.Module == p.Module && in(e.Dst.Off)
	})
	if n != 40 {
		t.Errorf("indirect jumps inside step: have %d, want 40", n)
	}
	// Calls into libc go through the PLT and land in another module.
	libc := count(res.Events(), func(e Event) bool {
		return e.Kind == IndJmp && e.Dst.Module != "" && e.Dst.Module != p.Module
	})
	if libc == 0 {
		t.Error("no indirect jump into another module (PLT)")
	}
}

func TestRecordTimeout(t *testing.T) {
	skipShort(t)
	path := fixtures.Build(t, "recurse", fixtures.Variant{Opt: fixtures.O0})
	res, err := RecordWith(Options{Path: path, Timeout: 200 * time.Millisecond})
	if errors.Is(err, syscall.EPERM) {
		t.Skip(err)
	}
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err: have %v, want ErrTimeout", err)
	}
	if res == nil {
		t.Fatal("no partial result")
	}
}

func TestRecordBadInput(t *testing.T) {
	if _, err := Record("", nil, nil, ""); err == nil {
		t.Error("empty path: no error")
	}
	if _, err := Record("/nonexistent/program", nil, nil, ""); err == nil {
		t.Error("missing program: no error")
	}
	dir := t.TempDir()
	if _, err := Record(dir, nil, nil, ""); err == nil {
		t.Error("directory: no error")
	}
	f := dir + "/notelf"
	os.WriteFile(f, []byte("hello"), 0o755)
	if _, err := Record(f, nil, nil, ""); err == nil {
		t.Error("not an ELF: no error")
	}
}

// TestRecordSharedObject records libc instead of the executable: qsort's
// calls of the fixture's comparator are indirect calls whose destination
// lies in the executable.
func TestRecordSharedObject(t *testing.T) {
	skipShort(t)
	path := fixtures.Build(t, "fnptr", fixtures.Variant{Opt: fixtures.O2})
	res := recordT(t, Options{Path: path, Module: "libc.so.6"})
	p := res.Processes[0]
	if p.Module == "" || p.Base == 0 {
		t.Fatalf("libc not found: module %q base %#x", p.Module, p.Base)
	}
	cmp, _ := symbol(t, path, "cmp_int")
	n := count(res.Events(), func(e Event) bool {
		return e.Kind == IndCall && e.Dst.Off == cmp && e.Dst.Module != p.Module && e.Dst.Module != ""
	})
	if n == 0 {
		t.Errorf("no indirect call from libc to cmp_int (%#x)", cmp)
	}
}

// TestRecordFixtures records every fixture (static, so without ld.so's
// start-up) and checks that tracing changes nothing the program shows:
// same stdout, same exit code as a native run.
func TestRecordFixtures(t *testing.T) {
	skipShort(t)
	for _, f := range fixtures.All() {
		if f.Heavy {
			continue
		}
		v := staticNoPIE
		if f.Lang == fixtures.Asm {
			v = asmNoPIE
		}
		args := f.Args
		switch f.Name {
		case "except":
			// static libstdc++ runs ~4.5M instructions before main
			continue
		case "forkexec":
			args = []string{"noecho"}
		}
		t.Run(f.Name, func(t *testing.T) {
			path := fixtures.Build(t, f.Name, v)
			native, _, code, err := fixtures.Run(path, args, nil)
			if err != nil {
				t.Fatal(err)
			}
			res := recordT(t, Options{Path: path, Args: args})
			if res.ExitCode != code || !bytes.Equal(res.Stdout, native) {
				t.Errorf("traced: exit %d, stdout:\n%s\nnative: exit %d, stdout:\n%s", res.ExitCode, res.Stdout, code, native)
			}
			if len(res.Edges) == 0 {
				t.Error("no events")
			}
			for e := range res.Edges {
				if e.Kind < JccTaken || e.Kind > Block {
					t.Errorf("bad kind in %v", e)
				}
			}
		})
	}
}

// TestRecordBesideZombie: a child of the tracer's thread that exited and
// is never reaped (a program a test killed and did not wait for) stays
// first in line for the tracer's waits, which leave it to its owner:
// the recording spun on it for good (a CI run hung until its timeout).
// The tracees are now asked one by one meanwhile.
func TestRecordBesideZombie(t *testing.T) {
	skipShort(t)
	path := fixtures.Build(t, "loop3", asmNoPIE)
	type out struct {
		res *Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		runtime.LockOSThread() // the zombie and the tracees children of one thread, as in a test process
		z := exec.Command("/bin/true")
		if err := z.Start(); err != nil {
			done <- out{nil, err}
			return
		}
		var si unix.Siginfo
		unix.Waitid(unix.P_PID, z.Process.Pid, &si, unix.WEXITED|unix.WNOWAIT, nil) // exited, not reaped
		res, err := record(Options{Path: path, Timeout: 30 * time.Second})
		z.Wait()
		done <- out{res, err}
	}()
	o := <-done
	if errors.Is(o.err, syscall.EPERM) {
		t.Skipf("ptrace not permitted here: %v", o.err)
	}
	if o.err != nil || o.res.ExitCode != 3 {
		t.Fatalf("beside a zombie: %v (exit %v)", o.err, o.res)
	}
}
