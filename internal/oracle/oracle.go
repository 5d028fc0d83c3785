package oracle

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Loc is a location: an offset (link vaddr) inside a mapped file, or an
// absolute address when Module is "" (anonymous memory).
type Loc struct {
	Module string // path of the mapped file as /proc/PID/maps names it; "" = absolute
	Off    uint64
}

func (l Loc) String() string {
	if l.Module == "" {
		return fmt.Sprintf("%#x", l.Off)
	}
	return fmt.Sprintf("%s+%#x", filepath.Base(l.Module), l.Off)
}

// Event is one recorded event. For Syscall, Dst is zero and Value holds
// rax; for Block, Dst is the block's own address in the module. Events are
// comparable and are used as keys of [Result.Edges].
type Event struct {
	Kind  Kind
	Src   uint64 // module-relative
	Dst   Loc
	Value uint64
}

func (e Event) String() string {
	if e.Kind == Syscall {
		return fmt.Sprintf("%s %#x rax=%d", e.Kind, e.Src, e.Value)
	}
	return fmt.Sprintf("%s %#x -> %s", e.Kind, e.Src, e.Dst)
}

// Process is one program image run by one process: a fork starts a new
// Process, and so does an exec (same Pid, Exec one higher).
type Process struct {
	Pid      int
	PPid     int    // the parent's pid; 0 for the process Record started
	Exec     int    // number of execs this pid did before this image
	Exe      string // /proc/PID/exe of the image
	Module   string // path of the traced module in this image; "" if it never appeared
	Base     uint64 // the module's load base (0 for a fixed-address executable)
	ExitCode int    // exit status, 128+N if killed by signal N, -1 if the image was replaced by exec or unknown
	// Threads maps a thread id to its events, in execution order.
	Threads map[int][]Event
}

// Result is what [Record] observed.
type Result struct {
	Module    string     // the module argument as given
	Processes []*Process // in order of creation
	// Edges counts every distinct event (kind, src, dst, and value for
	// syscalls) over all threads and processes.
	Edges    map[Event]int
	ExitCode int // of the first process: exit status, 128+N if killed by signal N, -1 if not seen
	Stdout   []byte
	Stderr   []byte
	Steps    uint64 // instructions single-stepped, all modules
}

// Events returns the events of every thread of every process, processes
// in creation order and threads by id.
func (r *Result) Events() []Event {
	var out []Event
	for _, p := range r.Processes {
		tids := make([]int, 0, len(p.Threads))
		for tid := range p.Threads {
			tids = append(tids, tid)
		}
		sort.Ints(tids)
		for _, tid := range tids {
			out = append(out, p.Threads[tid]...)
		}
	}
	return out
}

