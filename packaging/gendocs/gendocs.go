// Package gendocs writes a cobra command tree's man pages and bash
// completion, for the .deb (`make deb`). It is called from the command
// packages' TestDocs (a command's tree is only reachable from its own main
// package), which writes into the directory given with -docs.
package gendocs

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Source is the man pages' source field (their footer's left corner).
const Source = "vessel"

// Write writes root's man pages (section 1, one per command, gzipped as
// Debian ships them) to dir/man/man1 and its bash completion to
// dir/bash-completion/NAME, and returns the files written, relative to dir.
func Write(root *cobra.Command, dir string) ([]string, error) {
	man := filepath.Join(dir, "man", "man1")
	comp := filepath.Join(dir, "bash-completion")
	for _, d := range []string{man, comp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	var files []string
	// Man pages are written one by one, not with doc.GenManTree, to gzip
	// them; the tree's walk is the same.
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
				continue
			}
			if err := walk(sub); err != nil {
				return err
			}
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1.gz"
		if err := writeMan(c, filepath.Join(man, name)); err != nil {
			return err
		}
		files = append(files, filepath.Join("man", "man1", name))
		return nil
	}
	root.DisableAutoGenTag = true // no build date in the pages: reproducible
	if err := walk(root); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := root.GenBashCompletionV2(&b, true); err != nil {
		return nil, fmt.Errorf("bash completion of %s: %w", root.Name(), err)
	}
	if err := os.WriteFile(filepath.Join(comp, root.Name()), b.Bytes(), 0o644); err != nil {
		return nil, err
	}
	files = append(files, filepath.Join("bash-completion", root.Name()))
	return files, nil
}

// writeMan writes c's man page to path, gzipped with no name or time in
// the gzip header (the same bytes from the same source).
func writeMan(c *cobra.Command, path string) error {
	var page bytes.Buffer
	// The title is the command's path (VESSEL-LAUNCH); the date is
	// SOURCE_DATE_EPOCH's when set (make deb sets the commit's).
	hdr := &doc.GenManHeader{Section: "1", Source: Source, Manual: "vessel manual"}
	if err := doc.GenMan(c, hdr, &page); err != nil {
		return fmt.Errorf("man page of %s: %w", c.CommandPath(), err)
	}
	var gz bytes.Buffer
	w, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := w.Write(page.Bytes()); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, gz.Bytes(), 0o644)
}
