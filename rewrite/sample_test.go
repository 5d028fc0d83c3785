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