// Options configure [RecordWith].
type Options struct {
	Path   string   // program to run
	Args   []string // arguments, without argv[0] (which is Path)
	Env    []string // environment; nil means the current one
	Dir    string   // working directory; "" means the current one
	Stdin  io.Reader
	Module string // module to record: a path, a base name, or "" for Path itself
	// Leaders are module-relative addresses at which a block event is
	// recorded whenever they execute, in addition to the dynamic rule
	// (see the package documentation).
	Leaders map[uint64]bool
	// Timeout bounds the run (0: DefaultTimeout). On expiry every traced
	// process is killed and RecordWith returns the partial result and
	// an error wrapping ErrTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds a [Record].
const DefaultTimeout = 5 * time.Minute

// ErrTimeout is wrapped by the error returned when the run took too long.
var ErrTimeout = errors.New("oracle: timed out")

// Record runs path with args (without argv[0]) and env (nil: the current
// environment) under ptrace and records the transfers executed inside
// module ("" means path itself; a name without a slash matches any mapped
// file with that base name).
func Record(path string, args, env []string, module string) (*Result, error) {
	return RecordWith(Options{Path: path, Args: args, Env: env, Module: module})
}

// RecordWith is [Record] with all options.
func RecordWith(o Options) (*Result, error) {
	if o.Path == "" {
		return nil, errors.New("oracle: no program")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	// Every ptrace request and wait must come from the thread that is
	// the tracer, so the whole recording runs on one locked thread.
	type ret struct {
		r   *Result
		err error
	}
	ch := make(chan ret, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked: the thread may still be the tracer of something
		// if we return early; let it exit with the goroutine.
		r, err := record(o)
		ch <- ret{r, err}
	}()
	x := <-ch
	return x.r, x.err
}

// thread is the tracer's state of one traced thread.
type thread struct {
	tid  int
	proc *proc
	// fresh: not stopped yet since it was created (expects SIGSTOP).
	fresh bool
	// start: the next instruction is the first of a thread, image or
	// signal handler (a block entry).
	start bool
	// pending: an instruction at pc was stepped and its effect is not yet
	// classified.
	pending  bool
	pc       uint64
	pcInst   *inst
	pcFlags  uint64
	pcRcx    uint64
	pcRax    uint64
	pcMod    bool // pc lies in the module
	sysIdx   int  // index of the syscall event recorded for pc, or -1
	injected int  // signal passed on with the last step (0 = none)
	sigPC    uint64
	prevXfer bool // the last executed instruction transferred control
	// restartPC: a syscall at this address was interrupted by a signal
	// and will be restarted by the kernel after the handler's
	// sigreturn (armed while restart is true).
	restartPC uint64
	restart   bool
}

// proc is the tracer's state of one traced program image.
type proc struct {
	*Process
	maps    []Mapping
	bases   map[int]uint64 // index in maps -> link base
	insts   map[uint64]*inst
	modMemo map[string]bool
}

type recorder struct {
	o       Options
	modAbs  string // resolved module path when o.Module has a slash
	threads map[int]*thread
	procs   map[int]*proc // by pid, current image
	res     *Result
	progs   map[string][]elf.ProgHeader
	rootPid int

	mu       sync.Mutex
	pids     map[int]bool // for the timeout killer
	timedOut atomic.Bool
}

const ptraceOptions = unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEFORK |
	unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_EXITKILL

func record(o Options) (*Result, error) {
	r := &recorder{
		o:       o,
		threads: map[int]*thread{},
		procs:   map[int]*proc{},
		progs:   map[string][]elf.ProgHeader{},
		pids:    map[int]bool{},
		res:     &Result{Module: o.Module, Edges: map[Event]int{}, ExitCode: -1},
	}
	mod := o.Module
	if mod == "" {
		mod = o.Path
	}
	if strings.Contains(mod, "/") {
		r.modAbs = canon(mod)
	} else {
		r.modAbs = ""
	}
	if o.Module == "" || strings.Contains(o.Module, "/") {
		r.o.Module = mod
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("oracle: %w", err)
	}
	var wg sync.WaitGroup
	var outBuf, errBuf bytes.Buffer
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&outBuf, outR); outR.Close() }()
	go func() { defer wg.Done(); io.Copy(&errBuf, errR); errR.Close() }()

	cmd := exec.Command(o.Path, o.Args...)
	cmd.Env = o.Env
	cmd.Dir = o.Dir
	cmd.Stdin = o.Stdin
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		wg.Wait()
		return nil, fmt.Errorf("oracle: start %s: %w", o.Path, err)
	}
	pid := cmd.Process.Pid
	r.rootPid = pid
	r.track(pid)

	timer := time.AfterFunc(o.Timeout, r.killAll)
	loopErr := r.start(pid)
	if loopErr == nil {
		loopErr = r.loop()
	}
	timer.Stop()
	if loopErr != nil {
		r.killAll()
		r.drain()
	}
	// cmd.Wait would race with our wait4; the process is reaped already.
	cmd.Process.Release()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		// A descendant we do not trace holds the pipes open.
		outR.Close()
		errR.Close()
		<-done
	}
	r.res.Stdout = outBuf.Bytes()
	r.res.Stderr = errBuf.Bytes()
	for _, p := range r.res.Processes {
		for _, evs := range p.Threads {
			for _, e := range evs {
				r.res.Edges[e]++
			}
		}
	}
	if r.timedOut.Load() {
		return r.res, fmt.Errorf("oracle: %s after %v: %w", o.Path, o.Timeout, ErrTimeout)
	}
	if loopErr != nil {
		return r.res, loopErr
	}
	return r.res, nil
}

