package rewrite

import (
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/testvec"
)

// TestParseSampleVectors checks ParseSample against the vectors the
// runtime's sample_parse is checked against too.
func TestParseSampleVectors(t *testing.T) {
	for _, v := range testvec.Samples(t) {
		s, err := ParseSample(v.Input)
		switch {
		case v.Err && err == nil:
			t.Errorf("line %d: %q parsed as %+v, want an error", v.Line, v.Input, s)
		case !v.Err && err != nil:
			t.Errorf("line %d: %q: %v", v.Line, v.Input, err)
		case !v.Err && (s.Method != v.Method || s.Param != v.Param):
			t.Errorf("line %d: %q parsed as %+v, want method %d param %d", v.Line, v.Input, s, v.Method, v.Param)
		case v.Err && !strings.Contains(err.Error(), "want all, rate:P%"):
			t.Errorf("line %d: %q: the message %q does not teach the grammar", v.Line, v.Input, err)
		}
	}
}

// TestSampleOptions: sampling combinations that make no sense are
// refused with a message that says why; good ones reach the module's
// option string.
func TestSampleOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
		wantOpt string
	}{
		{"reservoir", Options{Tool: ToolCall, Sample: "reservoir:20%"}, "", "sample=reservoir:20%"},
		{"per site", Options{Tool: ToolCall, Sample: "reservoir:20%", SamplePer: "site", Interval: "250ms"}, "", "sample=reservoir:20% sample_per=site interval=250ms"},
		{"all", Options{Tool: ToolSyscall, Sample: "all"}, "", "tool=syscall"},
		{"with budget", Options{Tool: ToolBranch, Sample: "rate:10%", Budget: "10%"}, "", "budget=10% period=100ms sample=rate:10%"},
		{"bad method", Options{Tool: ToolCall, Sample: "often"}, "unknown method", ""},
		{"block", Options{Tool: ToolBlock, Sample: "every:10"}, "block coverage is not sampled", ""},
		{"log", Options{Tool: ToolCall, Sample: "rate:20%", Log: "l"}, "redundancy log", ""},
		{"context", Options{Tool: ToolCall, Context: true, Sample: "rate:20%"}, "--context", ""},
		{"per without reservoir", Options{Sample: "rate:20%", SamplePer: "site"}, "needs a reservoir", ""},
		{"bad per", Options{Sample: "reservoir:20%", SamplePer: "thread"}, "want function or site", ""},
		{"per alone", Options{SamplePer: "site"}, "need --sample", ""},
		{"interval alone", Options{Interval: "1s"}, "need --sample", ""},
		{"short interval", Options{Sample: "every:3", Interval: "100us"}, "1ms at least", ""},
		{"bad interval", Options{Sample: "every:3", Interval: "soon"}, "--interval", ""},
	}
	for _, tt := range tests {
		err := tt.opts.check()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: have error %v, want one containing %q", tt.name, err, tt.wantErr)
		case tt.wantErr == "" && !strings.Contains(tt.opts.optionString(), tt.wantOpt):
			t.Errorf("%s: option string %q, want it to contain %q", tt.name, tt.opts.optionString(), tt.wantOpt)
		}
	}
}
