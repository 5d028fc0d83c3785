package cli

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Version is the line `NAME --version` prints: the command, stint's module
// version ("devel" when built from a checkout), the VCS revision and
// whether the tree had changes (when go build recorded them), and the Go
// toolchain.
func Version(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (stint) version unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (stint) %s", name, v)
	if rev != "" {
		fmt.Fprintf(&b, ", revision %.12s%s", rev, modified)
	}
	fmt.Fprintf(&b, ", %s", bi.GoVersion)
	return b.String()
}

// wantsVersion reports whether the arguments ask for the version: a
// --version before any "--", wherever it is (GNU style, and a subcommand
// command answers it too: `trace --version`, `trace cat --version`).
func wantsVersion(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--version" {
			return true
		}
	}
	return false
}

// printVersion writes Version(name) and a newline to w.
func printVersion(w io.Writer, name string) {
	fmt.Fprintln(w, Version(name))
}