func canon(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		p = a
	}
	if e, err := filepath.EvalSymlinks(p); err == nil {
		p = e
	}
	return p
}

func (r *recorder) track(pid int) {
	r.mu.Lock()
	r.pids[pid] = true
	r.mu.Unlock()
	if r.timedOut.Load() {
		unix.Kill(pid, unix.SIGKILL)
	}
}

func (r *recorder) killAll() {
	r.timedOut.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid := range r.pids {
		unix.Kill(pid, unix.SIGKILL)
	}
}

// siginfo's si_code for a child that is gone (CLD_EXITED, CLD_KILLED,
// CLD_DUMPED); the child's pid is si_pid, the int32 at offset 16.
const cldExited, cldDumped = 1, 3

// wait is Wait4(-1, WALL|WNOTHREAD) that leaves alone the children of
// this thread that are not tracees. The tracer's thread is a locked OS
// thread that may earlier have run goroutines that started programs
// with os/exec (the tests run fixtures in parallel), and those children
// count as this thread's: reaping one made its owner's Wait fail with
// ECHILD ("waitid: no child processes", seen in CI). So the next event
// is looked at first (WNOWAIT); the exit of a pid that was never traced
// (a new tracee stops before anything else, so it is known by then) is
// left for its owner, and only the event of the pid chosen is taken.
func (r *recorder) wait(ws *unix.WaitStatus) (int, error) {
	for {
		var si unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &si, unix.WEXITED|unix.WSTOPPED|unix.WALL|unix.WNOTHREAD|unix.WNOWAIT, nil)
		if err != nil {
			return 0, err
		}
		pid := siPid(&si)
		if si.Code >= cldExited && si.Code <= cldDumped && r.threads[pid] == nil {
			// it stays first in line (a zombie its owner may never
			// reap): the tracees are asked one by one meanwhile
			if tid := r.pollTracees(); tid != 0 {
				return unix.Wait4(tid, ws, unix.WALL|unix.WNOTHREAD, nil)
			}
			time.Sleep(time.Millisecond)
			continue
		}
		return unix.Wait4(pid, ws, unix.WALL|unix.WNOTHREAD, nil)
	}
}

// siPid is si_pid of a waitid's siginfo (0 when WNOHANG found nothing).
func siPid(si *unix.Siginfo) int { return int(*(*int32)(unsafe.Add(unsafe.Pointer(si), 16))) }

// pollTracees returns a traced thread with an event waiting, 0 if none
// has one. A new thread is not asked: its parent's clone event, which
// comes first, makes it known.
func (r *recorder) pollTracees() int {
	for tid := range r.threads {
		var si unix.Siginfo
		err := unix.Waitid(unix.P_PID, tid, &si, unix.WEXITED|unix.WSTOPPED|unix.WALL|unix.WNOTHREAD|unix.WNOWAIT|unix.WNOHANG, nil)
		if err == nil && siPid(&si) == tid {
			return tid
		}
	}
	return 0
}

// drain reaps whatever is left after an error.
func (r *recorder) drain() {
	for i := 0; i < 1000 && len(r.threads) > 0; i++ {
		var ws unix.WaitStatus
		wpid, err := r.wait(&ws)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if ws.Exited() || ws.Signaled() {
			delete(r.threads, wpid)
		}
	}
}

// start waits for the exec stop of the new program and sets it up.
func (r *recorder) start(pid int) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("oracle: wait for %d: %w", pid, err)
		}
		break
	}
	if !ws.Stopped() {
		return fmt.Errorf("oracle: program did not stop at exec (status %#x)", uint32(ws))
	}
	if err := unix.PtraceSetOptions(pid, ptraceOptions); err != nil {
		return fmt.Errorf("oracle: set ptrace options: %w", err)
	}
	p := r.newProc(pid, 0, 0)
	t := &thread{tid: pid, proc: p, start: true, sysIdx: -1}
	r.threads[pid] = t
	return r.resume(t)
}

