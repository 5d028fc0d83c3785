package rewrite

import (
	"strings"
	"testing"
	"time"

	"github.com/stint-project/stint/internal/testvec"
)

// TestOptionsCheck: option combinations that cannot work are refused
// with a message that says why; good ones pass and land in the module's
// option string.
func TestOptionsCheck(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string // "" = valid
		wantOpt string // substring of the option string when valid
	}{
		{"plain", Options{}, "", "tool=branch every=0"},
		{"budget", Options{Budget: "10%", Period: "1s"}, "", "budget=10% period=1s"},
		{"period alone", Options{Period: "1s"}, "a period needs a budget", ""},
		{"window", Options{Budget: "10%", Window: "25%"}, "", "budget=10% period=100ms window=25%"},
		{"window none", Options{Budget: "5ms", Window: "none"}, "", "window=none"},
		{"window alone", Options{Window: "5ms"}, "a window needs a budget", ""},
		{"bad window", Options{Budget: "10%", Window: "wide"}, "window", ""},
		{"bad budget", Options{Budget: "ten"}, "budget", ""},
		{"policy alone", Options{LogPolicy: "hash"}, "a log policy needs a log", ""},
		{"bad policy", Options{Log: "l", LogPolicy: "tree"}, "want one of", ""},
		{"log and every", Options{Log: "l", Every: true}, "every-occurrence", ""},
		{"context", Options{Tool: ToolCall, Context: true, Budget: "5%"}, "", "tool=call every=0 context=1 budget=5%"},
		{"context needs call", Options{Context: true}, "needs --tool call", ""},
		{"edges all", Options{Edges: EdgesAll}, "", "tool=branch"},
		{"edges covered", Options{Edges: EdgesCovered}, "", "tool=branch"},
		{"edges auto", Options{Edges: EdgesAuto}, "", "tool=branch"},
		{"bad edges", Options{Edges: "some"}, "bad edge mode", ""},
		{"context and log", Options{Tool: ToolCall, Context: true, Log: "l"}, "cannot be combined with a redundancy log", ""},
		// block counts (rewrite --counts)
		{"counts", Options{Tool: ToolBlock, Counts: true}, "", "tool=block every=0 counts=1"},
		{"counts period", Options{Tool: ToolBlock, Counts: true, Period: "250ms"}, "", "counts=1 period=250ms"},
		{"counts bad period", Options{Tool: ToolBlock, Counts: true, Period: "soon"}, "period", ""},
		{"counts need block", Options{Tool: ToolBranch, Counts: true}, "needs --tool block", ""},
		{"counts every", Options{Tool: ToolBlock, Counts: true, Every: true}, "--every", ""},
		{"counts budget", Options{Tool: ToolBlock, Counts: true, Budget: "10%"}, "budget", ""},
		{"counts log", Options{Tool: ToolBlock, Counts: true, Log: "l"}, "redundancy log", ""},
		{"atomic alone", Options{Tool: ToolBlock, CountsAtomic: true}, "needs --counts", ""},
		// sampling (rewrite --sample): what makes no sense is refused
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

// TestGrammarVectors checks ParseDuration and ParseBudget against the
// vectors the runtime's parser is checked against too.
func TestGrammarVectors(t *testing.T) {
	for _, v := range testvec.Durations(t) {
		var d time.Duration
		var err error
		if v.Budget {
			d, _, err = ParseBudget(v.Input, time.Duration(v.Period))
		} else {
			d, err = ParseDuration(v.Input)
		}
		switch {
		case v.Err && err == nil:
			t.Errorf("line %d: %q: %d, want an error", v.Line, v.Input, d)
		case !v.Err && (err != nil || int64(d) != v.Want):
			t.Errorf("line %d: %q: %d, %v; want %d", v.Line, v.Input, d, err, v.Want)
		}
	}
}
