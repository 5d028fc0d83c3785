package main

import (
	"sort"

	"github.com/stint-project/stint/analysis/cov"
)

// sortFuncs orders functions least covered first, then by most events
// missed, then by name.
func sortFuncs(fs []cov.FuncCov) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Coverage != b.Coverage {
			return a.Coverage < b.Coverage
		}
		if a.Full-a.Covered != b.Full-b.Covered {
			return a.Full-a.Covered > b.Full-b.Covered
		}
		return a.Module+a.Function < b.Module+b.Function
	})
}