func (r *recorder) newProc(pid, ppid, execs int) *proc {
	p := &proc{
		Process: &Process{Pid: pid, PPid: ppid, Exec: execs, ExitCode: -1, Threads: map[int][]Event{}},
		bases:   map[int]uint64{},
		insts:   map[uint64]*inst{},
		modMemo: map[string]bool{},
	}
	p.Exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	r.procs[pid] = p
	r.res.Processes = append(r.res.Processes, p.Process)
	return p
}

// loop handles stops until every traced thread is gone.
func (r *recorder) loop() error {
	for len(r.threads) > 0 {
		var ws unix.WaitStatus
		wpid, err := r.wait(&ws)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ECHILD {
			return nil
		}
		if err != nil {
			return fmt.Errorf("oracle: wait: %w", err)
		}
		if err := r.handle(wpid, ws); err != nil {
			return err
		}
	}
	return nil
}

func exitCode(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return -1
}

func (r *recorder) handle(wpid int, ws unix.WaitStatus) error {
	t := r.threads[wpid]
	if ws.Exited() || ws.Signaled() {
		if p := r.procs[wpid]; p != nil {
			p.ExitCode = exitCode(ws)
			delete(r.procs, wpid)
		}
		if wpid == r.rootPid {
			r.res.ExitCode = exitCode(ws)
		}
		delete(r.threads, wpid)
		return nil
	}
	if !ws.Stopped() {
		return nil
	}
	if t == nil {
		t = r.adopt(wpid)
	}
	sig := ws.StopSignal()
	if r.timedOut.Load() {
		unix.Kill(t.proc.Pid, unix.SIGKILL)
		return r.ignoreErr(t, ptraceCont(wpid, 0))
	}
	if sig == unix.SIGTRAP && ws.TrapCause() > 0 {
		return r.event(t, ws.TrapCause())
	}
	if t.fresh {
		t.fresh = false
		if sig == unix.SIGSTOP {
			return r.resume(t) // the stop every new thread starts with
		}
	}
	si, err := getSiginfo(wpid)
	if err == unix.EINVAL {
		// group-stop: just let it go on
		return r.ignoreErr(t, ptraceStep(wpid, 0))
	}
	if err != nil {
		return r.gone(t, err)
	}
	if sig == unix.SIGTRAP && isStepTrap(si) {
		return r.stepped(t)
	}
	// A signal for the program: pass it on. If it has a handler, the
	// next stop is at the handler's entry, before pc has executed.
	regs, err := getRegs(wpid)
	if err != nil {
		return r.gone(t, err)
	}
	t.injected = int(sig)
	t.sigPC = regs.Rip
	if t.pending && t.pcInst != nil && t.pcInst.cls == clsSyscall &&
		regs.Rip == t.pc+t.pcInst.len && isRestart(int64(regs.Rax)) {
		t.restartPC = t.pc
		t.restart = true
	}
	return r.ignoreErr(t, ptraceStep(wpid, int(sig)))
}

// isStepTrap reports whether a SIGTRAP stop is the tracer's own: the
// trap after a single step (TRAP_TRACE, or the kernel's report for a
// stepped syscall) or the stop at a signal handler's entry after a step
// that delivered a signal. A SIGTRAP the program raised itself (int3,
// kill, tgkill) is not.
func isStepTrap(si *siginfo) bool {
	switch si.Code {
	case trapTrace, trapBrkpt, siUser:
		// siUser with a zero pid: the kernel's report after a stepped
		// syscall; a real kill() carries the sender's pid.
		return si.Code != siUser || si.Pid == 0
	case int32(unix.SIGTRAP):
		return true // ptrace_notify after signal delivery while stepping
	}
	return false
}

// adopt creates the state of a thread or process we have not seen yet:
// a new thread or child, auto-attached by the ptrace options.
func (r *recorder) adopt(tid int) *thread {
	tgid, ppid := procStatus(tid)
	if tgid == 0 {
		tgid = tid
	}
	p := r.procs[tgid]
	if p == nil {
		p = r.newProc(tgid, ppid, 0)
		r.track(tgid)
	}
	// A new thread or child goes on from its creator's syscall: it does
	// not start a block.
	t := &thread{tid: tid, proc: p, fresh: true, sysIdx: -1}
	r.threads[tid] = t
	return t
}

