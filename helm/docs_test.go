package helm

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The install steps users copy from the docs are tested as written: the
// commands are taken out of the markdown, helm install becomes helm
// template with the same arguments, and what the chart renders must match
// the Secret the docs told them to create.

var installDocs = []string{"../README.md", "../docs/kubernetes.md", "hotsniff/README.md"}

// fence matches a fenced code block and its language.
var fence = regexp.MustCompile("(?ms)^```(\\w*)\\n(.*?)^```")

// codeBlocks returns the fenced blocks of a markdown file in language lang.
func codeBlocks(t *testing.T, path, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range fence.FindAllStringSubmatch(string(b), -1) {
		if m[1] == lang {
			out = append(out, m[2])
		}
	}
	return out
}

// shellWords splits the commands of a shell block into words: it joins
// backslash continuations, drops comments and honours single and double
// quotes (all the docs use).
func shellWords(block string) [][]string {
	var cmds [][]string
	block = strings.ReplaceAll(block, "\\\n", " ")
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		line := sc.Text()
		var words []string
		var cur strings.Builder
		inWord := false
		var quote byte
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch {
			case quote != 0 && c == quote:
				quote = 0
			case quote != 0:
				cur.WriteByte(c)
			case c == '\'' || c == '"':
				quote, inWord = c, true
			case c == '#' && !inWord:
				i = len(line)
			case c == ' ' || c == '\t':
				if inWord {
					words, inWord = append(words, cur.String()), false
					cur.Reset()
				}
			default:
				cur.WriteByte(c)
				inWord = true
			}
		}
		if inWord {
			words = append(words, cur.String())
		}
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
	}
	return cmds
}

// flagValue returns the value of -n/--namespace style flags in words.
func flagValue(words []string, names ...string) string {
	for i, w := range words {
		for _, n := range names {
			if w == n && i+1 < len(words) {
				return words[i+1]
			}
			if v, ok := strings.CutPrefix(w, n+"="); ok {
				return v
			}
		}
	}
	return ""
}

func TestDocumentedInstall(t *testing.T) {
	t.Parallel()
	for _, doc := range installDocs {
		t.Run(filepath.Base(filepath.Dir(doc))+"/"+filepath.Base(doc), func(t *testing.T) {
			t.Parallel()
			var secretName, secretKey, secretNS string
			var install, makeImage, push []string
			labelled := map[string]int{} // namespace -> index of the command that labels it privileged
			ncmd := 0
			installAt := -1
			for _, block := range codeBlocks(t, doc, "sh") {
				for _, w := range shellWords(block) {
					ncmd++
					switch {
					case len(w) >= 4 && w[0] == "kubectl" && w[1] == "label" && (w[2] == "namespace" || w[2] == "ns") &&
						slices.Contains(w, "pod-security.kubernetes.io/enforce=privileged"):
						labelled[w[3]] = ncmd
					case len(w) >= 2 && w[0] == "make" && w[1] == "image" && makeImage == nil:
						makeImage = w
					case len(w) == 3 && w[0] == "docker" && w[1] == "push" && push == nil:
						push = w
					case len(w) > 4 && w[0] == "kubectl" && slices.Contains(w, "secret") && slices.Contains(w, "generic") && secretName == "":
						// The first Secret is the install's (the Redis URL);
						// later ones (the web configuration) have their own test.
						i := slices.Index(w, "generic")
						secretName = w[i+1]
						secretNS = flagValue(w, "-n", "--namespace")
						lit := flagValue(w, "--from-literal")
						secretKey, _, _ = strings.Cut(lit, "=")
					case len(w) > 3 && w[0] == "helm" && (w[1] == "install" || w[1] == "upgrade") && install == nil:
						install, installAt = w, ncmd
					}
				}
			}
			if secretName == "" || install == nil {
				t.Fatalf("%s: no `kubectl create secret generic` or no `helm install` found", doc)
			}
			// helm install REL CHART args... -> helm template REL chartDir args...
			args := []string{"template", install[2], chartDir}
			for i := 4; i < len(install); i++ {
				w := install[i]
				if (w == "-f" || w == "--values") && i+1 < len(install) {
					args = append(args, "-f", valuesFile(t, doc, install[i+1]))
					i++
					continue
				}
				args = append(args, w)
			}
			if install[3] != "./helm/hotsniff" {
				t.Errorf("chart path %q: the docs install ./helm/hotsniff from a clone", install[3])
			}
			ns := flagValue(install, "-n", "--namespace")
			if ns != secretNS {
				t.Errorf("Secret created in namespace %q, chart installed in %q", secretNS, ns)
			}
			// Pod Security admission rejects the pods (hostNetwork, added
			// capabilities) below the privileged level: every quick start
			// labels the namespace before installing.
			if at, ok := labelled[ns]; !ok || at > installAt {
				t.Errorf("%s installs into namespace %q without `kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged` before it", doc, ns, ns)
			}
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			m := decodeManifests(t, out)
			_, c, cfg := checkCommon(t, m)
			// The image the pods run is the one the doc built and pushed.
			checkDocumentedImage(t, doc, makeImage, push, c.Image)
			ref := envFromSecret(t, c, "HOTSNIFF_REDIS_URL")
			if ref.Name != secretName || ref.Key != secretKey {
				t.Errorf("the pod reads Secret %s key %q; the docs create %s with key %q: the pod could not start",
					ref.Name, ref.Key, secretName, secretKey)
			}
			checkWithCLI(t, cfg)
		})
	}
}

