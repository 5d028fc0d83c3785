package qos

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func FuzzPromText(f *testing.F) {
	f.Add([]byte("# TYPE a counter\na_total{x=\"1\"} 5\n"))
	f.Add([]byte("a{b=\"c\\\"d\\n\",} NaN 123\nb +Inf\n"))
	f.Add([]byte("x{"))
	if src, err := os.ReadFile("../testdata/qos/promserver.c"); err == nil {
		// the exposition lines of the fixture, unescaped roughly
		for _, l := range strings.Split(string(src), "\n") {
			if i := strings.Index(l, `"fixture_`); i >= 0 {
				f.Add([]byte(strings.ReplaceAll(strings.Trim(l[i:], `"`), `\"`, `"`)))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParsePromText(data)
		if err != nil {
			return
		}
		for _, s := range e.Samples {
			if !validName(s.Name) {
				t.Fatalf("sample with bad name %q", s.Name)
			}
			sel := Series{Name: s.Name, Labels: s.Labels, Auto: true}
			if _, n := e.Value(sel); n == 0 {
				t.Fatalf("series %v does not match its own sample", sel)
			}
			// A selector printed by String parses back to the same selector.
			back, err := ParseSeries(sel.String())
			if err != nil || back.Name != sel.Name || len(back.Labels) != len(sel.Labels) {
				t.Fatalf("ParseSeries(%q) = %+v, %v", sel.String(), back, err)
			}
			e.IsCounter(s.Name)
		}
	})
}

func FuzzRESP(f *testing.F) {
	f.Add([]byte("+OK\r\n"))
	f.Add([]byte("$12\r\n# Stats\r\na:1\r\n\r\n"))
	f.Add([]byte("*3\r\n:1\r\n$-1\r\n*1\r\n-ERR x\r\n"))
	f.Add([]byte("$99999999999\r\n"))
	f.Add([]byte("*2\r\n*2\r\n*2\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rr := NewRESPReader(bytes.NewReader(data))
		for i := 0; i < 100; i++ {
			r, err := rr.ReadReply()
			if err != nil {
				if rr.off > int64(len(data)) {
					t.Fatalf("offset %d beyond input of %d bytes", rr.off, len(data))
				}
				return
			}
			if strings.IndexByte("+-:$*", r.Kind) < 0 {
				t.Fatalf("reply of kind %q", r.Kind)
			}
		}
	})
}

func TestRESPErrors(t *testing.T) {
	for _, tt := range []struct{ in, err string }{
		{"+OK\n", "not ended by CRLF at byte 0"},
		{"?x\r\n", "unknown reply type"},
		{":12a\r\n", "bad integer"},
		{"$5\r\nab", "closed inside a bulk string"},
		{"$2\r\nabcd\r\n", "bulk string not ended by CRLF at byte 6"},
		{"$99999999999\r\n", "limit"},
		{"*-2\r\n", "bad array length"},
		{strings.Repeat("*1\r\n", 10) + ":1\r\n", "nested too deep"},
		{"+OK", "closed inside a reply"},
	} {
		_, err := NewRESPReader(strings.NewReader(tt.in)).ReadReply()
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%q: have %v, want %q", tt.in, err, tt.err)
		}
	}
	r, err := NewRESPReader(strings.NewReader("*2\r\n$3\r\nfoo\r\n$-1\r\n")).ReadReply()
	if err != nil || len(r.Elems) != 2 || r.Elems[0].Str != "foo" || !r.Elems[1].Null {
		t.Errorf("array: have %+v, %v", r, err)
	}
}
