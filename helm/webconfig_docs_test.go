package helm

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDocumentedWebConfig takes the "lock down the HTTP port" commands of
// the docs as written: the Secret they create must hold the file the chart
// points hotsniff at, and every file the documented web configuration
// names; the documented upgrade must mount that Secret.
func TestDocumentedWebConfig(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"../docs/kubernetes.md", "hotsniff/README.md"} {
		t.Run(filepath.Base(doc), func(t *testing.T) {
			t.Parallel()
			files := map[string][]string{} // Secret -> --from-file names
			var upgrade []string
			var all string
			for _, block := range codeBlocks(t, doc, "sh") {
				all += block
				for _, w := range shellWords(block) {
					switch {
					case len(w) > 4 && w[0] == "kubectl" && slices.Contains(w, "generic"):
						name := w[slices.Index(w, "generic")+1]
						for i, x := range w {
							if v, ok := strings.CutPrefix(x, "--from-file="); ok {
								files[name] = append(files[name], filepath.Base(v))
							} else if x == "--from-file" && i+1 < len(w) {
								files[name] = append(files[name], filepath.Base(w[i+1]))
							}
						}
					case len(w) > 3 && w[0] == "helm" && w[1] == "upgrade" && slices.ContainsFunc(w, func(s string) bool { return strings.HasPrefix(s, "webConfig.") }):
						upgrade = w
					}
				}
			}
			if upgrade == nil {
				t.Fatal("no helm upgrade with webConfig")
			}
			var args []string
			for i, w := range upgrade {
				if w == "--set" && i+1 < len(upgrade) {
					args = append(args, "--set", upgrade[i+1])
				}
			}
			m := render(t, args...)
			ds, c, cfg := checkCommon(t, m)
			var secret string
			for _, v := range ds.Spec.Template.Spec.Volumes {
				if v.Secret != nil && v.Name == "web-config" {
					secret = v.Secret.SecretName
				}
			}
			have := files[secret]
			if secret == "" || have == nil {
				t.Fatalf("the upgrade mounts Secret %q, which the docs do not create with --from-file (%v)", secret, files)
			}
			webCfg, _ := cfg["web-config"].(string)
			if !slices.Contains(have, filepath.Base(webCfg)) {
				t.Errorf("hotsniff reads %s; Secret %s holds %v", webCfg, secret, have)
			}
			// The files the documented web configuration names.
			for _, f := range []string{"tls.crt", "tls.key"} {
				if strings.Contains(all, "cert_file: "+f) || strings.Contains(all, "key_file: "+f) || strings.Contains(all, f+`\n`) {
					if !slices.Contains(have, f) {
						t.Errorf("the web configuration names %s; Secret %s holds %v", f, secret, have)
					}
				}
			}
			for _, mnt := range c.VolumeMounts {
				if mnt.Name == "web-config" && !strings.HasPrefix(webCfg, mnt.MountPath+"/") {
					t.Errorf("web-config %s is not under the mount %s", webCfg, mnt.MountPath)
				}
			}
		})
	}
}
