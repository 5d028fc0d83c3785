// Package depcheck enforces the direction of dependencies between stint's
// packages: cmd → analysis → formats and cmd → rewrite → runtime. formats
// knows nothing about ELF or the rewriter; runtime knows nothing above it.
// Inside rewrite the stages depend one way too: elfin (the input) ←
// facts ← policy (what to patch), and tramp (trampolines) and elfout (the
// output) know no policy; place knows nothing of ELF.
package depcheck

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/stint-project/stint/"

// forbidden maps a package prefix to project packages it must not import.
var forbidden = map[string][]string{
	"formats":  {"rewrite", "runtime", "analysis", "cmd", "debug/elf"},
	"runtime":  {"rewrite", "formats", "analysis", "cmd"},
	"rewrite":  {"analysis", "cmd"},
	"analysis": {"rewrite", "cmd"},

	"rewrite/elfin":    {"rewrite/facts", "rewrite/policy", "rewrite/place", "rewrite/tramp", "rewrite/elfout", "runtime"},
	"rewrite/place":    {"rewrite/elfin", "rewrite/facts", "rewrite/policy", "rewrite/tramp", "rewrite/elfout", "runtime", "debug/elf"},
	"rewrite/facts":    {"rewrite/policy", "rewrite/tramp", "rewrite/elfout", "runtime"},
	"rewrite/policy":   {"rewrite/tramp", "rewrite/elfout"},
	"rewrite/tramp":    {"rewrite/policy", "rewrite/elfout"},
	"rewrite/elfout":   {"rewrite/policy", "rewrite/tramp"},
	"internal/ehframe": {"rewrite", "analysis", "formats", "runtime", "cmd"},
}

func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-json", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		rel := strings.TrimPrefix(p.ImportPath, mod)
		for prefix, bad := range forbidden {
			if rel != prefix && !strings.HasPrefix(rel, prefix+"/") {
				continue
			}
			for _, imp := range p.Imports {
				for _, b := range bad {
					target := mod + b
					if b == "debug/elf" {
						target = b
					}
					if imp == target || strings.HasPrefix(imp, target+"/") {
						t.Errorf("%s imports %s: %s must not depend on %s", p.ImportPath, imp, prefix, b)
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("go list returned no packages")
	}
}
