package httpserve

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// FuzzErrorLog: any line net/http may write (it quotes remote addresses
// and error text) becomes at most one structured record, never a panic.
func FuzzErrorLog(f *testing.F) {
	f.Add("http: TLS handshake error from 10.0.0.1:5555: EOF\n")
	f.Add("http: Accept error: accept tcp [::]:9464: accept4: too many open files; retrying in 5ms\n")
	f.Add("http: superfluous response.WriteHeader call\n")
	f.Add("http: TLS handshake error from ")
	f.Fuzz(func(t *testing.T, line string) {
		var buf bytes.Buffer
		l := newErrorLog(slog.New(slog.NewTextHandler(&buf, nil)))
		l.Print(line)
		if n := strings.Count(buf.String(), "\n"); n > 1 {
			t.Fatalf("%d records for one line", n)
		}
	})
}
