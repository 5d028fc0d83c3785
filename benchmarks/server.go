package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// server is a workload's server process, started in its own process
// group so that a wrapper (qos run) and the server behind it can be
// killed together.
type server struct {
	name string
	cmd  *exec.Cmd
	log  bytes.Buffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// startServer starts argv with the environment additions env, on
// PinCPU when that is set.
func startServer(argv, env []string) (*server, error) {
	s := &server{name: argv[0], done: make(chan struct{})}
	argv = pinned(argv, PinCPU)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	return s, nil
}

// kill kills the process group and waits for the process.
func (s *server) kill() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// ready polls probe every 50 ms until it succeeds; it fails (and kills
// the server) when the server exits, ctx ends or d passes. what says
// what the probe waits for ("answering PING").
func (s *server) ready(ctx context.Context, d time.Duration, what string, probe func() error) error {
	deadline := time.Now().Add(d)
	for {
		if probe() == nil {
			return nil
		}
		var err error
		select {
		case <-s.done:
			err = fmt.Errorf("exited before %s", what)
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				err = fmt.Errorf("not %s within %v", what, d)
			}
		}
		if err != nil {
			s.kill()
			return fmt.Errorf("%s: %w: %s", s.name, err, lastLine(s.log.String()))
		}
	}
}

// stopped waits up to d for the server to exit after it was asked to
// (how names the request); then it is killed. It returns an error when
// the server did not exit in time or exited with a failure.
func (s *server) stopped(how string, d time.Duration) error {
	select {
	case <-s.done:
		if s.err != nil {
			return fmt.Errorf("%s exited: %w: %s", s.name, s.err, lastLine(s.log.String()))
		}
		return nil
	case <-time.After(d):
		s.kill()
		return fmt.Errorf("%s did not exit after %s", s.name, how)
	}
}