// event handles a PTRACE_EVENT stop.
func (r *recorder) event(t *thread, cause int) error {
	switch cause {
	case unix.PTRACE_EVENT_EXEC:
		old, _ := unix.PtraceGetEventMsg(t.tid)
		pid := t.proc.Pid
		// Every other thread of the old image is gone; the execing
		// thread now has the pid as its id.
		for tid, o := range r.threads {
			if o.proc == t.proc && tid != t.tid {
				delete(r.threads, tid)
			}
		}
		if int(old) != t.tid {
			delete(r.threads, t.tid)
		}
		execs := t.proc.Exec + 1
		delete(r.procs, pid)
		np := r.newProc(pid, t.proc.PPid, execs)
		nt := &thread{tid: pid, proc: np, start: true, sysIdx: -1}
		r.threads[pid] = nt
		return r.ignoreErr(nt, ptraceStep(pid, 0))
	default:
		// fork, vfork, clone: the child is attached and will stop on
		// its own; the parent goes on with its syscall.
		return r.ignoreErr(t, ptraceStep(t.tid, 0))
	}
}

// stepped handles the trap after a single step (or at a handler's entry).
func (r *recorder) stepped(t *thread) error {
	regs, err := getRegs(t.tid)
	if err != nil {
		return r.gone(t, err)
	}
	if t.injected != 0 {
		// The step passed on a signal. If pc is still where the signal
		// stop was and we are elsewhere now without pc having run, the
		// kernel entered a handler: pc did not execute.
		inj := t.injected
		t.injected = 0
		if t.pending && t.sigPC == t.pc && r.enteredHandler(t, regs.Rip, inj) {
			if t.sysIdx >= 0 {
				evs := t.proc.Threads[t.tid]
				t.proc.Threads[t.tid] = append(evs[:t.sysIdx], evs[t.sysIdx+1:]...)
			}
			t.pending = false
			t.start = true
		}
	}
	if t.pending {
		r.classify(t, regs.Rip)
	}
	r.steps(t, regs)
	return r.ignoreErr(t, ptraceStep(t.tid, 0))
}

// enteredHandler decides whether the stop after passing on signal sig is
// the entry of a handler rather than the step over pc.
func (r *recorder) enteredHandler(t *thread, rip uint64, sig int) bool {
	if t.pcInst == nil || !t.pcInst.ok {
		return rip != t.pc
	}
	// After the step over pc, rip is pc's successor or its target.
	if rip == t.pc+t.pcInst.len {
		return false
	}
	switch t.pcInst.cls {
	case clsOther, clsSyscall:
		return true
	case clsJcc, clsJmp, clsCall:
		return rip != t.pcInst.target
	}
	// Indirect transfers could go anywhere: ask whether the signal is
	// caught.
	return caught(t.proc.Pid, sig)
}

// classify records the transfer of the instruction at t.pc, now that the
// next rip is known.
func (r *recorder) classify(t *thread, next uint64) {
	t.pending = false
	d := t.pcInst
	if d == nil || !d.ok {
		t.prevXfer = false
		return
	}
	t.prevXfer = d.transfer()
	if !t.pcMod || !d.transfer() {
		return
	}
	var k Kind
	switch d.cls {
	case clsJcc:
		ft := t.pc + d.len
		taken := next == d.target && next != ft
		if d.target == ft {
			taken = jccTaken(d.op, t.pcFlags, t.pcRcx)
		}
		k = JccNotTaken
		if taken {
			k = JccTaken
		}
	case clsJmp:
		k = Jmp
	case clsCall:
		k = Call
	case clsRet:
		k = Ret
	case clsIndJmp:
		k = IndJmp
	case clsIndCall:
		k = IndCall
	}
	p := t.proc
	p.Threads[t.tid] = append(p.Threads[t.tid], Event{Kind: k, Src: t.pc - p.Base, Dst: r.loc(p, next)})
}

