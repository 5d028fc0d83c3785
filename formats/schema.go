package formats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Column indices in [Schema], in order.
const (
	ColKind = iota
	ColTID
	ColTime
	ColSrcModule
	ColSrc
	ColDstModule
	ColDst
	ColValue
	NumCols
)

// ColWidth holds each column's value width in bytes, indexed by column.
var ColWidth = [NumCols]int{1, 4, 8, 2, 8, 2, 8, 8}

// ColName holds each column's name, indexed by column.
var ColName = [NumCols]string{"kind", "tid", "time", "src_module", "src", "dst_module", "dst", "value"}

var colType = [NumCols]arrow.DataType{
	arrow.PrimitiveTypes.Uint8,
	arrow.PrimitiveTypes.Uint32,
	arrow.PrimitiveTypes.Uint64,
	arrow.PrimitiveTypes.Uint16,
	arrow.PrimitiveTypes.Uint64,
	arrow.PrimitiveTypes.Uint16,
	arrow.PrimitiveTypes.Uint64,
	arrow.PrimitiveTypes.Uint64,
}

// Schema metadata keys and the fixed capacities of their values.
const (
	MetaVersion = "stint.version"
	MetaRun     = "stint.run"
	MetaModules = "stint.modules"

	// Version is the value of MetaVersion this package writes and reads.
	Version = "1"

	RunCap     = 4096  // bytes of the MetaRun value
	ModulesCap = 65536 // bytes of the MetaModules value
)

// NoModule is the module id of an address that lies in no known module;
// the address is then absolute.
const NoModule = 0xFFFF

// Schema returns the trace schema without metadata (the columns only).
// Every trace file's schema has these fields, in this order, plus the
// metadata described in the package documentation.
func Schema() *arrow.Schema {
	return arrow.NewSchema(fields(), nil)
}

func fields() []arrow.Field {
	fs := make([]arrow.Field, NumCols)
	for i := range fs {
		fs[i] = arrow.Field{Name: ColName[i], Type: colType[i], Nullable: false}
	}
	return fs
}

// schemaWith returns the schema with the three metadata values.
func schemaWith(run, modules string) *arrow.Schema {
	md := arrow.NewMetadata(
		[]string{MetaVersion, MetaRun, MetaModules},
		[]string{Version, run, modules},
	)
	return arrow.NewSchema(fields(), &md)
}

// checkFields reports how s differs from the trace schema's columns, or
// nil if it does not.
func checkFields(s *arrow.Schema) error {
	fs := s.Fields()
	if len(fs) != NumCols {
		return fmt.Errorf("schema has %d columns, want %d (%v)", len(fs), NumCols, ColName)
	}
	for i, f := range fs {
		if f.Name != ColName[i] || !arrow.TypeEqual(f.Type, colType[i]) || f.Nullable {
			return fmt.Errorf("schema column %d is %s %s (nullable %v), want %s %s (non-nullable)",
				i, f.Name, f.Type, f.Nullable, ColName[i], colType[i])
		}
	}
	return nil
}

// Run describes the traced process. It is the JSON object in the
// MetaRun schema metadata value.
type Run struct {
	Binary      string `json:"binary"`               // path of the traced executable (the kernel's /proc/self/exe)
	BuildID     string `json:"build_id"`             // GNU build-id of the executable's original file, lower-case hex; "" if none
	Tool        string `json:"tool"`                 // what was traced: a Tool name ("branch", "call", "syscall", "block")
	Options     string `json:"options"`              // the rewriter's option string, e.g. "tool=branch every=0"
	PID         int64  `json:"pid"`                  // process id
	PPID        int64  `json:"ppid"`                 // parent's process id
	StartNS     int64  `json:"start_ns"`             // CLOCK_REALTIME at start, ns since the Unix epoch
	MonoStartNS uint64 `json:"mono_start_ns"`        // CLOCK_MONOTONIC at start, ns: subtract from the time column for time since start
	BudgetNS    uint64 `json:"budget_ns,omitempty"`  // instrumentation budget per period, ns; 0 = no budget (always on)
	PeriodNS    uint64 `json:"period_ns,omitempty"`  // budget period, ns; 0 = no budget
	Log         string `json:"log,omitempty"`        // redundancy log path, "" = none
	LogPolicy   string `json:"log_policy,omitempty"` // "exact", "hash", "bst" or "merger"; "" = no log
	QoS         string `json:"qos,omitempty"`        // QoS page path (STINT_QOS): a metric analyzer set the budget; "" = none
}

