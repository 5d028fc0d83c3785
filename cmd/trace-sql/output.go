//go:build cgo

package main

import (
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// writers print a query's rows: as an aligned table, CSV with a header,
// or one JSON object a line.
var writers = map[string]func(io.Writer, *sql.Rows) error{
	"table": writeTable,
	"csv":   writeCSV,
	"json":  writeJSON,
}

// scan reads every row as strings (cell) and values (JSON), calling f.
func scan(rows *sql.Rows, f func(cols []string, vals []any) error) error {
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		if err := f(cols, vals); err != nil {
			return err
		}
	}
	return rows.Err()
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return string(x)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

func writeTable(w io.Writer, rows *sql.Rows) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	header := false
	n := 0
	err := scan(rows, func(cols []string, vals []any) error {
		if !header {
			fmt.Fprintln(tw, strings.Join(cols, "\t"))
			header = true
		}
		s := make([]string, len(vals))
		for i, v := range vals {
			s[i] = cell(v)
		}
		n++
		_, err := fmt.Fprintln(tw, strings.Join(s, "\t"))
		return err
	})
	if err != nil {
		return err
	}
	if !header {
		cols, _ := rows.Columns()
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "(%d row%s)\n", n, map[bool]string{true: "", false: "s"}[n == 1])
	return err
}

func writeCSV(w io.Writer, rows *sql.Rows) error {
	cw := csv.NewWriter(w)
	header := false
	err := scan(rows, func(cols []string, vals []any) error {
		if !header {
			cw.Write(cols)
			header = true
		}
		s := make([]string, len(vals))
		for i, v := range vals {
			s[i] = cell(v)
		}
		return cw.Write(s)
	})
	if err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

func writeJSON(w io.Writer, rows *sql.Rows) error {
	enc := json.NewEncoder(w)
	return scan(rows, func(cols []string, vals []any) error {
		m := make(map[string]any, len(cols))
		for i, c := range cols {
			if b, ok := vals[i].([]byte); ok {
				m[c] = string(b)
			} else {
				m[c] = vals[i]
			}
		}
		return enc.Encode(m)
	})
}
