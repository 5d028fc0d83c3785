package qos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cmdSource is cmd:COMMAND: `sh -c COMMAND` each period; the value is the
// first number it prints on stdout (a gauge, published as it is). The
// command gets 3/4 of the period (or the sample's deadline, if shorter);
// then its whole process group is killed and the period counts as an
// error, as does a non-zero exit status or output without a number.
type cmdSource struct {
	spec, command string
	opt           SourceOptions
}

func newCmd(spec, command string, opt SourceOptions) *cmdSource {
	return &cmdSource{spec: spec, command: command, opt: opt}
}

func (s *cmdSource) String() string { return s.spec }
func (s *cmdSource) Close() error   { return nil }

var firstNumber = regexp.MustCompile(`[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?`)

// FirstNumber returns the first decimal number in text ("12.5 req/s" ->
// 12.5, "latency=3e-3" -> 0.003).
func FirstNumber(text []byte) (float64, error) {
	m := firstNumber.Find(text)
	if m == nil {
		return 0, errNoValue
	}
	return strconv.ParseFloat(string(m), 64)
}

func (s *cmdSource) Sample(ctx context.Context) (float64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opt.Period*3/4)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", s.command)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &limitedBuffer{b: &out, n: 1 << 20}, &limitedBuffer{b: &errb, n: 4096}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 100 * time.Millisecond
	err := c.Run()
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return 0, false, fmt.Errorf("cmd %q: no answer within %v (killed)", s.command, s.opt.Period*3/4)
	}
	if err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg != "" {
			return 0, false, fmt.Errorf("cmd %q: %v: %s", s.command, err, firstLine(msg))
		}
		return 0, false, fmt.Errorf("cmd %q: %w", s.command, err)
	}
	v, err := FirstNumber(out.Bytes())
	if err != nil {
		return 0, false, fmt.Errorf("cmd %q printed no number (stdout: %q)", s.command, clip(strings.TrimSpace(out.String())))
	}
	return v, true, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// limitedBuffer keeps the first n bytes written and drops the rest.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
