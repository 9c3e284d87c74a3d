package httpserve

import (
	"crypto/sha256"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Basic auth with the exporter-toolkit's rules (users and bcrypt hashes
// from the web configuration, a fixed hash for unknown users so timing does
// not tell them apart), made cheap to attack. bcrypt is deliberately
// expensive: 16 wrong passwords a second used a whole core. So:
//
//   - A verified credential is remembered (a SHA-256 of user, hash and
//     password), as the toolkit does: a scraper pays bcrypt once, and a
//     flood of wrong passwords cannot evict it (failures are not cached,
//     they are limited).
//   - Failed logins are limited per client address (an IPv6 /64 counts as
//     one address): failBurst at once, then one per failEvery. Over the
//     limit, 429 with Retry-After and no bcrypt at all.
//   - bcrypt for credentials not remembered runs one at a time and at most
//     verifyRate per second in all, whatever the number of addresses.
//   - A 401 or 429 closes the connection: a rejected client does not keep
//     a keep-alive connection (and its memory) open.
const (
	failBurst   = 10
	failEvery   = time.Second
	verifyRate  = 5 // per second
	verifyBurst = 10
	maxClients  = 4096 // failure records held
	maxVerified = 1024 // remembered credentials
	fakeHash    = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
	retryAfterS = 2
)

type auth struct {
	conf *webConfig
	next http.Handler
	log  *slog.Logger

	mu       sync.Mutex
	verified map[[32]byte]struct{}
	fails    map[netip.Addr]*bucket
	global   bucket
	rate     bucket // the file's rate_limit, over every request

	bcryptMu sync.Mutex

	Stats AuthStats
}

// AuthStats counts what basic auth decided.
type AuthStats struct {
	OK, Cached, Failed, Limited atomic.Uint64
}

// bucket is a token bucket: tokens regained at one per every, up to burst.
type bucket struct {
	tokens float64
	last   time.Time
}

func (b *bucket) take(now time.Time, every time.Duration, burst float64) bool {
	if b.last.IsZero() {
		b.tokens, b.last = burst, now
	}
	b.tokens = min(burst, b.tokens+float64(now.Sub(b.last))/float64(every))
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// avail is the tokens the bucket holds now, without taking one.
func (b *bucket) avail(now time.Time, every time.Duration, burst float64) float64 {
	if b.last.IsZero() {
		return burst
	}
	return min(burst, b.tokens+float64(now.Sub(b.last))/float64(every))
}

func newAuth(conf *webConfig, next http.Handler, log *slog.Logger) *auth {
	return &auth{conf: conf, next: next, log: log, verified: map[[32]byte]struct{}{}, fails: map[netip.Addr]*bucket{}}
}

// clientAddr is the address failures are counted against.
func clientAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	return a
}

func (a *auth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _, err := a.conf.get()
	if c == nil {
		a.log.Error("read web configuration", "err", err)
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	if err != nil {
		a.log.Warn("reload web configuration: keeping the previous one", "err", err)
	}
	if rl := c.RateLimiterConfig; rl.Interval > 0 {
		a.mu.Lock()
		ok := a.rate.take(time.Now(), rl.Interval, float64(max(rl.Burst, 1)))
		a.mu.Unlock()
		if !ok {
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
			return
		}
	}
	for k, v := range c.HTTPConfig.Header {
		w.Header().Set(k, v)
	}
	if len(c.Users) == 0 {
		a.next.ServeHTTP(w, r)
		return
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		a.reject(w, http.StatusUnauthorized)
		return
	}
	hash, known := c.Users[user]
	if !known {
		hash = fakeHash
	}
	key := credKey(user, string(hash), pass)
	now := time.Now()
	ip := clientAddr(r)
	a.mu.Lock()
	_, cached := a.verified[key]
	if !cached {
		// A failure costs bcrypt: it must be affordable for this address
		// and for the process.
		b := a.fails[ip]
		if b != nil && b.avail(now, failEvery, failBurst) < 1 {
			a.mu.Unlock()
			a.Stats.Limited.Add(1)
			a.reject(w, http.StatusTooManyRequests)
			return
		}
		if !a.global.take(now, time.Second/verifyRate, verifyBurst) {
			a.mu.Unlock()
			a.Stats.Limited.Add(1)
			a.reject(w, http.StatusTooManyRequests)
			return
		}
	}
	a.mu.Unlock()
	if cached && known {
		a.Stats.Cached.Add(1)
		a.next.ServeHTTP(w, r)
		return
	}
	a.bcryptMu.Lock()
	err = bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass))
	a.bcryptMu.Unlock()
	if err == nil && known {
		a.mu.Lock()
		if len(a.verified) >= maxVerified {
			clear(a.verified)
		}
		a.verified[key] = struct{}{}
		a.mu.Unlock()
		a.Stats.OK.Add(1)
		a.next.ServeHTTP(w, r)
		return
	}
	a.Stats.Failed.Add(1)
	a.mu.Lock()
	b := a.fails[ip]
	if b == nil {
		if len(a.fails) >= maxClients {
			a.pruneLocked(now)
		}
		b = &bucket{}
		a.fails[ip] = b
	}
	b.take(now, failEvery, failBurst)
	a.mu.Unlock()
	a.reject(w, http.StatusUnauthorized)
}

// pruneLocked drops failure records that have recovered, and if none has,
// the oldest half: memory stays bounded under a flood from many addresses
// (each of which still passes the process-wide verification limit).
func (a *auth) pruneLocked(now time.Time) {
	for k, b := range a.fails {
		if b.avail(now, failEvery, failBurst) >= failBurst {
			delete(a.fails, k)
		}
	}
	if len(a.fails) < maxClients {
		return
	}
	n := 0
	for k := range a.fails {
		delete(a.fails, k)
		if n++; n >= maxClients/2 {
			break
		}
	}
}

func (a *auth) reject(w http.ResponseWriter, code int) {
	w.Header().Set("Connection", "close")
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Basic")
	} else {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterS))
	}
	http.Error(w, http.StatusText(code), code)
}

// credKey identifies a credential checked against a hash; the password is
// kept only as part of a hash.
func credKey(user, hash, pass string) [32]byte {
	h := sha256.New()
	for _, s := range []string{user, hash, pass} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}
