package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/vesselhost/vessel/internal/client"
)

// remoteConfig is the CLI's list of hosts (~/.config/vessel/config.yml, or
// $VESSEL_CONFIG). The "local" remote is always present: the local
// daemon's unix socket ($VESSEL_SOCKET overrides its path).
type remoteConfig struct {
	DefaultRemote string            `yaml:"default-remote"`
	Remotes       map[string]remote `yaml:"remotes"`
}

type remote struct {
	// Addr is "unix:///path/to/socket" (HTTPS remotes arrive with live
	// migration).
	Addr string `yaml:"addr"`
}

const localRemote = "local"

func configPath() string {
	if p := os.Getenv("VESSEL_CONFIG"); p != "" {
		return p
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = "/root/.config"
	}
	return filepath.Join(dir, "vessel", "config.yml")
}

func localSocket() string {
	if s := os.Getenv("VESSEL_SOCKET"); s != "" {
		return s
	}
	return "/var/lib/vessel/unix.socket"
}

func loadRemotes() (*remoteConfig, error) {
	cfg := &remoteConfig{Remotes: map[string]remote{}}
	b, err := os.ReadFile(configPath())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err == nil {
		if err := yaml.Unmarshal(b, cfg); err != nil {
			return nil, fmt.Errorf("read %s: %w", configPath(), err)
		}
	}
	if cfg.Remotes == nil {
		cfg.Remotes = map[string]remote{}
	}
	cfg.Remotes[localRemote] = remote{Addr: "unix://" + localSocket()}
	if cfg.DefaultRemote == "" {
		cfg.DefaultRemote = localRemote
	}
	return cfg, nil
}

// ref is a parsed [REMOTE:]NAME.
type ref struct {
	remote string
	name   string
}

func (r ref) String() string {
	if r.remote == localRemote || r.remote == "" {
		return r.name
	}
	return r.remote + ":" + r.name
}

// parseRef splits [REMOTE:]NAME; an unknown remote is an error.
func (c *remoteConfig) parseRef(s string) (ref, error) {
	if i := strings.Index(s, ":"); i >= 0 {
		r := ref{remote: s[:i], name: s[i+1:]}
		if _, ok := c.Remotes[r.remote]; !ok {
			return ref{}, fmt.Errorf("unknown remote %q (see 'vessel remote list')", r.remote)
		}
		return r, nil
	}
	return ref{remote: c.DefaultRemote, name: s}, nil
}

// client connects to a remote.
func (c *remoteConfig) client(name string) (*client.Client, error) {
	r, ok := c.Remotes[name]
	if !ok {
		return nil, fmt.Errorf("unknown remote %q", name)
	}
	if sock, ok := strings.CutPrefix(r.Addr, "unix://"); ok {
		return client.NewUnix(sock), nil
	}
	return nil, fmt.Errorf("remote %q: unsupported address %q", name, r.Addr)
}

// connect parses a [REMOTE:]NAME argument and returns its client.
func connect(arg string) (*client.Client, ref, error) {
	cfg, err := loadRemotes()
	if err != nil {
		return nil, ref{}, err
	}
	r, err := cfg.parseRef(arg)
	if err != nil {
		return nil, ref{}, err
	}
	c, err := cfg.client(r.remote)
	return c, r, err
}

// connectRemote returns the client of a bare REMOTE (or REMOTE:) argument,
// or of the default remote for "".
func connectRemote(arg string) (*client.Client, error) {
	cfg, err := loadRemotes()
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(arg, ":")
	if name == "" {
		name = cfg.DefaultRemote
	}
	return cfg.client(name)
}

func newRemoteCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "remote", Short: "List the hosts this client knows"}
	var format string
	list := &cobra.Command{
		Use:   "list",
		Short: "List remotes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadRemotes()
			if err != nil {
				return err
			}
			names := make([]string, 0, len(cfg.Remotes))
			for n := range cfg.Remotes {
				names = append(names, n)
			}
			sort.Strings(names)
			rows := make([][]any, 0, len(names))
			for _, n := range names {
				def := ""
				if n == cfg.DefaultRemote {
					def = "yes"
				}
				rows = append(rows, []any{n, cfg.Remotes[n].Addr, def})
			}
			return printTable(cmd.OutOrStdout(), format, []string{"NAME", "ADDRESS", "DEFAULT"}, rows, cfg.Remotes)
		},
	}
	addFormatFlag(list, &format)
	cmd.AddCommand(list)
	return cmd
}
