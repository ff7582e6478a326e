package daemon

import (
	"regexp"
)

// nameRE is a DNS label that starts with a letter: the container's name is
// also its hostname.
var nameRE = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateName checks an instance (or snapshot) name: 1-63 characters,
// lowercase letters, digits and dashes, starting with a letter and not
// ending with a dash.
func ValidateName(kind, name string) error {
	if !nameRE.MatchString(name) {
		return errorf(ErrInvalid, "%s name %q: use 1-63 lowercase letters, digits and dashes, starting with a letter and not ending with a dash", kind, name)
	}
	return nil
}
