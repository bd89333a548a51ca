// Package clustertest holds helpers for the tests of the cluster packages and their users.
// It is imported only by _test.go files.
package clustertest
