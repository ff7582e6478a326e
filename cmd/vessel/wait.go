package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/term"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/client"
)

// wait follows an operation to its end, showing its progress on a terminal
// (one self-overwriting line on stderr) unless quiet.
func wait(ctx context.Context, g *globals, op *client.Operation, err error) error {
	if err != nil {
		return err
	}
	if g.quiet || !term.IsTerminal(int(os.Stderr.Fd())) {
		return op.Wait(ctx, nil)
	}
	last := ""
	err = op.Wait(ctx, func(o api.Operation) {
		line := progressLine(o)
		if line != last && line != "" {
			fmt.Fprintf(os.Stderr, "\r\033[K%s", line)
			last = line
		}
	})
	if last != "" {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	return err
}

// progressLine renders an operation's progress metadata in one line.
func progressLine(o api.Operation) string {
	if len(o.Metadata) == 0 {
		return o.Description + "..."
	}
	keys := make([]string, 0, len(o.Metadata))
	for k := range o.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := o.Metadata[k]
		switch v.(type) {
		case map[string]any, []any:
			continue // results (e.g. a timing report), not progress
		}
		switch k {
		case api.MetaBytes: // sizes a person reads
			v = humanBytes(uint64(number(v)))
		case api.MetaRate:
			k, v = "rate", humanRate(v)
		}
		parts = append(parts, fmt.Sprintf("%s: %v", k, v))
	}
	return o.Description + " (" + strings.Join(parts, ", ") + ")"
}
