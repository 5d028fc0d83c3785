package qos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options configure [RunProgram] and [Watch].
type Options struct {
	Config                      // what the page tells the runtime (Interval = Period)
	Source        Source        // the metric
	Period        time.Duration // sampling period; exported as STINT_PERIOD
	PagePath      string        // "" = DefaultPagePath()
	DefaultBudget string        // STINT_BUDGET as BudgetEnv returns it ("" = leave unset)
	Log           string        // STINT_LOG for the program ("" = leave as is)
	Samples       io.Writer     // optional samples file (CSV, see SampleRow)
	Messages      io.Writer     // the analyzer's messages (stderr)

	// For RunProgram: the program's standard files (nil = /dev/null for
	// Stdin, discard for the others, as in os/exec), its environment
	// before the STINT_* variables are set (nil = os.Environ()), and
	// signals to forward to it (the caller does signal.Notify).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Env            []string
	Signals        <-chan os.Signal
}

// Environ returns the environment the traced program needs: STINT_QOS,
// STINT_PERIOD and, when set, STINT_BUDGET and STINT_LOG, replacing any
// earlier values in base.
func (o *Options) Environ(base []string, page string) []string {
	set := map[string]string{
		"STINT_QOS":    page,
		"STINT_PERIOD": PeriodEnv(o.Period),
	}
	if o.DefaultBudget != "" {
		set["STINT_BUDGET"] = o.DefaultBudget
	}
	if o.Log != "" {
		set["STINT_LOG"] = o.Log
	}
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for _, k := range []string{"STINT_QOS", "STINT_PERIOD", "STINT_BUDGET", "STINT_LOG"} {
		if v, ok := set[k]; ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func (o *Options) check() error {
	if o.Source == nil {
		return errors.New("no metric source")
	}
	if o.Period <= 0 {
		return fmt.Errorf("period %v: want > 0", o.Period)
	}
	o.Config.Interval = o.Period
	if o.Config.Source == "" {
		o.Config.Source = o.Source.String()
	}
	return o.Config.Check()
}

func (o *Options) analyzer(p *Page) *Analyzer {
	a := &Analyzer{Source: o.Source, Page: p, Period: o.Period, Log: o.Messages}
	if o.Samples != nil {
		a.Samples = NewSamplesWriter(o.Samples)
	}
	return a
}

// Result is how a program run under the analyzer ended.
type Result struct {
	ExitCode int    // the program's exit status; 128+N when killed by signal N
	Signal   string // the signal that killed it, if any ("killed")
	Stats    Stats  // what the analyzer did
	Page     string // the page's path (removed by now)
}

// RunProgram creates the QoS page, starts argv with STINT_QOS,
// STINT_PERIOD and STINT_BUDGET (and STINT_LOG) in its environment,
// samples the source every period until the program exits, forwards
// o.Signals to it, and removes the page at the end. Cancelling ctx sends
// the program SIGTERM (and SIGKILL 5 s later). The error is about the
// analyzer (the page, starting the program); the program's own failure
// is in Result.ExitCode.
//
// The program runs in a process group of its own, so a Ctrl-C on the
// terminal reaches it once (from the terminal when it is in the
// foreground, which it is when our standard input is the terminal we
// own; else forwarded by us), never twice.
func RunProgram(ctx context.Context, o Options, argv []string) (Result, error) {
	if len(argv) == 0 {
		return Result{}, errors.New("no program given")
	}
	if err := o.check(); err != nil {
		return Result{}, err
	}
	path := o.PagePath
	if path == "" {
		path = DefaultPagePath()
	}
	page, err := CreatePage(path, o.Config)
	if err != nil {
		return Result{}, err
	}
	defer page.Remove()
	res := Result{Page: path}

	base := o.Env
	if base == nil {
		base = os.Environ()
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = o.Environ(base, path)
	c.Stdin = o.Stdin
	// Writers that are not files are written by exec's copying
	// goroutines and by the analyzer at once: serialise them (a
	// bytes.Buffer given as both stderr and Messages would lose lines).
	var mu sync.Mutex
	c.Stdout, c.Stderr, o.Messages = lockWriter(&mu, o.Stdout), lockWriter(&mu, o.Stderr), lockWriter(&mu, o.Messages)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fg := foregroundTTY(o.Stdin)
	if fg {
		c.SysProcAttr.Foreground = true
		c.SysProcAttr.Ctty = 0
	}
	if err := c.Start(); err != nil {
		return res, fmt.Errorf("start %s: %w", argv[0], err)
	}
	if fg {
		defer takeTerminal()
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()

	actx, stop := context.WithCancel(context.Background())
	a := o.analyzer(page)
	adone := make(chan Stats, 1)
	go func() { adone <- a.Run(actx) }()

	var waitErr error
	var kill <-chan time.Time
	cdone := ctx.Done()
loop:
	for {
		select {
		case waitErr = <-done:
			break loop
		case sig := <-o.Signals:
			c.Process.Signal(sig)
		case <-cdone:
			cdone = nil
			c.Process.Signal(syscall.SIGTERM)
			kill = time.After(5 * time.Second)
		case <-kill:
			c.Process.Kill()
		}
	}
	stop()
	res.Stats = <-adone
	o.Source.Close()
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return res, fmt.Errorf("wait for %s: %w", argv[0], waitErr)
	}
	res.ExitCode, res.Signal = exitCode(c.ProcessState)
	return res, nil
}

// exitCode returns a shell's idea of a process's exit status.
func exitCode(ps *os.ProcessState) (int, string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal().String()
	}
	return ps.ExitCode(), ""
}

// foregroundTTY reports whether in is a terminal whose foreground process
// group is ours: then the program gets the terminal (Ctrl-C, reading).
func foregroundTTY(in io.Reader) bool {
	f, ok := in.(*os.File)
	if !ok || f == nil || f.Fd() != 0 {
		return false
	}
	pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

// takeTerminal makes our process group the terminal's foreground again
// after the program that had it exited (SIGTTOU ignored meanwhile, as a
// shell does).
func takeTerminal() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp())
}

// Watch serves the page at o.PagePath (created, or taken over when a
// page is already there) for a program started elsewhere with
// STINT_QOS=PATH, until ctx is done or, when pid > 0, that process
// exits. The page is left in place with state Stopped when ctx ends it
// (a later watch can take over; the program keeps its mapping) and
// removed when the program exited.
func Watch(ctx context.Context, o Options, pid int) (Stats, error) {
	if o.PagePath == "" {
		return Stats{}, errors.New("watch needs the page path the program was given in STINT_QOS")
	}
	if err := o.check(); err != nil {
		return Stats{}, err
	}
	var exited <-chan struct{}
	if pid > 0 {
		ch, err := waitPid(pid)
		if err != nil {
			return Stats{}, err
		}
		exited = ch
	}
	page, err := CreatePage(o.PagePath, o.Config)
	if err != nil {
		return Stats{}, err
	}
	actx, stop := context.WithCancel(ctx)
	defer stop()
	var gone atomic.Bool
	go func() {
		select {
		case <-exited:
			gone.Store(true)
			stop()
		case <-actx.Done():
		}
	}()
	st := o.analyzer(page).Run(actx)
	o.Source.Close()
	stop()
	if gone.Load() {
		return st, page.Remove()
	}
	return st, page.Close()
}

// waitPid returns a channel closed when process pid exits (pidfd, so a
// reused pid cannot fool it).
func waitPid(pid int) (<-chan struct{}, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n > 0 {
				return
			}
		}
	}()
	return ch, nil
}

// lockedWriter serialises writes to w with mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func lockWriter(mu *sync.Mutex, w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok || w == nil {
		return w
	}
	return &lockedWriter{mu, w}
}
