package shim

import (
	"encoding/json"
	"os"
	"strings"
)

// RuncLogErrors returns the error messages of a runc JSON log (runc --log F
// --log-format json), one per line, or "" if there are none. runc writes
// its errors there as well as on stderr; the log keeps them apart from the
// container's own output, which shares runc's stderr.
func RuncLogErrors(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var msgs []string
	dec := json.NewDecoder(f)
	for {
		var entry struct{ Level, Msg string }
		if dec.Decode(&entry) != nil {
			break
		}
		if entry.Level == "error" || entry.Level == "fatal" {
			msgs = append(msgs, entry.Msg)
		}
	}
	return strings.Join(msgs, "\n")
}
