package redis

// CmdFlag is a command flag as COMMAND reports it ("write", "readonly", ...).
type CmdFlag uint32

// Command flags, one bit per COMMAND flag name.
const (
	FlagWrite CmdFlag = 1 << iota
	FlagReadonly
	FlagDenyOOM
	FlagModule
	FlagAdmin
	FlagPubSub
	FlagNoScript
	FlagBlocking
	FlagLoading
	FlagStale
	FlagSkipMonitor
	FlagSkipSlowlog
	FlagAsking
	FlagFast
	FlagNoAuth
	FlagMayReplicate
	FlagSentinel
	FlagOnlySentinel
	FlagNoMandatoryKeys
	FlagProtected
	FlagMovableKeys
	FlagNoAsyncLoading
	FlagNoMulti
	FlagAllowBusy
)

// KeyFlag is a key-spec flag (RO, RW, OW, RM, ACCESS, UPDATE, ...).
type KeyFlag uint16

// Key-spec flags as documented at https://redis.io/docs/reference/key-specs/.
const (
	KeyRO KeyFlag = 1 << iota
	KeyRW
	KeyOW
	KeyRM
	KeyAccess
	KeyUpdate
	KeyInsert
	KeyDelete
	// KeyNotKey marks arguments that look like keys but are not (shard
	// channels of SPUBLISH, SSUBSCRIBE): the decoder never reports them.
	KeyNotKey
	KeyIncomplete
	KeyVariableFlags
)

// BeginKind says how a key spec finds its first key.
type BeginKind uint8

const (
	BeginUnknown BeginKind = iota // keys found by command-specific code (SORT)
	BeginIndex                    // at argument Index
	BeginKeyword                  // after Keyword, searched from StartFrom
)

// FindKind says how a key spec finds its keys after the first one.
type FindKind uint8

const (
	FindUnknown FindKind = iota
	FindRange            // LastKey, KeyStep, Limit
	FindKeyNum           // the count is at KeyNumIdx, keys from FirstKey, KeyStep
)

// KeySpec is one Redis 7 key specification. Indexes count from the command
// name (argument 0), also for subcommands.
type KeySpec struct {
	Flags KeyFlag
	Begin BeginKind
	// Index is the argument of the first key (BeginIndex).
	Index int32
	// Keyword is searched (case-insensitively) from StartFrom; a negative
	// StartFrom counts from the end and searches backwards (BeginKeyword).
	Keyword   string
	StartFrom int32
	Find      FindKind
	// FindRange: the last key is at first+LastKey when LastKey >= 0;
	// otherwise at argc+LastKey, or, with Limit > 0, the keys are the first
	// 1/Limit of the remaining arguments (XREAD STREAMS k1 k2 id1 id2).
	LastKey int32
	KeyStep int32
	Limit   int32
	// FindKeyNum: numkeys is at first+KeyNumIdx, the keys start at
	// first+FirstKey.
	KeyNumIdx int32
	FirstKey  int32
}

// Command is one command or subcommand of the table.
type Command struct {
	// Name is upper case; subcommands are "CONTAINER|SUB" ("CLIENT|SETNAME").
	Name string
	// Arity > 0 is the exact argument count (name included); < 0 the minimum.
	Arity int32
	Flags CmdFlag
	// SubLo..SubHi index the subcommands of a container in commands.
	SubLo, SubHi int32
	KeySpecs     []KeySpec
}

// arityOK reports whether a request of argc arguments fits c's arity; the
// server rejects, and runs nothing for, one that does not.
func (c *Command) arityOK(argc int) bool {
	if c.Arity >= 0 {
		return argc == int(c.Arity)
	}
	return argc >= int(-c.Arity)
}

// Lookup returns the table entry of a command name or "CONTAINER|SUB" name,
// in any case. It does not allocate.
func Lookup(name []byte) (*Command, bool) {
	i := lookupFold(name)
	if i < 0 {
		return nil, false
	}
	return &commands[i], true
}

// lookupFold finds name case-insensitively: it folds name into a stack
// buffer and switches on it. A name longer than any in the table is unknown.
func lookupFold(name []byte) int {
	var buf [maxNameLen]byte
	if len(name) > len(buf) || len(name) == 0 {
		return -1
	}
	for i, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[i] = c
	}
	return lookupUpper(buf[:len(name)])
}

// lookupSub finds subcommand name of the container at index ci.
func lookupSub(ci int, name []byte) int {
	var buf [maxNameLen]byte
	cn := commands[ci].Name
	if len(cn)+1+len(name) > len(buf) || len(name) == 0 {
		return -1
	}
	n := copy(buf[:], cn)
	buf[n] = '|'
	n++
	for _, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[n] = c
		n++
	}
	return lookupUpper(buf[:n])
}

// fieldWeighted lists the single-key reads that name fields of one key
// (HMGET h f1 f2 ...): they report the key once, weighted by the number of
// fields (argc-2), because a client-side cache of h serves every field.
var fieldWeighted = [...]string{
	"HGET", "HMGET", "HEXISTS", "HSTRLEN", // hash fields
	"SMISMEMBER", // set members
	"ZMSCORE",    // sorted-set members
}

// Indexes of commands the parser treats specially, resolved once.
var (
	idxSelect  = mustIndex("SELECT")
	idxMulti   = mustIndex("MULTI")
	idxExec    = mustIndex("EXEC")
	idxDiscard = mustIndex("DISCARD")
	idxReset   = mustIndex("RESET")
	idxSort    = mustIndex("SORT")
	idxMigrate = mustIndex("MIGRATE")

	isFieldWeighted = func() (w [len(commands)]bool) {
		for _, n := range fieldWeighted {
			w[mustIndex(n)] = true
		}
		return w
	}()
)

func mustIndex(name string) int {
	i := lookupUpper([]byte(name))
	if i < 0 {
		// The generated table is static, so this fails every test at once
		// if a regeneration ever drops one of these commands.
		panic("redis: command " + name + " missing from commands_gen.go")
	}
	return i
}
