package qos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stepClock is a fake CLOCK_MONOTONIC that advances by step at every
// reading, so a rate is the count's difference divided by step exactly.
func stepClock(step time.Duration) Clock {
	var t time.Duration
	return func() time.Duration { t += step; return t }
}

func mustSource(t *testing.T, spec string) Source {
	t.Helper()
	s, err := ParseSource(spec, SourceOptions{Period: time.Second, Clock: stepClock(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type want struct {
	v  float64
	ok bool
}

func sample(t *testing.T, s Source, w want) {
	t.Helper()
	v, ok, err := s.Sample(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	if ok != w.ok || ok && v != w.v {
		t.Fatalf("%s: have %v (ok %v), want %v (ok %v)", s, v, ok, w.v, w.ok)
	}
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestFileRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.gz")
	s := mustSource(t, "file-rate:"+path)
	sample(t, s, want{})                           // baseline: missing file = 0 bytes
	sample(t, s, want{0, true})                    // still missing
	appendFile(t, path, strings.Repeat("x", 3000)) // appears
	sample(t, s, want{3000, true})
	appendFile(t, path, strings.Repeat("x", 500))
	sample(t, s, want{500, true})
	os.Truncate(path, 100) // truncated: 100 new bytes since
	sample(t, s, want{100, true})
	// rotated: a new file (new inode) even larger than the old one
	os.Rename(path, path+".1")
	appendFile(t, path, strings.Repeat("y", 4000))
	sample(t, s, want{4000, true})
	sample(t, s, want{0, true})
}

func TestLogRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	appendFile(t, path, "old 1\nold 2\n")
	s := mustSource(t, "log-rate:"+path)
	sample(t, s, want{}) // lines already there do not count
	appendFile(t, path, "a\nb\nc\npartial")
	sample(t, s, want{3, true})
	appendFile(t, path, " line\n")
	sample(t, s, want{1, true})
	// rotation: two more lines into the old file, then a new file
	appendFile(t, path, "d\ne\n")
	os.Rename(path, path+".1")
	appendFile(t, path, "new 1\nnew 2\nnew 3\n")
	sample(t, s, want{5, true})
	// truncation (copytruncate): read again from the start
	os.Truncate(path, 0)
	appendFile(t, path, "t\n")
	sample(t, s, want{1, true})
	// removed, then created again
	os.Remove(path)
	sample(t, s, want{0, true})
	appendFile(t, path, "x\ny\n")
	sample(t, s, want{2, true})
}

func TestLogRateMissingAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "later.log")
	s := mustSource(t, "log-rate:"+path)
	sample(t, s, want{})
	appendFile(t, path, "1\n2\n")
	sample(t, s, want{2, true}) // a file that appears later counts whole
}

func TestCmdSource(t *testing.T) {
	s := mustSource(t, `cmd:echo "latency=12.5ms p99"`)
	sample(t, s, want{12.5, true})
	s = mustSource(t, `cmd:printf 'no digits\n'; echo 3e2 >/dev/null`)
	if _, _, err := s.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), "printed no number") {
		t.Errorf("no number: have %v", err)
	}
	s = mustSource(t, `cmd:echo oops >&2; exit 3`)
	if _, _, err := s.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), "exit status 3: oops") {
		t.Errorf("failing command: have %v", err)
	}
	slow, err := ParseSource("cmd:sleep 5; echo 1", SourceOptions{Period: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := slow.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), "no answer within 150ms") {
		t.Errorf("slow command: have %v", err)
	}
}

func TestFirstNumber(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want float64
	}{{"42", 42}, {"x=-3.5e2 y=1", -350}, {"ops .5/s", 0.5}, {"v1.2.3", 1.2}} {
		if have, err := FirstNumber([]byte(tt.in)); err != nil || have != tt.want {
			t.Errorf("%q: have %v, %v; want %v", tt.in, have, err, tt.want)
		}
	}
}

