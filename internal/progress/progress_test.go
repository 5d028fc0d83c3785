package progress

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
)

func TestQuietWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, "reading", Total(100))
	b.Add(50)
	b.SetLabel("other")
	b.Done()
	if buf.Len() != 0 {
		t.Errorf("bar on a buffer wrote %q, want nothing", buf.String())
	}
	if b.Active() {
		t.Error("Active() = true on a buffer")
	}

	// A regular file is not a terminal either.
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("IsTerminal(regular file) = true")
	}
	b = New(f, "reading", Total(10))
	b.Set(5)
	b.Done()
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Errorf("bar on a file wrote %d bytes", st.Size())
	}
}

func TestDraw(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		do   func(*Bar)
		want []string
	}{
		{"percent", []Option{Total(200)}, func(b *Bar) { b.Add(50); b.Add(50) }, []string{"work  [", "]  50%  100 / 200"}},
		{"bytes", []Option{Total(4 << 20), Bytes()}, func(b *Bar) { b.Set(1 << 20) }, []string{"25%", "1.0 MiB / 4.0 MiB"}},
		{"unknown total", []Option{Unit("events")}, func(b *Bar) { b.Add(7) }, []string{"work  7 events"}},
		{"over total", []Option{Total(10)}, func(b *Bar) { b.Set(30) }, []string{"100%"}},
		{"label", []Option{Total(10)}, func(b *Bar) { b.SetLabel("file.arrow"); b.Set(1) }, []string{"file.arrow  ["}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			b := New(&buf, "work", append(tc.opts, Terminal(true), Interval(0))...)
			tc.do(b)
			out := buf.String()
			last := out[strings.LastIndex(out, "\r"):]
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("have %q, want it to contain %q", last, w)
				}
			}
			b.Done()
			if have := buf.String(); !strings.HasSuffix(have, "\r\x1b[K") {
				t.Errorf("Done left %q, want the line erased", have[len(out):])
			}
			n := buf.Len()
			b.Add(1)
			b.Done()
			if buf.Len() != n {
				t.Errorf("drew %q after Done", buf.String()[n:])
			}
		})
	}
}

func TestWidth(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, strings.Repeat("x", 100), Terminal(true), Interval(0), Width(40), Total(5))
	b.Set(1)
	line := strings.TrimPrefix(buf.String(), "\r\x1b[K")
	if n := len([]rune(line)); n != 39 {
		t.Errorf("line of %d runes (%q), want 39 for a width of 40", n, line)
	}
}

func TestThrottle(t *testing.T) {
	var buf bytes.Buffer
	// An interval far longer than the test: only the first update draws.
	b := New(&buf, "work", Terminal(true), Interval(1<<62), Total(1000))
	for range 1000 {
		b.Add(1)
	}
	if n := strings.Count(buf.String(), "\r\x1b[K"); n != 1 {
		t.Errorf("drew %d times, want 1", n)
	}
}

func TestNilBar(t *testing.T) {
	var b *Bar
	b.Add(1)
	b.Set(2)
	b.SetTotal(3)
	b.SetLabel("x")
	b.Done()
	if b.Active() {
		t.Error("nil bar is active")
	}
}

func TestConcurrent(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, "work", Terminal(true), Interval(0), Total(4000))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				b.Add(1)
			}
		}()
	}
	wg.Wait()
	out := buf.String()
	if !strings.Contains(out[strings.LastIndex(out, "\r"):], "4000 / 4000") {
		t.Errorf("last drawing %q, want 4000 / 4000", out[strings.LastIndex(out, "\r"):])
	}
	b.Done()
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {5 << 30, "5.0 GiB"}} {
		if have := FormatBytes(tc.n); have != tc.want {
			t.Errorf("FormatBytes(%d): have %q, want %q", tc.n, have, tc.want)
		}
	}
}
