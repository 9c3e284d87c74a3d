package redis

// The command table comes from a real redis-server's COMMAND output; see
// tools/gen/rediscommands. Regenerate with `go generate ./decode/redis`
// (needs redis-server on PATH) and commit the result.

//go:generate go run ../../tools/gen/rediscommands -out commands_gen.go
