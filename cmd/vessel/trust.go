package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/vesselhost/vessel/internal/api"
)

func newTrustCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "trust", Short: "Manage which clients and peer hosts a host trusts"}
	var peer bool
	var ttl time.Duration
	add := &cobra.Command{
		Use:   "add NAME [REMOTE:]",
		Short: "Issue a one-time token that lets a client (or, with --peer, a host) in",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connectRemote(secondArg(args))
			if err != nil {
				return err
			}
			kind := api.TrustKindClient
			if peer {
				kind = api.TrustKindPeer
			}
			tok, err := c.IssueToken(cmd.Context(), api.TokenPost{Name: args[0], Kind: kind, TTLSeconds: int(ttl.Seconds())})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok.Token)
			return nil
		},
	}
	add.Flags().BoolVar(&peer, "peer", false, "the token is for another vessel host (migration peer)")
	add.Flags().DurationVar(&ttl, "ttl", 0, "token lifetime (default 24h)")

	var certName string
	var certPeer bool
	addCert := &cobra.Command{
		Use:   "add-cert CERT.pem [REMOTE:]",
		Short: "Trust a certificate file (a client's client.crt, or a host's server.crt with --peer)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connectRemote(secondArg(args))
			if err != nil {
				return err
			}
			pem, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			kind := api.TrustKindClient
			if certPeer {
				kind = api.TrustKindPeer
			}
			return c.TrustCertificate(cmd.Context(), api.CertificatePost{Certificate: string(pem), Name: certName, Kind: kind})
		},
	}
	addCert.Flags().StringVar(&certName, "name", "", "name to trust it as")
	addCert.Flags().BoolVar(&certPeer, "peer", false, "the certificate is another vessel host's")
	_ = addCert.MarkFlagRequired("name")

	var format string
	list := &cobra.Command{
		Use:   "list [REMOTE:]",
		Short: "List trusted certificates",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connectRemote(firstArg(args))
			if err != nil {
				return err
			}
			certs, err := c.Certificates(cmd.Context())
			if err != nil {
				return err
			}
			rows := make([][]any, 0, len(certs))
			for _, ce := range certs {
				rows = append(rows, []any{ce.Name, ce.Kind, shortFP(ce.Fingerprint), ce.Added.Local().Format(time.DateTime)})
			}
			return printTable(cmd.OutOrStdout(), format, []string{"NAME", "KIND", "FINGERPRINT", "ADDED"}, rows, certs)
		},
	}
	addFormatFlag(list, &format)
	remove := &cobra.Command{
		Use:   "remove NAME|FINGERPRINT [REMOTE:]",
		Short: "Stop trusting a certificate",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connectRemote(secondArg(args))
			if err != nil {
				return err
			}
			return c.RemoveCertificate(cmd.Context(), args[0])
		},
	}
	cmd.AddCommand(add, addCert, list, remove)
	return cmd
}

func newPeerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "peer", Short: "Manage the hosts a host can migrate containers to"}
	var address string
	add := &cobra.Command{
		Use:   "add [REMOTE:]PEER TOKEN",
		Short: "Make REMOTE join PEER as a trusted peer (TOKEN from 'vessel trust add NAME --peer' on PEER)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			p, err := c.AddPeer(cmd.Context(), api.PeerPost{Name: r.name, Token: args[1], Address: address})
			if err != nil {
				return err
			}
			if !g.quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "%s now trusts this host as a peer; %s pins it at %v\n", p.Name, r.remoteOrLocal(), p.Addresses)
			}
			return nil
		},
	}
	add.Flags().StringVar(&address, "address", "", "peer address (host:port) instead of the token's")
	var format string
	list := &cobra.Command{
		Use:   "list [REMOTE:]",
		Short: "List peer hosts",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connectRemote(firstArg(args))
			if err != nil {
				return err
			}
			peers, err := c.Peers(cmd.Context())
			if err != nil {
				return err
			}
			rows := make([][]any, 0, len(peers))
			for _, p := range peers {
				rows = append(rows, []any{p.Name, fmt.Sprint(p.Addresses), shortFP(p.Fingerprint)})
			}
			return printTable(cmd.OutOrStdout(), format, []string{"NAME", "ADDRESSES", "FINGERPRINT"}, rows, peers)
		},
	}
	addFormatFlag(list, &format)
	remove := &cobra.Command{
		Use:   "remove [REMOTE:]PEER",
		Short: "Forget a peer host",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := connect(args[0])
			if err != nil {
				return err
			}
			return c.RemovePeer(cmd.Context(), r.name)
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

func secondArg(args []string) string {
	if len(args) > 1 {
		return args[1]
	}
	return ""
}
