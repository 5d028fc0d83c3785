package benchmarks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// RedisWorkload starts redis-server (the original or a rewritten copy)
// on a free port without persistence, drives it with redis-benchmark
// and stops it with SHUTDOWN NOSAVE, which leaves through exit so the
// runtime flushes its trace. The figure of merit is requests per second
// over all tests: total requests over the sum of each test's time
// (the harmonic mean of the tests' rates).
type RedisWorkload struct {
	Server    string // redis-server (default /usr/bin/redis-server)
	Benchmark string // redis-benchmark (default: from PATH)
	Requests  int    // requests per test (-n)
	Tests     string // -t list, e.g. "set,get,incr"
	Clients   int    // -c (0: redis-benchmark's default, 50)
	// Wrap, when set, wraps the server's command line (the QoS analyzer,
	// reading the server's INFO); see [QoSWrap].
	Wrap QoSWrap
	work string
	// Load is the CLOCK_MONOTONIC window of the last run's benchmark.
	Load Window
}

func (r *RedisWorkload) Key() string { return "redis" }
func (r *RedisWorkload) Title() string {
	return fmt.Sprintf("redis-server under redis-benchmark -n %d -t %s", r.Requests, r.Tests)
}
func (r *RedisWorkload) Target() string {
	if r.Server != "" {
		return r.Server
	}
	return "/usr/bin/redis-server"
}
func (r *RedisWorkload) OutPath(dir string) string { return dir + "/redis-server.stint" }
func (r *RedisWorkload) Unit() string              { return "req/s" }
func (r *RedisWorkload) HigherIsBetter() bool      { return true }

// ErrNoRedis says redis-server or redis-benchmark is not installed
// (scripts/bench-deps.sh installs them).
var ErrNoRedis = errors.New("redis-server or redis-benchmark not installed (run scripts/bench-deps.sh)")

func (r *RedisWorkload) Prepare(ctx context.Context, work string) error {
	if r.Benchmark == "" {
		r.Benchmark = "redis-benchmark"
	}
	if _, err := os.Stat(r.Target()); err != nil {
		return fmt.Errorf("%w: %v", ErrNoRedis, err)
	}
	if _, err := exec.LookPath(r.Benchmark); err != nil {
		return fmt.Errorf("%w: %v", ErrNoRedis, err)
	}
	if r.Requests <= 0 || r.Tests == "" {
		return fmt.Errorf("redis workload needs requests > 0 and tests (have %d, %q)", r.Requests, r.Tests)
	}
	r.work = work + "/redis"
	return os.MkdirAll(r.work, 0o755)
}

func (r *RedisWorkload) Run(ctx context.Context, mod string, env []string) (float64, error) {
	bin := r.Target()
	if mod != "" {
		bin = mod
	}
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	argv := []string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", r.work, "--logfile", ""}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if r.Wrap != nil {
		argv = r.Wrap(argv, "redis://"+addr)
	}
	srv, err := startServer(argv, env)
	if err != nil {
		return 0, err
	}
	if err := srv.ready(ctx, 60*time.Second, "answering PING", func() error { return command(addr, "PING", "+PONG") }); err != nil {
		return 0, err
	}
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "--csv", "-n", strconv.Itoa(r.Requests), "-t", r.Tests}
	if r.Clients > 0 {
		args = append(args, "-c", strconv.Itoa(r.Clients))
	}
	bctx, cancel := timeout(ctx, 30*time.Minute)
	defer cancel()
	r.Load.Start = monoNS()
	client := pinned(append([]string{r.Benchmark}, args...), otherCPU())
	out, berr := exec.CommandContext(bctx, client[0], client[1:]...).Output()
	r.Load.End = monoNS()
	// Stop the server whatever the benchmark did: SHUTDOWN NOSAVE makes
	// it exit(0), so the runtime writes its run-end row and flushes.
	serr := shutdown(addr)
	if err := srv.stopped("SHUTDOWN NOSAVE", 2*time.Minute); serr == nil {
		serr = err
	}
	if berr != nil {
		return 0, fmt.Errorf("redis-benchmark: %w", berr)
	}
	if serr != nil {
		return 0, serr
	}
	res, err := ParseRedisCSV(bytes.NewReader(out))
	if err != nil {
		return 0, err
	}
	return res.Overall(r.Requests), nil
}

// RedisResult is redis-benchmark's rate per test.
type RedisResult map[string]float64

// Overall returns total requests per second when every test ran n
// requests: the harmonic mean of the tests' rates.
func (res RedisResult) Overall(n int) float64 {
	if len(res) == 0 || n <= 0 {
		return 0
	}
	var secs float64
	for _, rps := range res {
		if rps <= 0 {
			return 0
		}
		secs += float64(n) / rps
	}
	return float64(n*len(res)) / secs
}

// ParseRedisCSV reads redis-benchmark --csv output: a header line
// starting with "test","rps", then one line per test.
func ParseRedisCSV(r io.Reader) (RedisResult, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("redis-benchmark csv: %w", err)
	}
	if len(recs) < 2 || len(recs[0]) < 2 || recs[0][0] != "test" || recs[0][1] != "rps" {
		return nil, fmt.Errorf("redis-benchmark csv: no \"test\",\"rps\" header in %d lines", len(recs))
	}
	res := RedisResult{}
	for i, rec := range recs[1:] {
		if len(rec) < 2 {
			return nil, fmt.Errorf("redis-benchmark csv line %d: %d fields", i+2, len(rec))
		}
		v, err := strconv.ParseFloat(rec[1], 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("redis-benchmark csv line %d: rate %q", i+2, rec[1])
		}
		res[rec[0]] = v
	}
	return res, nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// command sends one inline command and checks the reply's first line.
func command(addr, cmd, want string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd+"\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("%s: got %q", cmd, got)
	}
	return nil
}

// shutdown sends SHUTDOWN NOSAVE; the server closes the connection
// without a reply when it complies.
func shutdown(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "SHUTDOWN NOSAVE\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		// The exiting server closed (or reset) the connection: it complied.
		return nil
	}
	return fmt.Errorf("SHUTDOWN NOSAVE: %s", strings.TrimSpace(line))
}
