package redis

// Commands returns the whole table (containers followed by their
// subcommands, sorted by name), for generators that derive other tables
// from it. The slice is shared: do not modify it.
func Commands() []Command { return commands[:] }

// ServerVersion is the redis-server version the table was generated from.
func ServerVersion() string { return serverVersion }
