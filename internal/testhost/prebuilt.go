package testhost

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// PrebuiltEnv names a directory of binaries built beforehand: vessel's
// commands, the test workloads (memhog, beat, ...) and test helpers. Where
// it is set the tests take their binaries from it instead of running go
// build or gcc, which a host without a toolchain (a guest of the host image,
// make test-v2) lacks.
const PrebuiltEnv = "VESSEL_TEST_BIN"

// Prebuilt returns the prebuilt binary name from PrebuiltEnv's directory,
// if that is set; ok is false when it is not. A set directory without the
// binary is an error: the build step forgot it.
func Prebuilt(name string) (path string, ok bool, err error) {
	dir := os.Getenv(PrebuiltEnv)
	if dir == "" {
		return "", false, nil
	}
	path = filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", true, fmt.Errorf("%s=%s: %w", PrebuiltEnv, dir, err)
	}
	return path, true, nil
}

// copyPrebuilt copies the prebuilt binary name to dst, if PrebuiltEnv is
// set.
func copyPrebuilt(name, dst string) (bool, error) {
	src, ok, err := Prebuilt(name)
	if !ok || err != nil {
		return ok, err
	}
	return true, copyExecutable(src, dst)
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
