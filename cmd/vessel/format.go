package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// Output formats of list and info commands.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
	formatCSV   = "csv"
)

func addFormatFlag(cmd *cobra.Command, format *string) {
	cmd.Flags().StringVarP(format, "format", "f", formatTable, "output format: table, json, yaml or csv")
}

// printTable writes rows as a table or CSV, or raw as JSON or YAML.
func printTable(w io.Writer, format string, headers []string, rows [][]any, raw any) error {
	switch format {
	case formatJSON, formatYAML:
		return printRaw(w, format, raw)
	case formatTable, formatCSV:
	default:
		return fmt.Errorf("unknown format %q (want table, json, yaml or csv)", format)
	}
	t := table.NewWriter()
	t.SetOutputMirror(w)
	hdr := make(table.Row, len(headers))
	for i, h := range headers {
		hdr[i] = h
	}
	t.AppendHeader(hdr)
	for _, r := range rows {
		t.AppendRow(table.Row(r))
	}
	if format == formatCSV {
		t.RenderCSV()
		return nil
	}
	t.SetStyle(table.StyleLight)
	t.Render()
	return nil
}

// printRaw writes v as JSON or YAML (through JSON, so field names match the
// API's).
func printRaw(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == formatJSON {
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	defer enc.Close()
	return enc.Encode(generic)
}

// printKV writes key/value pairs as a two-column table (or raw as
// JSON/YAML/CSV).
func printKV(w io.Writer, format string, pairs [][2]string, raw any) error {
	if format == formatTable {
		width := 0
		for _, p := range pairs {
			width = max(width, len(p[0]))
		}
		for _, p := range pairs {
			fmt.Fprintf(w, "%-*s  %s\n", width+1, p[0]+":", p[1])
		}
		return nil
	}
	rows := make([][]any, len(pairs))
	for i, p := range pairs {
		rows[i] = []any{p[0], p[1]}
	}
	return printTable(w, format, []string{"KEY", "VALUE"}, rows, raw)
}

// humanBytes formats a byte count with binary units.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