// steps prepares the step of the instruction at regs.Rip: block and
// syscall events are recorded before it executes.
func (r *recorder) steps(t *thread, regs *unix.PtraceRegs) {
	r.res.Steps++
	p := t.proc
	pc := regs.Rip
	m, idx := r.lookup(p, pc)
	if m != nil && !m.Exec() {
		// Executing in memory we saw as not executable: the maps
		// changed (ld.so maps a library over its PROT_NONE reservation).
		r.refresh(p)
		m, idx = r.lookup(p, pc)
	}
	inMod := m != nil && m.Exec() && r.isModule(p, m, idx)
	var d *inst
	if m != nil {
		d = r.decode(p, pc, m)
	}
	// After rt_sigreturn, a syscall the kernel restarts runs again
	// without passing any code before it, so a probe in front of it
	// would not see it twice: record it once.
	restarted := false
	if t.pcInst != nil && t.pcInst.cls == clsSyscall {
		switch {
		case t.pcRax == sysRtSigreturn:
			restarted = t.restart && pc == t.restartPC
			t.restart = false
		case pc == t.pc+t.pcInst.len && isRestart(int64(regs.Rax)):
			// The step's trap comes before the interrupting
			// signal is delivered.
			t.restartPC = t.pc
			t.restart = true
		}
	}
	t.pending = true
	t.pc = pc
	t.pcInst = d
	t.pcFlags = regs.Eflags
	t.pcRcx = regs.Rcx
	t.pcRax = regs.Rax
	t.pcMod = inMod
	t.sysIdx = -1
	start := t.start
	t.start = false
	prev := t.prevXfer
	t.prevXfer = false
	if !inMod {
		return
	}
	rel := pc - p.Base
	if start || prev || r.o.Leaders[rel] {
		p.Threads[t.tid] = append(p.Threads[t.tid], Event{Kind: Block, Src: rel, Dst: Loc{Module: p.Module, Off: rel}})
	}
	if d != nil && d.cls == clsSyscall && !restarted {
		t.sysIdx = len(p.Threads[t.tid])
		p.Threads[t.tid] = append(p.Threads[t.tid], Event{Kind: Syscall, Src: rel, Value: regs.Rax})
	}
}

// resume starts a thread that has no pending instruction.
func (r *recorder) resume(t *thread) error {
	regs, err := getRegs(t.tid)
	if err != nil {
		return r.gone(t, err)
	}
	r.steps(t, regs)
	return r.ignoreErr(t, ptraceStep(t.tid, 0))
}

// gone handles an error from a ptrace request: ESRCH means the thread was
// killed meanwhile (its exit comes through wait); anything else is fatal.
func (r *recorder) gone(t *thread, err error) error {
	if err == unix.ESRCH {
		return nil
	}
	return fmt.Errorf("oracle: thread %d: %w", t.tid, err)
}

func (r *recorder) ignoreErr(t *thread, err error) error {
	if err == nil {
		return nil
	}
	return r.gone(t, err)
}

// lookup finds the mapping holding addr, re-reading the maps on a miss.
func (r *recorder) lookup(p *proc, addr uint64) (*Mapping, int) {
	for pass := 0; pass < 2; pass++ {
		i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].End > addr })
		if i < len(p.maps) && p.maps[i].Start <= addr {
			return &p.maps[i], i
		}
		if pass == 0 {
			r.refresh(p)
		}
	}
	return nil, -1
}

func (r *recorder) refresh(p *proc) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", p.Pid))
	if err != nil {
		return
	}
	ms, err := ParseMaps(data)
	if err != nil {
		return
	}
	p.maps = ms
	p.bases = map[int]uint64{}
	if p.Module == "" {
		for i := range ms {
			if ms[i].Exec() && r.isModule(p, &ms[i], i) {
				p.Module = ms[i].Path
				p.Base = r.base(p, i)
				break
			}
		}
	}
}

func (r *recorder) isModule(p *proc, m *Mapping, idx int) bool {
	if !m.File() {
		return false
	}
	if v, ok := p.modMemo[m.Path]; ok {
		return v
	}
	var v bool
	if r.modAbs != "" {
		v = m.Path == r.modAbs || canon(m.Path) == r.modAbs
	} else {
		v = filepath.Base(m.Path) == r.o.Module
	}
	p.modMemo[m.Path] = v
	if v && p.Module == "" {
		p.Module = m.Path
		p.Base = r.base(p, idx)
	}
	return v
}

