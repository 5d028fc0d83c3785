package qos

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// The samples file (--samples FILE) is CSV with a header line and one row
// per period, written and flushed as the analyzer goes:
//
//	mono_ns,value,state
//	1234567890123,,starting
//	1235567890123,48213.5,running
//	1236567890456,,failing
//	1237567890789,51002,running
//	1237999000000,,stopped
//
// mono_ns is CLOCK_MONOTONIC in nanoseconds when the period's
// observation ended (the same clock as the time column of the runtime's
// trace rows, so the two can be joined); value is the metric published
// in that period, empty when there was none (a rate's first observation,
// or an error); state is the page's state after the period. The last row
// says stopped.

// SampleRow is one row of a samples file.
type SampleRow struct {
	Mono     time.Duration
	Value    float64 // NaN when HasValue is false
	HasValue bool
	State    State
}

var samplesHeader = []string{"mono_ns", "value", "state"}

// SamplesWriter writes a samples file.
type SamplesWriter struct {
	w   *csv.Writer
	err error
}

// NewSamplesWriter writes the header to w.
func NewSamplesWriter(w io.Writer) *SamplesWriter {
	s := &SamplesWriter{w: csv.NewWriter(w)}
	s.w.Write(samplesHeader)
	s.w.Flush()
	s.err = s.w.Error()
	return s
}

// Write writes one row and flushes it. The first error sticks.
func (s *SamplesWriter) Write(r SampleRow) error {
	if s.err != nil {
		return s.err
	}
	v := ""
	if r.HasValue {
		v = strconv.FormatFloat(r.Value, 'g', -1, 64)
	}
	s.w.Write([]string{strconv.FormatInt(int64(r.Mono), 10), v, r.State.String()})
	s.w.Flush()
	s.err = s.w.Error()
	return s.err
}

// SamplesError is a malformed samples file.
type SamplesError struct {
	Line int
	Msg  string
}

func (e *SamplesError) Error() string { return fmt.Sprintf("samples file, line %d: %s", e.Line, e.Msg) }

// ReadSamples reads a samples file. A last line cut short (the analyzer
// was killed while writing it) is dropped, not reported.
func ReadSamples(r io.Reader) ([]SampleRow, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err == io.EOF {
		return nil, &SamplesError{1, "empty file, want the header " + fmt.Sprint(samplesHeader)}
	}
	if err != nil {
		return nil, &SamplesError{1, err.Error()}
	}
	if len(head) != 3 || head[0] != samplesHeader[0] || head[1] != samplesHeader[1] || head[2] != samplesHeader[2] {
		return nil, &SamplesError{1, fmt.Sprintf("header %q, want %q", head, samplesHeader)}
	}
	var rows []SampleRow
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return nil, &SamplesError{line, err.Error()}
		}
		if err != nil {
			return nil, err
		}
		row, err := parseSampleRow(rec)
		if err != nil {
			if len(rec) < 3 || rec[2] == "" {
				// maybe a torn last line: fine if nothing follows
				if _, err2 := cr.Read(); err2 == io.EOF {
					return rows, nil
				}
			}
			return nil, &SamplesError{line, err.Error()}
		}
		rows = append(rows, row)
	}
}

func parseSampleRow(rec []string) (SampleRow, error) {
	var r SampleRow
	if len(rec) != 3 {
		return r, fmt.Errorf("%d fields, want 3", len(rec))
	}
	ns, err := strconv.ParseInt(rec[0], 10, 64)
	if err != nil || ns < 0 {
		return r, fmt.Errorf("bad mono_ns %q", rec[0])
	}
	r.Mono = time.Duration(ns)
	r.Value = math.NaN()
	if rec[1] != "" {
		if r.Value, err = strconv.ParseFloat(rec[1], 64); err != nil {
			return r, fmt.Errorf("bad value %q", rec[1])
		}
		r.HasValue = true
	}
	for _, s := range []State{Starting, Running, Failing, Stopped} {
		if s.String() == rec[2] {
			r.State = s
			return r, nil
		}
	}
	return r, fmt.Errorf("bad state %q", rec[2])
}
