package memcache

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var fixtureNames = []string{"gomemcache", "libmemcached", "memcslap", "meta", "binary", "midstream"}

func fixturePath(name string) string {
	return filepath.Join("..", "..", "testdata", "memcache", name)
}

// decodeFixture decodes every client connection of a fixture, segment by
// segment as captured, or in chunks from split when it is not nil.
func decodeFixture(t *testing.T, name string, split func([]byte) [][]byte) *recSink {
	t.Helper()
	s := &recSink{}
	for _, c := range readPcap(t, fixturePath(name+".pcap")) {
		st := newStream(!c.sawSYN)
		for _, seg := range c.segments {
			if split == nil {
				st.feed(seg, s)
				continue
			}
			for _, ch := range split(seg) {
				st.feed(ch, s)
			}
		}
	}
	return s
}

// TestFixtures compares the reads decoded from each capture with the truth
// the generator recorded while telling real clients what to send.
func TestFixtures(t *testing.T) {
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			want := readGolden(t, fixturePath(name+".count.golden"))
			rng := rand.New(rand.NewSource(1))
			splits := map[string]func([]byte) [][]byte{
				"segments": nil,
				"random": func(b []byte) [][]byte {
					var out [][]byte
					for len(b) > 0 {
						n := min(len(b), 1+rng.Intn(64))
						out = append(out, b[:n])
						b = b[n:]
					}
					return out
				},
			}
			for how, split := range splits {
				s := decodeFixture(t, name, split)
				if errs := s.errors(); len(errs) > 0 {
					t.Errorf("%s: decode errors: %v", how, errs)
				}
				if diff := diffCounts(s.reads(), want); diff != "" {
					t.Errorf("%s: reads differ from golden (got vs want):\n%s", how, diff)
				}
			}
		})
	}
}

func diffCounts(got, want map[string]int) string {
	var lines []string
	for k, n := range want {
		if got[k] != n {
			lines = append(lines, fmt.Sprintf("%q: got %d want %d", k, got[k], n))
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			lines = append(lines, fmt.Sprintf("%q: got %d want 0", k, n))
		}
	}
	sort.Strings(lines)
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("... %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}
