// Package webview serves the daemon's web view of its hot set: one HTML
// page, a script and a stylesheet, embedded in the binary (no external
// assets, nothing fetched from elsewhere). The page polls /hotkeys on the
// same origin, so it is behind whatever the daemon's web configuration
// puts in front of every endpoint (TLS, basic auth).
package webview

import (
	"embed"
	"net/http"
)

//go:embed static
var static embed.FS

// Paths the handler answers; the daemon routes them to it.
const (
	IndexPath  = "/"
	AssetsPath = "/webview/"
)

// security headers: the page runs only its own script, loads nothing from
// elsewhere, cannot be framed, and keys (untrusted text) are only ever
// inserted as text, never as markup.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// Handler serves the page at IndexPath (exactly "/": other unknown paths
// are 404) and its assets under AssetsPath.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := static.ReadFile("static/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(b)
	})
	mux.HandleFunc("GET "+AssetsPath+"{file}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		b, err := static.ReadFile("static/" + name)
		if err != nil || name == "index.html" {
			http.NotFound(w, r)
			return
		}
		switch {
		case len(name) > 3 && name[len(name)-3:] == ".js":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		case len(name) > 4 && name[len(name)-4:] == ".css":
			w.Header().Set("Content-Type", "text/css; charset=utf-8")
		}
		w.Write(b)
	})
	return secure(mux)
}
