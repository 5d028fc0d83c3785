package qos

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSamplesRoundTrip(t *testing.T) {
	rows := []SampleRow{
		{Mono: 1, State: Starting},
		{Mono: 2 * time.Second, Value: 48213.5, HasValue: true, State: Running},
		{Mono: 3 * time.Second, State: Failing},
		{Mono: 4 * time.Second, Value: 1e-9, HasValue: true, State: Running},
		{Mono: 5 * time.Second, State: Stopped},
	}
	var b bytes.Buffer
	w := NewSamplesWriter(&b)
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(b.String(), "mono_ns,value,state\n1,,starting\n2000000000,48213.5,running\n") {
		t.Errorf("have\n%s", b.String())
	}
	have, err := ReadSamples(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(have) != len(rows) {
		t.Fatalf("have %d rows, want %d", len(have), len(rows))
	}
	for i := range rows {
		h, w := have[i], rows[i]
		if h.Mono != w.Mono || h.HasValue != w.HasValue || h.State != w.State || w.HasValue && h.Value != w.Value {
			t.Errorf("row %d: have %+v, want %+v", i, h, w)
		}
	}
	// a torn last line is dropped
	torn := b.String() + "6000000000,12"
	if have, err := ReadSamples(strings.NewReader(torn)); err != nil || len(have) != len(rows) {
		t.Errorf("torn: have %d rows, %v", len(have), err)
	}
	for _, tt := range []struct{ in, err string }{
		{"", "empty file"},
		{"time,value\n", "header"},
		{"mono_ns,value,state\nx,1,running\n1,1,running\n", "line 2: bad mono_ns"},
		{"mono_ns,value,state\n1,1,dancing\n2,1,running\n", "line 2: bad state"},
	} {
		if _, err := ReadSamples(strings.NewReader(tt.in)); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%q: have %v, want %q", tt.in, err, tt.err)
		}
	}
}
