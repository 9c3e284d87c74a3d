package termtext

import "testing"

func TestField(t *testing.T) {
	for in, want := range map[string]string{
		"redis":            "redis",
		"10.0.0.5:6379":    "10.0.0.5:6379",
		"ключ:42":          "ключ:42",
		"":                 "",
		"a b":              `"a b"`,
		"\x1b]0;pwned\x07": `"\x1b]0;pwned\a"`,
		"x\ny":             `"x\ny"`,
		"x\ry":             `"x\ry"`,
		"\u009b31m":        `"\u009b31m"`,
		"\u202eevil":       `"\u202eevil"`,
		"\xff":             `"\xff"`,
		`say "hi"`:         `"say \"hi\""`,
		"tab\there":        `"tab\there"`,
		"del\x7f":          `"del\x7f"`,
	} {
		if got := Field(in); got != want {
			t.Errorf("Field(%q) = %s, want %s", in, got, want)
		}
	}
	if got := Key(nil); got != `""` {
		t.Errorf("Key(nil) = %s", got)
	}
	if got := Key([]byte("item:1")); got != "item:1" {
		t.Errorf("Key = %s", got)
	}
}

func TestStrip(t *testing.T) {
	for in, want := range map[string]string{
		"GET http://x: 502 Bad Gateway": "GET http://x: 502 Bad Gateway",
		"bad\x1b[2Jstatus\r\n\x07":      "bad[2Jstatus",
		"\u202eevil \xff":               "evil ",
	} {
		if got := Strip(in); got != want {
			t.Errorf("Strip(%q) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkFieldSafe(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Field("10.0.0.5:6379")
	}
}

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 keys"}, {1, "1 key"}, {2, "2 keys"}, {11, "11 keys"}} {
		if got := Count(c.n, "key", "keys"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
