package daemon

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	good := []string{"a", "web1", "my-box", "a" + strings.Repeat("b", 62)}
	bad := []string{"", "1abc", "-a", "a-", "Web", "a_b", "a.b", "a/b", "..", "a b", "a" + strings.Repeat("b", 63)}
	for _, n := range good {
		if err := ValidateName("instance", n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidateName("instance", n); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalid", n, err)
		}
	}
}