// Flag reports whether the rewriter's option string turns name on
// (holds the word "name=1", as in "tool=branch every=1").
func (r Run) Flag(name string) bool { return slices.Contains(strings.Fields(r.Options), name+"=1") }

// Module is one entry of the module table: one JSON line in the
// MetaModules schema metadata value. Module ids are the values of the
// src_module and dst_module columns.
type Module struct {
	ID        uint16 `json:"id"`        // index in the process's module table, never NoModule
	Path      string `json:"path"`      // file name as the loader mapped it
	BuildID   string `json:"build_id"`  // GNU build-id, lower-case hex; "" if none
	Base      uint64 `json:"base"`      // load base: run-time address minus link vaddr
	Size      uint64 `json:"size"`      // bytes from the lowest to the end of the highest PT_LOAD
	Rewritten bool   `json:"rewritten"` // true if the module was rewritten by stint (it has probes)
}

// encodeRun returns the MetaRun value for r: JSON padded with spaces to RunCap.
func encodeRun(r Run) (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	if len(b) > RunCap {
		return "", fmt.Errorf("run metadata is %d bytes, capacity is %d", len(b), RunCap)
	}
	return string(pad(b, RunCap)), nil
}

// encodeModules returns the MetaModules value: JSON lines padded with
// spaces to ModulesCap.
func encodeModules(ms []Module) (string, error) {
	var b []byte
	seen := map[uint16]bool{}
	for _, m := range ms {
		if m.ID == NoModule {
			return "", fmt.Errorf("module %q: id %#x is reserved for \"no module\"", m.Path, m.ID)
		}
		if seen[m.ID] {
			return "", fmt.Errorf("module %q: duplicate id %d", m.Path, m.ID)
		}
		seen[m.ID] = true
		j, err := json.Marshal(m)
		if err != nil {
			return "", err
		}
		b = append(append(b, j...), '\n')
	}
	if len(b) > ModulesCap {
		return "", fmt.Errorf("module table is %d bytes, capacity is %d", len(b), ModulesCap)
	}
	return string(pad(b, ModulesCap)), nil
}

func pad(b []byte, n int) []byte {
	return append(b, bytes.Repeat([]byte{' '}, n-len(b))...)
}

// decodeRun parses a MetaRun value. All spaces gives the zero Run.
func decodeRun(v string) (Run, error) {
	var r Run
	t := bytes.TrimRight([]byte(v), " ")
	if len(t) == 0 {
		return r, nil
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	if err := dec.Decode(&r); err != nil {
		return Run{}, fmt.Errorf("run metadata: %w", err)
	}
	if dec.More() {
		return Run{}, fmt.Errorf("run metadata: data after the JSON object")
	}
	return r, nil
}

// decodeModules parses a MetaModules value. Every line that ends in a
// newline must be a JSON module object; what follows the last newline is
// either padding (spaces) or a line that the runtime did not finish
// writing, and is ignored. It returns the byte position within v of a bad
// line together with the error.
func decodeModules(v string) ([]Module, int, error) {
	var ms []Module
	seen := map[uint16]bool{}
	pos := 0
	for {
		i := bytes.IndexByte([]byte(v[pos:]), '\n')
		if i < 0 {
			return ms, 0, nil
		}
		line := bytes.TrimSpace([]byte(v[pos : pos+i]))
		if len(line) > 0 {
			var m Module
			if err := json.Unmarshal(line, &m); err != nil {
				return nil, pos, fmt.Errorf("module table line %d: %w", len(ms)+1, err)
			}
			if m.ID == NoModule {
				return nil, pos, fmt.Errorf("module table line %d: id %#x is reserved for \"no module\"", len(ms)+1, m.ID)
			}
			if seen[m.ID] {
				return nil, pos, fmt.Errorf("module table line %d: duplicate module id %d", len(ms)+1, m.ID)
			}
			seen[m.ID] = true
			ms = append(ms, m)
		}
		pos += i + 1
	}
}
