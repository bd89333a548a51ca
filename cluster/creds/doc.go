// Package creds reads credentials from the files latch's flags name: a server's secret files
// of the three principals and its TLS files for the client port, the peer port and --http
// (LoadSecrets, LoadTLS), and the files the CLI's client and admin verbs prove themselves
// and verify servers with (ReadSecrets, LoadCA, LoadKeyPair).
//
// Three principals, three credentials (docs/SECURITY.md):
//
//	clients   --secret-file        the client port, nothing else
//	peers     --peer-secret-file   the peer port (and a node's own join over --http);
//	          and/or mutual TLS    certificates of --tls-ca
//	operator  --admin-secret-file  every admin call over --http;
//	          and/or certificates of --admin-tls-ca, over --http-tls
//
// Every secret file and key file is read by ReadKeyFile (wire.ReadKeyFile), which refuses
// one that its group or others may write, and warns once about one that others may read.
//
// What it must never do: parse flags (cmd/latch passes the file names), or decide who is
// admitted (cluster/server, cluster/peer and cluster/admin check the credentials read
// here). Its errors name the CLI flags a user sets, since that is where they surface.
package creds