// base returns the link base of mapping idx.
func (r *recorder) base(p *proc, idx int) uint64 {
	if b, ok := p.bases[idx]; ok {
		return b
	}
	m := &p.maps[idx]
	progs, ok := r.progs[m.Path]
	if !ok && strings.HasPrefix(m.Path, "/") {
		if f, err := elf.Open(m.Path); err == nil {
			for _, pr := range f.Progs {
				progs = append(progs, pr.ProgHeader)
			}
			f.Close()
		}
		r.progs[m.Path] = progs
	}
	b := linkBase(m, progs)
	p.bases[idx] = b
	return b
}

// loc maps an absolute address to a (file, link vaddr) location.
func (r *recorder) loc(p *proc, addr uint64) Loc {
	m, idx := r.lookup(p, addr)
	if m == nil || !m.File() {
		return Loc{Off: addr}
	}
	return Loc{Module: m.Path, Off: addr - r.base(p, idx)}
}

// decode returns the instruction at pc (cached).
func (r *recorder) decode(p *proc, pc uint64, m *Mapping) *inst {
	if d, ok := p.insts[pc]; ok {
		return d
	}
	n := m.End - pc
	if n > 16 {
		n = 16
	}
	buf := make([]byte, n)
	got := readMem(p.Pid, pc, buf)
	d := decodeAt(buf[:got], pc)
	p.insts[pc] = d
	return d
}

// readMem reads the tracee's memory at addr into buf, returning how many
// bytes were read.
func readMem(pid int, addr uint64, buf []byte) int {
	if len(buf) == 0 {
		return 0
	}
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	if n, err := unix.ProcessVMReadv(pid, local, remote, 0); err == nil && n > 0 {
		return n
	}
	n := 0
	for n < len(buf) {
		var w [8]byte
		c, err := unix.PtracePeekText(pid, uintptr(addr)+uintptr(n), w[:])
		if err != nil || c == 0 {
			break
		}
		n += copy(buf[n:], w[:c])
	}
	return n
}

// procStatus reads the thread group id and parent pid of tid.
func procStatus(tid int) (tgid, ppid int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimSpace(v))
		switch k {
		case "Tgid":
			tgid = n
		case "PPid":
			ppid = n
		}
	}
	return tgid, ppid
}

// caught reports whether process pid has a handler for sig.
func caught(pid, sig int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && sig >= 1 && sig <= 64 && mask&(1<<(sig-1)) != 0
		}
	}
	return false
}

const sysRtSigreturn = 15

// isRestart reports whether a syscall's return value asks the kernel to
// restart it (ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND,
// ERESTART_RESTARTBLOCK), which happens only for a signal interrupting it.
func isRestart(rax int64) bool {
	return rax == -512 || rax == -513 || rax == -514 || rax == -516
}

// Raw ptrace requests that x/sys/unix does not wrap with a signal.

const (
	trapBrkpt = 1
	trapTrace = 2
	siUser    = 0
)

type siginfo struct {
	Signo int32
	Errno int32
	Code  int32
	_     int32
	Pid   int32
	Uid   uint32
	_     [112]byte
}

func ptraceStep(tid, sig int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SINGLESTEP, uintptr(tid), 0, uintptr(sig), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func ptraceCont(tid, sig int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_CONT, uintptr(tid), 0, uintptr(sig), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getSiginfo(tid int) (*siginfo, error) {
	var si siginfo
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(tid), 0, uintptr(unsafe.Pointer(&si)), 0, 0)
	if e != 0 {
		return nil, e
	}
	return &si, nil
}

func getRegs(tid int) (*unix.PtraceRegs, error) {
	var regs unix.PtraceRegs
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_GETREGS, uintptr(tid), 0, uintptr(unsafe.Pointer(&regs)), 0, 0)
	if e != 0 {
		return nil, e
	}
	return &regs, nil
}
