package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/vesselhost/vessel/internal/api"
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
	// Addr is "unix:///path/to/socket" or "https://host:port".
	Addr string `yaml:"addr"`
	// Fingerprint pins an HTTPS remote's certificate.
	Fingerprint string `yaml:"fingerprint,omitempty"`
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

func (r ref) remoteOrLocal() string {
	if r.remote == "" {
		return localRemote
	}
	return r.remote
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
	if addr, ok := strings.CutPrefix(r.Addr, "https://"); ok {
		id, err := clientIdentity()
		if err != nil {
			return nil, err
		}
		return client.NewHTTPS(addr, r.Fingerprint, id), nil
	}
	return nil, fmt.Errorf("remote %q: unsupported address %q", name, r.Addr)
}

// save writes the remotes (without the implicit local one).
func (c *remoteConfig) save() error {
	out := remoteConfig{DefaultRemote: c.DefaultRemote, Remotes: map[string]remote{}}
	for n, r := range c.Remotes {
		if n != localRemote {
			out.Remotes[n] = r
		}
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(configPath()), 0o700); err != nil {
		return err
	}
	return os.WriteFile(configPath(), b, 0o600)
}

// clientIdentity is this user's client certificate, created on first use
// next to the configuration file.
func clientIdentity() (tls.Certificate, error) {
	return client.LoadIdentity(filepath.Dir(configPath()))
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

// getInstance fetches the container a [REMOTE:]NAME argument names.
func getInstance(ctx context.Context, arg string) (api.Instance, error) {
	c, r, err := connect(arg)
	if err != nil {
		return api.Instance{}, err
	}
	return c.Instance(ctx, r.name)
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
	cmd.AddCommand(list, newRemoteAddCmd(), newRemoteRemoveCmd())
	return cmd
}

func newRemoteAddCmd() *cobra.Command {
	var token, fingerprint string
	cmd := &cobra.Command{
		Use:   "add NAME [ADDRESS] (--token TOKEN | --fingerprint SHA256)",
		Short: "Add a remote host, trusted with a one-time token or a certificate fingerprint",
		Long: `Add a remote host. With --token (from 'vessel trust add NAME' on that host)
this client's certificate becomes trusted there and the host's certificate is
pinned; ADDRESS defaults to the token's. With --fingerprint the host's
certificate is pinned and the host must already trust this client's
certificate (see 'vessel trust add-cert' there).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadRemotes()
			if err != nil {
				return err
			}
			name := args[0]
			if _, exists := cfg.Remotes[name]; exists {
				return fmt.Errorf("remote %q already exists", name)
			}
			if strings.ContainsAny(name, ":/ ") || name == "" {
				return fmt.Errorf("bad remote name %q", name)
			}
			addr := ""
			if len(args) == 2 {
				addr = strings.TrimPrefix(args[1], "https://")
			}
			id, err := clientIdentity()
			if err != nil {
				return err
			}
			switch {
			case token != "":
				tok, err := client.DecodeToken(token)
				if err != nil {
					return err
				}
				if addr == "" && len(tok.Addresses) > 0 {
					addr = tok.Addresses[0]
				}
				fingerprint = tok.Fingerprint
				if err := client.NewHTTPS(addr, fingerprint, id).Join(cmd.Context(), tok.Secret); err != nil {
					return fmt.Errorf("join %s: %w", addr, err)
				}
			case fingerprint != "":
				if addr == "" {
					return fmt.Errorf("an ADDRESS is needed with --fingerprint")
				}
			default:
				return fmt.Errorf("give --token or --fingerprint")
			}
			srv, err := client.NewHTTPS(addr, fingerprint, id).Server(cmd.Context())
			if err != nil {
				return err
			}
			cfg.Remotes[name] = remote{Addr: "https://" + addr, Fingerprint: fingerprint}
			if err := cfg.save(); err != nil {
				return err
			}
			if srv.Auth == api.AuthUntrusted {
				fmt.Fprintf(cmd.ErrOrStderr(), "Added %s, but it does not trust this client yet; on that host run:\n  vessel trust add-cert CERT --name NAME\nwith this client's certificate %s\n",
					name, filepath.Join(filepath.Dir(configPath()), client.IdentityCertFile))
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Added remote %s (%s)\n", name, addr)
			return nil
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "one-time token from 'vessel trust add' on the remote")
	cmd.Flags().StringVar(&fingerprint, "fingerprint", "", "SHA-256 fingerprint of the remote's certificate")
	return cmd
}

func newRemoteRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Forget a remote",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadRemotes()
			if err != nil {
				return err
			}
			if args[0] == localRemote {
				return fmt.Errorf("the local remote cannot be removed")
			}
			if _, ok := cfg.Remotes[args[0]]; !ok {
				return fmt.Errorf("unknown remote %q", args[0])
			}
			delete(cfg.Remotes, args[0])
			return cfg.save()
		},
	}
}
