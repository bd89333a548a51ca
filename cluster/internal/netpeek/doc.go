// Package netpeek tells whether bytes from the other side already wait in a connection's
// socket buffer, without reading them or blocking. The client port and the peer port use it
// to tell a connection that has spoken from a silent one when they must make room for a
// newcomer: on one host every connection comes from the same address, so only this tells a
// member or a client that answered at once from a flood of silent sockets. It is internal to
// the packages under cluster/.
package netpeek