// checkDocumentedImage: the doc builds the image with `make image
// IMAGE=REPO VERSION=TAG` and pushes it with `docker push REPO:TAG`, the
// Makefile really tags what it builds REPO:TAG, and the pods of the
// documented install run exactly that image (a doc that skips setting
// image.repository leaves the nodes pulling an image nobody pushed).
func checkDocumentedImage(t *testing.T, doc string, makeImage, push []string, image string) {
	t.Helper()
	if makeImage == nil || push == nil {
		t.Errorf("%s: no `make image IMAGE=... VERSION=...` and `docker push` before the install: the chart's image is never built", doc)
		return
	}
	repo, version := flagValue(makeImage, "IMAGE"), flagValue(makeImage, "VERSION")
	if repo == "" || version == "" {
		t.Errorf("%s: %q sets no IMAGE or VERSION", doc, strings.Join(makeImage, " "))
		return
	}
	ref := repo + ":" + version
	if push[2] != ref {
		t.Errorf("%s builds %s but pushes %s", doc, ref, push[2])
	}
	if image != ref {
		t.Errorf("%s: the pods run %s, the doc built and pushed %s (set image.repository, and image.tag unless VERSION is the appVersion)", doc, image, ref)
	}
	out, err := exec.Command("make", "-C", "..", "-n", "image", "IMAGE="+repo, "VERSION="+version).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n image: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "docker build") || !strings.Contains(string(out), "-t "+ref+" ") {
		t.Errorf("`make image IMAGE=%s VERSION=%s` does not tag %s:\n%s", repo, version, ref, out)
	}
}

// valuesFile writes the yaml block of doc whose first line is "# NAME" to a
// temporary file (the docs show the values file, then install with -f NAME).
func valuesFile(t *testing.T, doc, name string) string {
	t.Helper()
	for _, b := range codeBlocks(t, doc, "yaml") {
		if strings.HasPrefix(b, "# "+name+"\n") {
			p := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("%s installs with -f %s but shows no yaml block starting with # %s", doc, name, name)
	return ""
}

// TestDocumentedValues renders every Helm values snippet of the docs (yaml
// blocks that are neither a hotsniff config file nor Prometheus rules), so
// a snippet the schema rejects cannot stay in the docs.
func TestDocumentedValues(t *testing.T) {
	t.Parallel()
	n := 0
	for _, doc := range installDocs[1:] {
		for i, b := range codeBlocks(t, doc, "yaml") {
			if strings.HasPrefix(b, "# /etc/hotsniff/config.yaml") || strings.HasPrefix(b, "# hotsniff.yaml") || strings.HasPrefix(b, "- alert:") {
				continue
			}
			n++
			p := filepath.Join(t.TempDir(), "values.yaml")
			os.WriteFile(p, []byte(b), 0o644)
			if _, err := runHelm(t, "template", release, chartDir, "-f", p); err != nil {
				t.Errorf("%s yaml block %d does not render:\n%s\n%v", doc, i+1, b, err)
			}
		}
	}
	if n < 3 {
		t.Errorf("found only %d values snippets in the docs", n)
	}
}

// TestDetectionValues: every detector setting of docs/detection.md can be
// set from the chart's values, and the config the chart renders is accepted
// by hotsniff itself.
func TestDetectionValues(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "values.yaml")
	os.WriteFile(p, []byte(`
detection:
  hotQPS: 2000
  hotBytes: 50000000
  detector: tair
  ttl: 30s
  refreshEvery: 10s
  window: 2s
  coldRatio: 0.5
  buckets: 8192
  maxHot: 256
  invalidateGap: 5ms
  rules:
    - {pattern: "session:*", hot-qps: 5000, proto: redis}
    - {pattern: "old:*", hot_qps: 300}
  tair: {buckets: 2048, sampleMax: 10000, sigmaN: 1.5, reapMax: 16}
`), 0o644)
	m := render(t, "-f", p)
	_, _, cfg := checkCommon(t, m)
	want := map[string]any{
		"hot-qps": 2000, "hot-bytes": 50000000, "detector": "tair", "ttl": "30s", "refresh-every": "10s", "window": "2s",
		"cold-ratio": 0.5, "buckets": 8192, "max-hot": 256, "invalidate-gap": "5ms",
		"tair-buckets": 2048, "tair-sample-max": 10000, "tair-sigma-n": 1.5, "tair-reap-max": 16,
	}
	for k, v := range want {
		if got, ok := cfg[k]; !ok || yamlString(got) != yamlString(v) {
			t.Errorf("config %s = %v, want %v", k, got, v)
		}
	}
	out := checkWithCLI(t, cfg)
	for _, s := range []string{"detector tair", "hot-bytes 5e+07", "ttl 30s", "refresh-every 10s", "window 2s", "cold-ratio 0.5", "buckets 8192",
		"max-hot 256", "invalidate-gap 5ms", "tair-buckets 2048", "tair-sample-max 10000", "tair-sigma-n 1.5", "tair-reap-max 16", "2 rules"} {
		if !strings.Contains(out, s) {
			t.Errorf("hotsniff run --config-check does not show %q:\n%s", s, out)
		}
	}
}

func yamlString(v any) string {
	b, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(b))
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" && buildErr == nil {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// checkWithCLI writes cfg as the chart's config file and has the real
// hotsniff validate it (run --config-check); it returns the summary.
func checkWithCLI(t *testing.T, cfg map[string]any) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hotsniff-helm-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "hotsniff")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/hotsniff").CombinedOutput(); err != nil {
			buildErr = err
			binPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build hotsniff: %v\n%s", buildErr, binPath)
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(p, b, 0o644)
	cmd := exec.Command(binPath, "run", "--config", p, "--config-check")
	cmd.Env = append(os.Environ(), "HOTSNIFF_REDIS_URL=redis://127.0.0.1:6379/0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hotsniff run --config-check rejects the rendered config: %v\n%s\n%s", err, out, b)
	}
	return string(out)
}