func TestParseSourceErrors(t *testing.T) {
	for _, tt := range []struct{ spec, err string }{
		{"", "unknown kind"},
		{"ftp://x", "unknown kind"},
		{"file-rate:", "want file-rate:PATH"},
		{"log-rate:", "want log-rate:PATH"},
		{"cmd:  ", "want cmd:COMMAND"},
		{"redis://localhost", "want redis://HOST:PORT"},
		{"redis://localhost:99999", "bad port"},
		{"redis://localhost:6379/2", "database paths"},
		{"redis://localhost:6379?field=a&rate=b", "not both"},
		{"redis://localhost:6379?db=1", "unknown parameter"},
		{"prom:http://x:1/metrics", "want prom:URL#SERIES"},
		{"prom:ftp://x/metrics#a", "want http://"},
		{"prom:http://x:1/m#rate(a", "without )"},
		{"prom:http://x:1/m#a{b=c}", "quoted value"},
		{"prom:http://x:1/m#9lives", "want a metric name"},
	} {
		_, err := ParseSource(tt.spec, SourceOptions{})
		var se *SourceError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%q: have %v, want a *SourceError with %q", tt.spec, err, tt.err)
		}
	}
}

// freePort returns a TCP port nothing listens on (just now).
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestUnreachable(t *testing.T) {
	port := freePort(t)
	for _, spec := range []string{
		fmt.Sprintf("redis://127.0.0.1:%d", port),
		fmt.Sprintf("prom:http://127.0.0.1:%d/metrics#up", port),
	} {
		s := mustSource(t, spec)
		_, _, err := s.Sample(context.Background())
		if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("%s: have %v, want connection refused naming the address", spec, err)
		}
	}
}

// startRedis starts redis-server on a free port and returns the port.
func startRedis(t *testing.T) int {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed (Debian package redis-server)")
	}
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--logfile", "")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return port
		}
		if i == 500 {
			t.Fatalf("redis-server did not listen on %d: %v", port, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// redisDo sends n PINGs on a fresh connection and reads the replies.
func redisPings(t *testing.T, port, n int) {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b []byte
	for i := 0; i < n; i++ {
		b = AppendCommand(b, "PING")
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	rr := NewRESPReader(bufio.NewReader(c))
	for i := 0; i < n; i++ {
		r, err := rr.ReadReply()
		if err != nil || r.Kind != '+' || r.Str != "PONG" {
			t.Fatalf("PING %d: %+v, %v", i, r, err)
		}
	}
}

func TestRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	port := startRedis(t)
	s := mustSource(t, fmt.Sprintf("redis://127.0.0.1:%d", port))
	sample(t, s, want{})
	sample(t, s, want{0, true}) // our own INFO does not count
	redisPings(t, port, 250)
	sample(t, s, want{250, true}) // exactly the other client's commands per (fake) second
	sample(t, s, want{0, true})

	g := mustSource(t, fmt.Sprintf("redis://127.0.0.1:%d?field=tcp_port", port))
	sample(t, g, want{float64(port), true})
	r := mustSource(t, fmt.Sprintf("redis://127.0.0.1:%d?rate=total_connections_received", port))
	sample(t, r, want{})
	redisPings(t, port, 1)
	redisPings(t, port, 1)
	sample(t, r, want{2, true})
	bad := mustSource(t, fmt.Sprintf("redis://127.0.0.1:%d?field=no_such_field", port))
	if _, _, err := bad.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), `no field "no_such_field"`) {
		t.Errorf("missing field: have %v", err)
	}
	auth := mustSource(t, fmt.Sprintf("redis://:secret@127.0.0.1:%d", port))
	if _, _, err := auth.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), "AUTH") {
		t.Errorf("AUTH without a password set: have %v, want the server's AUTH error", err)
	}
}

