package daemon

import (
	"sort"
	"strings"
)

// configKeys validates instance configuration keys: each known key maps to
// a checker of its value. Keys under "user." are free-form notes.
var configKeys = map[string]func(string) error{}

// validateConfig checks every key and value; nothing is applied when one is
// wrong.
func validateConfig(cfg map[string]string) error {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, "user.") && len(k) > len("user.") {
			continue
		}
		check, ok := configKeys[k]
		if !ok {
			return errorf(ErrInvalid, "unknown configuration key %q", k)
		}
		if err := check(cfg[k]); err != nil {
			return errorf(ErrInvalid, "%s=%q: %v", k, cfg[k], err)
		}
	}
	return nil
}
