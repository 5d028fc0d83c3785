//go:build !cgo

package main

import (
	"context"
	"errors"
	"io"
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("built without cgo: DuckDB needs it; rebuild with CGO_ENABLED=1 and a C compiler")
}