// startPromServer builds and starts testdata/qos/promserver.c.
func startPromServer(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed")
	}
	bin := filepath.Join(t.TempDir(), "promserver")
	if out, err := exec.Command(gcc, "-O2", "-Wall", "-o", bin, "../testdata/qos/promserver.c").CombinedOutput(); err != nil {
		t.Fatalf("build promserver: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var port int
	if _, err2 := fmt.Sscanf(line, "PORT %d", &port); err != nil || err2 != nil {
		t.Fatalf("promserver said %q: %v %v", line, err, err2)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

func TestProm(t *testing.T) {
	base := startPromServer(t)
	m := base + "/metrics"
	// A counter (TYPE counter) becomes a rate: +1000 per scrape.
	s := mustSource(t, "prom:"+m+`#fixture_requests_total{code="200"}`)
	sample(t, s, want{})
	sample(t, s, want{1000, true})
	// Without the label both codes are summed: +1010 per scrape.
	s = mustSource(t, "prom:"+m+`#fixture_requests_total`)
	sample(t, s, want{})
	sample(t, s, want{1010, true})
	// value() takes the counter as it is (scrape 5 by now: 5000).
	s = mustSource(t, "prom:"+m+`#value(fixture_requests_total{code="200"})`)
	sample(t, s, want{5000, true})
	// Gauges with escaped label values; a timestamp after the value.
	s = mustSource(t, "prom:"+m+`#fixture_temperature{room="a b",note="say \"hi\"\n"}`)
	sample(t, s, want{21.5, true})
	s = mustSource(t, "prom:"+m+`#fixture_temperature{room="c"}`)
	sample(t, s, want{19, true})
	// Histogram _count is a rate; an untyped _total too; an untyped gauge is not.
	s = mustSource(t, "prom:"+m+`#fixture_latency_seconds_count`)
	sample(t, s, want{})
	sample(t, s, want{2, true})
	s = mustSource(t, "prom:"+m+`#fixture_untyped_total`)
	sample(t, s, want{})
	sample(t, s, want{7, true})
	s = mustSource(t, "prom:"+m+`#rate(fixture_untyped)`)
	sample(t, s, want{})
	sample(t, s, want{0, true})
	s = mustSource(t, "prom:"+m+`#fixture_untyped`)
	sample(t, s, want{3, true})

	for _, tt := range []struct{ spec, err string }{
		{m + "#no_such_metric", "no series no_such_metric among 10 samples"},
		{m + `#fixture_temperature{room="z"}`, "no series"},
		{base + "/garbage#fixture_requests_total", "line 1"},
		{base + "/nothing#up", "HTTP 404"},
	} {
		s := mustSource(t, "prom:"+tt.spec)
		if _, _, err := s.Sample(context.Background()); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: have %v, want an error with %q", tt.spec, err, tt.err)
		}
	}
	slow, _ := ParseSource("prom:"+base+"/slow#fixture_untyped", SourceOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := slow.Sample(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow endpoint: have %v, want the deadline", err)
	}
}

// TestFileRateSteps: a writer that writes in chunks (gzip: 256 KiB at a
// time, 18 a second) at an even pace gets an even rate when the file is
// watched between samples, where one observation per period sees 17 to
// 19 chunks by their phase alone. A writer that stops halfway through a
// period shows about half its rate, then 0.
func TestFileRateSteps(t *testing.T) {
	const (
		chunk = 1000
		every = 55 * time.Millisecond // 18.2 chunks a second
		ms    = time.Millisecond
	)
	path := filepath.Join(t.TempDir(), "out.gz")
	var now time.Duration
	opt := SourceOptions{Period: time.Second, Clock: func() time.Duration { return now }}
	run := func(watch bool, stopAt time.Duration) []float64 {
		os.Remove(path)
		src, err := ParseSource("file-rate:"+path, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		w, ok := src.(Watcher)
		if !ok {
			t.Fatal("file-rate is not a Watcher")
		}
		var vals []float64
		size := 0
		for now = 0; now <= 8*time.Second; now += ms {
			if now%every == 7*ms && now < stopAt {
				size += chunk
				if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			switch {
			case now%time.Second == 0:
				v, ok, err := src.Sample(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					vals = append(vals, v)
				}
			case watch && now%(10*ms) == 0:
				w.Watch(context.Background())
			}
		}
		return vals
	}
	rate := float64(chunk) / every.Seconds()
	spread := func(vals []float64) (lo, hi float64) {
		lo, hi = vals[0], vals[0]
		for _, v := range vals {
			lo, hi = min(lo, v), max(hi, v)
		}
		return lo / rate, hi / rate
	}

	// One observation per period: the chunks' phase alone moves the rate.
	if lo, hi := spread(run(false, 1<<62)[1:]); hi-lo < 0.04 {
		t.Fatalf("unwatched rates within %.3f..%.3f of the true rate; the test no longer shows the quantization", lo, hi)
	}
	// Watched: every period after the first within 2% of the true rate.
	vals := run(true, 1<<62)
	if lo, hi := spread(vals[1:]); lo < 0.98 || hi > 1.02 {
		t.Fatalf("watched rates %.3f..%.3f of the true rate, want within 2%%: %v", lo, hi, vals)
	}
	// The writer stops at 5.5 s: the period ending at 6 s (the sixth
	// value) shows about half the rate, and the one ending at 7 s nothing.
	vals = run(true, 5500*ms)
	if r := vals[5] / rate; r < 0.4 || r > 0.6 {
		t.Fatalf("period 5-6 s, writer stopped at 5.5 s: %.2f of the rate, want about 0.5 (%v)", r, vals)
	}
	if vals[6] != 0 {
		t.Fatalf("period 6-7 s, writer stopped: rate %v, want 0 (%v)", vals[6], vals)
	}
}
