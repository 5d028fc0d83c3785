package qos

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// flaky is a Source whose answers the test scripts.
type flaky struct {
	answers []error
	i       int
}

func (f *flaky) Sample(context.Context) (float64, bool, error) {
	err := f.answers[f.i%len(f.answers)]
	f.i++
	return float64(f.i), err == nil, err
}
func (f *flaky) String() string { return "flaky" }
func (f *flaky) Close() error   { return nil }

// tempPage creates a page with testConfig in a temporary directory,
// removed when the test ends.
func tempPage(t *testing.T) *Page {
	t.Helper()
	p, err := CreatePage(filepath.Join(t.TempDir(), "page"), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Remove() })
	return p
}

// TestAnalyzerFailing: errors set state failing with one message per
// streak; a good sample sets running again.
func TestAnalyzerFailing(t *testing.T) {
	p := tempPage(t)
	boom := os.ErrDeadlineExceeded
	var log, csv bytes.Buffer
	a := &Analyzer{
		Source: &flaky{answers: []error{nil, boom, boom, boom, nil}},
		Page:   p, Period: time.Second, Log: &log, Samples: NewSamplesWriter(&csv), Clock: stepClock(time.Second),
	}
	wantStates := []State{Running, Failing, Failing, Failing, Running}
	for i, want := range wantStates {
		a.Step(context.Background())
		s, _ := p.Snapshot()
		if s.State != want {
			t.Errorf("step %d: have state %v, want %v", i, s.State, want)
		}
	}
	s, _ := p.Snapshot()
	if s.Value != 5 || s.Samples != 2 {
		t.Errorf("have value %v after %d samples, want 5 after 2", s.Value, s.Samples)
	}
	if n := strings.Count(log.String(), "failing"); n != 1 {
		t.Errorf("have %d failing messages, want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "answers again") {
		t.Errorf("no recovery message:\n%s", log.String())
	}
	if st := a.Stats(); st != (Stats{Periods: 5, Published: 2, Errors: 3}) {
		t.Errorf("stats %+v", st)
	}
	rows, err := ReadSamples(&csv)
	if err != nil || len(rows) != 5 || rows[1].HasValue || rows[1].State != Failing || rows[4].Value != 5 {
		t.Errorf("samples: %+v, %v", rows, err)
	}
}

// watched is a Watcher that counts the watches between its samples.
type watched struct {
	between []int
	n       int
}

func (w *watched) Watch(context.Context) { w.n++ }
func (w *watched) Sample(context.Context) (float64, bool, error) {
	w.between = append(w.between, w.n)
	w.n = 0
	return 1, true, nil
}
func (w *watched) String() string { return "watched" }
func (w *watched) Close() error   { return nil }

// TestAnalyzerWatches: a Watcher source is watched between samples, not
// only sampled.
func TestAnalyzerWatches(t *testing.T) {
	p := tempPage(t)
	w := &watched{}
	a := &Analyzer{Source: w, Page: p, Period: 200 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 650*time.Millisecond)
	defer cancel()
	a.Run(ctx)
	// 200 ms at WatchEvery's 2 ms: about 100 watches a period; a loaded
	// machine drops ticks, so ask only for more than one.
	if len(w.between) < 2 || w.between[1] < 2 {
		t.Fatalf("watches between samples: %v", w.between)
	}
}

func testOptions(t *testing.T, src string) Options {
	s, err := ParseSource(src, SourceOptions{Period: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Config: Config{Threshold: 1, Tuning: TuneSum}, Source: s, Period: 50 * time.Millisecond,
		DefaultBudget: "10%", Env: []string{"PATH=" + os.Getenv("PATH"), "STINT_PERIOD=9s", "KEEP=1"},
	}
}

// TestRunProgram: the child sees the STINT_* environment and a page in
// state running; its exit status comes back; the page is removed.
func TestRunProgram(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, "cmd:echo 7")
	o.Log = filepath.Join(dir, "red.log")
	o.PagePath = filepath.Join(dir, "page")
	var out, samples bytes.Buffer
	o.Stdout, o.Stderr, o.Samples = &out, &out, &samples
	// The child waits until the page says running (state at offset 20 is 1)
	// and prints its environment and the page's state and value.
	script := `
for i in $(seq 200); do
	st=$(od -An -tu4 -j20 -N4 "$STINT_QOS" | tr -d ' ')
	[ "$st" = 1 ] && break
	sleep 0.02
done
echo "state=$st"
echo "value=$(od -An -tf8 -j48 -N8 "$STINT_QOS" | tr -d ' ')"
env | grep -E '^(STINT_|KEEP)' | sort
exit 7`
	res, err := RunProgram(context.Background(), o, []string{"sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || res.Signal != "" {
		t.Errorf("have exit %d %q, want 7", res.ExitCode, res.Signal)
	}
	want := "state=1\nvalue=7\nKEEP=1\nSTINT_BUDGET=10%\nSTINT_LOG=" + o.Log + "\nSTINT_PERIOD=50ms\nSTINT_QOS=" + o.PagePath + "\n"
	if out.String() != want {
		t.Errorf("child printed\n%s\nwant\n%s", out.String(), want)
	}
	if _, err := os.Stat(o.PagePath); !os.IsNotExist(err) {
		t.Errorf("page not removed: %v", err)
	}
	rows, err := ReadSamples(&samples)
	if err != nil || len(rows) < 2 || rows[0].Value != 7 || rows[len(rows)-1].State != Stopped {
		t.Errorf("samples %+v, %v", rows, err)
	}
}

func TestRunProgramSignals(t *testing.T) {
	o := testOptions(t, "cmd:echo 1")
	sigs := make(chan os.Signal, 1)
	o.Signals = sigs
	var out bytes.Buffer
	o.Stdout = &out
	// The child says it is ready, then waits; a forwarded SIGTERM kills it.
	r, w, _ := os.Pipe()
	defer r.Close()
	o.Stdout = w
	go func() {
		buf := make([]byte, 6)
		r.Read(buf)
		sigs <- syscall.SIGTERM
	}()
	res, err := RunProgram(context.Background(), o, []string{"sh", "-c", "echo ready; exec sleep 30"})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 128+int(syscall.SIGTERM) || res.Signal != "terminated" {
		t.Errorf("have exit %d (%q), want 143 (terminated)", res.ExitCode, res.Signal)
	}
	// Cancelling the context stops the program too.
	o = testOptions(t, "cmd:echo 1")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	res, err = RunProgram(ctx, o, []string{"sleep", "30"})
	if err != nil || res.ExitCode != 143 {
		t.Errorf("cancel: have %+v, %v", res, err)
	}
}

func TestRunProgramErrors(t *testing.T) {
	o := testOptions(t, "cmd:echo 1")
	o.PagePath = filepath.Join(t.TempDir(), "page")
	if _, err := RunProgram(context.Background(), o, []string{"/no/such/program"}); err == nil || !strings.Contains(err.Error(), "start /no/such/program") {
		t.Errorf("missing program: have %v", err)
	}
	if _, err := os.Stat(o.PagePath); !os.IsNotExist(err) {
		t.Errorf("page left behind: %v", err)
	}
	if _, err := RunProgram(context.Background(), o, nil); err == nil {
		t.Error("no program: no error")
	}
}

func TestWatch(t *testing.T) {
	o := testOptions(t, "cmd:echo 3")
	o.PagePath = filepath.Join(t.TempDir(), "page")
	child, err := os.StartProcess("/bin/sleep", []string{"sleep", "0.3"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	go child.Wait()
	st, err := Watch(context.Background(), o, child.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Published == 0 {
		t.Errorf("nothing published: %+v", st)
	}
	if _, err := os.Stat(o.PagePath); !os.IsNotExist(err) {
		t.Errorf("page of an exited program not removed: %v", err)
	}
	// Stopped by its context, the page stays (state stopped).
	o = testOptions(t, "cmd:echo 3")
	o.PagePath = filepath.Join(t.TempDir(), "page")
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if _, err := Watch(ctx, o, 0); err != nil {
		t.Fatal(err)
	}
	s, err := ReadPage(o.PagePath)
	if err != nil || s.State != Stopped || s.Value != 3 {
		t.Errorf("after watch: %+v, %v", s, err)
	}
	if _, err := Watch(ctx, o, 1<<30); err == nil {
		t.Error("watch of a process that does not exist: no error")
	}
}
