package qos

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stint-project/stint/runtime"
)

// TestPageLayout pins our offsets to the Go mirror of stint_abi.h (which
// runtime's tests pin to the C header).
func TestPageLayout(t *testing.T) {
	typ := reflect.TypeOf(runtime.QoSPage{})
	want := map[string]int{
		"Magic": offMagic, "Version": offVersion, "Flags": offFlags, "Tuning": offTuning,
		"State": offState, "Seq": offSeq, "Threshold": offThreshold, "Max": offMax,
		"Value": offValue, "SampleMonoNS": offSampleNS, "IntervalNS": offInterval,
		"Samples": offSamples, "AnalyzerPID": offPID, "Source": offSource,
	}
	for name, off := range want {
		f, ok := typ.FieldByName(name)
		if !ok {
			t.Errorf("runtime.QoSPage has no field %s", name)
			continue
		}
		if int(f.Offset) != off {
			t.Errorf("%s: have offset %d, want %d", name, f.Offset, off)
		}
	}
	f, _ := typ.FieldByName("Source")
	if f.Type.Len() != sourceSize || typ.Size() != runtime.QoSPageStructSize {
		t.Errorf("source %d bytes, struct %d; want %d, %d", f.Type.Len(), typ.Size(), sourceSize, runtime.QoSPageStructSize)
	}
}

func testConfig() Config {
	return Config{Threshold: 30000, Tuning: TuneSum, Interval: time.Second, Source: "redis://127.0.0.1:6379"}
}

func TestPageRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page")
	cfg := Config{Threshold: 0.005, Max: 0.001, Tuning: TuneSpan, LowerIsBetter: true, Interval: 250 * time.Millisecond, Source: strings.Repeat("x", 200)}
	p, err := CreatePage(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadPage(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != Starting || s.SampleMono != 0 || s.Samples != 0 || s.Seq%2 != 0 || s.Seq == 0 {
		t.Errorf("fresh page: have state %v, sample %v, samples %d, seq %d", s.State, s.SampleMono, s.Samples, s.Seq)
	}
	if err := p.Publish(0.0042, 12345*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	s, err = ReadPage(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Snapshot{
		Magic: runtime.QoSMagic, Version: runtime.QoSVersion, LowerIsBetter: true, Flags: runtime.QoSLowerIsBetter,
		Tuning: TuneSpan, State: Running, Seq: s.Seq, Threshold: 0.005, Max: 0.001, Value: 0.0042,
		SampleMono: 12345 * time.Millisecond, Interval: 250 * time.Millisecond, Samples: 1,
		AnalyzerPID: uint32(os.Getpid()), Source: strings.Repeat("x", 127),
	}
	if s != want {
		t.Errorf("have %+v\nwant %+v", s, want)
	}
	if err := p.Publish(-1, time.Second); err == nil {
		t.Error("Publish(-1): no error")
	}
	if err := p.Publish(math.NaN(), time.Second); err == nil {
		t.Error("Publish(NaN): no error")
	}
	p.SetState(Failing)
	if s, _ := ReadPage(path); s.State != Failing || s.Value != 0.0042 {
		t.Errorf("after SetState(Failing): have %v %v", s.State, s.Value)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if s, _ := ReadPage(path); s.State != Stopped {
		t.Errorf("after Close: have state %v, want stopped", s.State)
	}

	// A second analyzer takes the page over in place; seq keeps growing.
	seq := s.Seq
	p2, err := CreatePage(path, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, _ = ReadPage(path)
	if s.State != Starting || s.Seq <= seq || s.Samples != 0 || s.Source != "redis://127.0.0.1:6379" || s.Max != 0 {
		t.Errorf("takeover: have %+v (old seq %d)", s, seq)
	}
	// ... but not while p2 holds it.
	if _, err := CreatePage(path, testConfig()); !errors.Is(err, ErrPageInUse) {
		t.Errorf("second writer: have %v, want ErrPageInUse", err)
	}
	if err := p2.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("Remove left the file: %v", err)
	}
}

func TestPageErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := make([]byte, runtime.QoSPageSize)
	p, err := CreatePage(filepath.Join(dir, "good"), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	copy(good, p.mem)
	p.Close()
	badVersion := append([]byte(nil), good...)
	badVersion[offVersion] = 9
	badMagic := append([]byte(nil), good...)
	badMagic[0] ^= 1
	tests := []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "nope"), "no such file"},
		{"short", write("short", good[:100]), "file is 100 bytes, want 4096"},
		{"zero", write("zero", make([]byte, 4096)), "magic is zero"},
		{"magic", write("magic", badMagic), "magic 0x534f51544e495452"},
		{"version", write("version", badVersion), "version 9, this stint reads version 1"},
		{"dir", dir, "not a regular file"},
	}
	for _, tt := range tests {
		_, err := ReadPage(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: have %v, want an error with %q", tt.name, err, tt.want)
		}
	}
	// The writer never overwrites what is not a QoS page.
	for _, name := range []string{"short", "magic"} {
		if _, err := CreatePage(filepath.Join(dir, name), testConfig()); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
			t.Errorf("CreatePage over %s: have %v, want a refusal", name, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "short"))
	if len(b) != 100 {
		t.Errorf("refused file changed: %d bytes", len(b))
	}
	for _, c := range []Config{
		{Threshold: 0, Interval: time.Second},
		{Threshold: math.Inf(1), Interval: time.Second},
		{Threshold: 10, Tuning: TuneSpan, Max: 5, Interval: time.Second},
		{Threshold: 10, Tuning: TuneSpan, Max: 50, LowerIsBetter: true, Interval: time.Second},
		{Threshold: 10, Tuning: 7, Interval: time.Second},
		{Threshold: 10},
	} {
		if _, err := CreatePage(filepath.Join(dir, "cfg"), c); err == nil {
			t.Errorf("CreatePage(%+v): no error", c)
		}
	}
}

// TestSeqlock: a reader never sees a half-written sample while the
// writer publishes as fast as it can. Every sample has Value == 2 *
// SampleMono and Samples == SampleMono, which a torn read would break.
func TestSeqlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page")
	p, err := CreatePage(path, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove()
	const n = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= n; i++ {
			p.Publish(float64(2*i), time.Duration(i))
		}
	}()
	reads, last := 0, uint64(0)
	for {
		s, err := readSeq(p.mem)
		if err != nil {
			t.Fatal(err)
		}
		reads++
		if s.Samples != 0 && (s.Value != 2*float64(s.SampleMono) || s.Samples != uint64(s.SampleMono)) {
			t.Fatalf("torn read: value %v, mono %d, samples %d", s.Value, s.SampleMono, s.Samples)
		}
		if s.Seq < last || s.Seq%2 != 0 {
			t.Fatalf("seq %d after %d", s.Seq, last)
		}
		last = s.Seq
		if s.Samples == n {
			break
		}
	}
	wg.Wait()
	t.Logf("%d consistent reads", reads)
}

func TestDefaultPagePath(t *testing.T) {
	a, b := DefaultPagePath(), DefaultPagePath()
	if a == b || !strings.Contains(a, "stint-qos.") {
		t.Errorf("have %q and %q", a, b)
	}
}
