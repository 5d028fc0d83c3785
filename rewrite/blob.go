package rewrite

import "github.com/stint-project/stint/runtime"

// defaultBlob returns the runtime blob used when Options.Blob is nil.
func defaultBlob() ([]byte, error) { return runtime.Blob(), nil }
