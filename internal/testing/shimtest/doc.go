// Package shimtest holds the Go client shim's tests that need the daemon's
// side (its publisher, detector, test servers and clusters): the shim is a
// module of its own (client/go.mod) that must not depend on the daemon, so
// these tests live in the daemon's module and import the shim as a user would.
package shimtest
