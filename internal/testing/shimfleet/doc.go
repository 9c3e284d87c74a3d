// Package shimfleet measures the client shims end to end, each as the
// separate application process it is in production (the conformance
// suite's adapters: the Go test binary, Python's hotsniff_shim, Node's
// dist/conformance-adapter.js), against real redis-servers:
//
//   - TestClusterLive: each shim on its library's cluster client, the real
//     `hotsniff run` binary capturing a real 3-master cluster, the hot key's
//     slot moved mid-run under a writer. The share of reads served locally
//     is read from the masters' own INFO commandstats.
//   - TestServerCostBounded and TestServerCostFigures: what one shim with a
//     large (or forged) hot set costs the cache server.
//
// HOTSNIFF_SHIMFLEET_SHIMS=go,python,node-ioredis,node-redis runs only some
// shims. A missing runtime (root for the namespace, redis-cli, python3 with
// redis-py, node with client/node/node_modules) skips, or fails under
// CI=true. The figures and how to run them are in docs/client-shim.md. The
// tests are slow (real processes, a cluster, a daemon), so they live in a
// package of their own.
package shimfleet
