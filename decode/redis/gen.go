package redis

// The command table comes from a real redis-server's COMMAND output; see
// internal/gen/rediscommands. Regenerate with `go generate ./decode/redis`
// (needs redis-server on PATH) and commit the result.

//go:generate go run ../../internal/gen/rediscommands -out commands_gen.go
