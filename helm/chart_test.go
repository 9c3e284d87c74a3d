package helm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

const (
	chartDir   = "hotsniff"
	release    = "hs"
	namespace  = "cache-system"
	configPath = "/etc/hotsniff/config.yaml"
)

// Capability sets per capture mode (names without CAP_).
var (
	ebpfCaps     = []string{"BPF", "NET_ADMIN", "PERFMON"}
	afpacketCaps = []string{"NET_RAW"}
	// auto tries eBPF and falls back to AF_PACKET, so it needs both sets.
	autoCaps = []string{"BPF", "NET_ADMIN", "NET_RAW", "PERFMON"}
)

// helmPath finds helm on PATH or in $(go env GOPATH)/bin. Without it the test
// skips, except under CI=true, where a missing helm fails it.
func helmPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	for _, gp := range filepath.SplitList(build.Default.GOPATH) {
		p := filepath.Join(gp, "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "helm not found on PATH or in $(go env GOPATH)/bin; install it with: go install helm.sh/helm/v3/cmd/helm@v3.22.0"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmPath(t), args...)
	// Keep helm away from the user's repositories, plugins and caches.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
}

// ---- rendering and strict decoding ----------------------------------------

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// chart uses; strict decoding rejects any field the chart gets wrong.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port              string          `json:"port"`
			Path              string          `json:"path"`
			Scheme            string          `json:"scheme"`
			TLSConfig         map[string]any  `json:"tlsConfig"`
			BasicAuth         map[string]any  `json:"basicAuth"`
			Interval          string          `json:"interval"`
			ScrapeTimeout     string          `json:"scrapeTimeout"`
			HonorLabels       bool            `json:"honorLabels"`
			Relabelings       []relabelConfig `json:"relabelings"`
			MetricRelabelings []relabelConfig `json:"metricRelabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels"`
	Separator    string   `json:"separator"`
	TargetLabel  string   `json:"targetLabel"`
	Regex        string   `json:"regex"`
	Modulus      uint64   `json:"modulus"`
	Replacement  string   `json:"replacement"`
	Action       string   `json:"action"`
}

// manifests is one `helm template` output, decoded.
type manifests struct {
	DaemonSets      []*appsv1.DaemonSet
	ConfigMaps      []*corev1.ConfigMap
	Secrets         []*corev1.Secret
	Services        []*corev1.Service
	ServiceAccounts []*corev1.ServiceAccount
	ServiceMonitors []*serviceMonitor
}

func (m *manifests) daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	if len(m.DaemonSets) != 1 {
		t.Fatalf("want 1 DaemonSet, got %d", len(m.DaemonSets))
	}
	return m.DaemonSets[0]
}

func (m *manifests) configMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	for _, c := range m.ConfigMaps {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no ConfigMap %q", name)
	return nil
}

// strictUnmarshal decodes one YAML document into v, failing on duplicate
// keys and on any field v's type does not have.
func strictUnmarshal(doc []byte, v any) error {
	j, err := sigsyaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func decodeManifests(t *testing.T, out []byte) *manifests {
	t.Helper()
	m := &manifests{}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("split rendered YAML: %v", err)
		}
		var probe struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := sigsyaml.Unmarshal(doc, &probe); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		if probe.Kind == "" {
			if len(bytes.TrimSpace(stripComments(doc))) != 0 {
				t.Fatalf("rendered document without kind:\n%s", doc)
			}
			continue
		}
		if errs := validation.IsDNS1123Subdomain(probe.Metadata.Name); len(errs) > 0 {
			t.Errorf("%s name %q: %v", probe.Kind, probe.Metadata.Name, errs)
		}
		if probe.Metadata.Namespace == "" {
			t.Errorf("%s %s has no namespace", probe.Kind, probe.Metadata.Name)
		}
		var target any
		gvk := probe.APIVersion + " " + probe.Kind
		switch gvk {
		case "apps/v1 DaemonSet":
			v := &appsv1.DaemonSet{}
			m.DaemonSets, target = append(m.DaemonSets, v), v
		case "v1 ConfigMap":
			v := &corev1.ConfigMap{}
			m.ConfigMaps, target = append(m.ConfigMaps, v), v
		case "v1 Secret":
			v := &corev1.Secret{}
			m.Secrets, target = append(m.Secrets, v), v
		case "v1 Service":
			v := &corev1.Service{}
			m.Services, target = append(m.Services, v), v
		case "v1 ServiceAccount":
			v := &corev1.ServiceAccount{}
			m.ServiceAccounts, target = append(m.ServiceAccounts, v), v
		case "monitoring.coreos.com/v1 ServiceMonitor":
			v := &serviceMonitor{}
			m.ServiceMonitors, target = append(m.ServiceMonitors, v), v
		default:
			t.Fatalf("unexpected object %s", gvk)
		}
		if err := strictUnmarshal(doc, target); err != nil {
			t.Fatalf("strict decode of %s %s: %v\n%s", gvk, probe.Metadata.Name, err, doc)
		}
	}
	return m
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func render(t *testing.T, args ...string) *manifests {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeManifests(t, out)
}

// ---- checks shared by every rendering --------------------------------------

func hotsniffContainer(t *testing.T, ds *appsv1.DaemonSet) *corev1.Container {
	t.Helper()
	cs := ds.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "hotsniff" {
		t.Fatalf("want one container named hotsniff, got %d", len(cs))
	}
	return &cs[0]
}

func capsOf(c *corev1.Container) []string {
	var caps []string
	for _, c := range c.SecurityContext.Capabilities.Add {
		caps = append(caps, string(c))
	}
	slices.Sort(caps)
	return caps
}

// config reads the config file the container is started with: the --config
// argument must point into a ConfigMap volume mount, and the file must parse
// the way the CLI parses it.
func config(t *testing.T, m *manifests) map[string]any {
	t.Helper()
	ds := m.daemonSet(t)
	c := hotsniffContainer(t, ds)
	i := slices.Index(c.Args, "--config")
	if len(c.Args) < 3 || c.Args[0] != "run" || i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != configPath {
		t.Fatalf("args = %q, want run --config %s", c.Args, configPath)
	}
	dir, file := filepath.Split(configPath)
	var mount *corev1.VolumeMount
	for k := range c.VolumeMounts {
		if filepath.Clean(c.VolumeMounts[k].MountPath) == filepath.Clean(dir) {
			mount = &c.VolumeMounts[k]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("%s is not mounted read-only: %+v", dir, c.VolumeMounts)
	}
	var vol *corev1.Volume
	for k := range ds.Spec.Template.Spec.Volumes {
		if ds.Spec.Template.Spec.Volumes[k].Name == mount.Name {
			vol = &ds.Spec.Template.Spec.Volumes[k]
		}
	}
	if vol == nil || vol.ConfigMap == nil {
		t.Fatalf("volume %q is not a ConfigMap", mount.Name)
	}
	text, ok := m.configMap(t, vol.ConfigMap.Name).Data[file]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", vol.ConfigMap.Name, file)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("config file does not parse: %v\n%s", err, text)
	}
	return cfg
}

// checkCommon holds the invariants of every rendering: hardening, host
// network, config file, node name, probes on the listen port.
func checkCommon(t *testing.T, m *manifests) (*appsv1.DaemonSet, *corev1.Container, map[string]any) {
	t.Helper()
	ds := m.daemonSet(t)
	pod := ds.Spec.Template.Spec
	c := hotsniffContainer(t, ds)
	cfg := config(t, m)

	if !pod.HostNetwork {
		t.Error("hostNetwork is not true")
	}
	if pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy = %q", pod.DNSPolicy)
	}
	if pod.HostPID || pod.HostIPC {
		t.Error("hostPID/hostIPC must stay off")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("pod automountServiceAccountToken must be false")
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate == nil ||
		ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
		t.Errorf("updateStrategy = %+v, want RollingUpdate with maxUnavailable", ds.Spec.UpdateStrategy)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %v does not match the pod labels %v (%v)", ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}

	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("container has no securityContext.capabilities")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("container must not be privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("runAsUser must be 0: added capabilities are effective only for root")
	}
	if d := sc.Capabilities.Drop; len(d) != 1 || d[0] != "ALL" {
		t.Errorf("capabilities.drop = %v, want [ALL]", d)
	}
	for _, c := range sc.Capabilities.Add {
		if strings.HasPrefix(string(c), "CAP_") || c == "SYS_ADMIN" || c == "ALL" {
			t.Errorf("capability %q must not be added", c)
		}
	}

	// Node name from the downward API.
	var node *corev1.EnvVar
	for k := range c.Env {
		if c.Env[k].Name == "HOTSNIFF_NODE" {
			node = &c.Env[k]
		}
	}
	if node == nil || node.ValueFrom == nil || node.ValueFrom.FieldRef == nil || node.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("HOTSNIFF_NODE must come from spec.nodeName: %+v", node)
	}

	// The probes hit /healthz and /readyz on the port hotsniff listens on.
	listen, _ := cfg["listen"].(string)
	if !strings.HasPrefix(listen, ":") {
		t.Fatalf("config listen = %q, want :PORT", cfg["listen"])
	}
	if len(c.Ports) != 1 {
		t.Fatalf("want one container port, got %+v", c.Ports)
	}
	if got := fmt.Sprintf(":%d", c.Ports[0].ContainerPort); got != listen {
		t.Errorf("containerPort %s != config listen %s", got, listen)
	}
	// The startup probe holds liveness off while the programs load and
	// attach: tens of seconds on a saturated node, so two minutes.
	if sp := c.StartupProbe; sp == nil || sp.HTTPGet == nil || sp.HTTPGet.Path != "/healthz" || sp.HTTPGet.Port != c.LivenessProbe.HTTPGet.Port ||
		sp.PeriodSeconds*sp.FailureThreshold < 120 {
		t.Errorf("startupProbe %+v: want GET /healthz on the liveness port, allowing at least 120 s", sp)
	}
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP probe for %s", name)
			continue
		}
		port := p.HTTPGet.Port.String()
		if hl, ok := cfg["health-listen"].(string); ok {
			// With a web configuration: the credential-free probe
			// listener on loopback (the pod shares the node's network).
			if got := p.HTTPGet.Host + ":" + port; got != hl || p.HTTPGet.Path != name || p.HTTPGet.Scheme != "" {
				t.Errorf("probe %s targets %s %s, want %s", name, got, p.HTTPGet.Path, hl)
			}
			continue
		}
		if port != c.Ports[0].Name && port != fmt.Sprint(c.Ports[0].ContainerPort) {
			t.Errorf("probe %s targets port %s, not the listen port %s", name, port, listen)
		}
		if p.HTTPGet.Path != name {
			t.Errorf("probe path %q, want %q", p.HTTPGet.Path, name)
		}
	}
	for _, key := range []string{"port", "capture", "hot-qps", "detector", "channel", "listen"} {
		if _, ok := cfg[key]; !ok {
			t.Errorf("config has no %q: %v", key, cfg)
		}
	}
	if _, ok := cfg["redis-url"]; ok {
		t.Error("the Redis URL must not be in the ConfigMap")
	}

	// Every Service selects the pods and exposes the metrics port.
	for _, s := range m.Services {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
			t.Errorf("Service %s does not select the pods", s.Name)
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != c.Ports[0].Name ||
			s.Spec.Ports[0].Port != c.Ports[0].ContainerPort {
			t.Errorf("Service %s ports %+v do not expose %s", s.Name, s.Spec.Ports, listen)
		}
	}
	for _, sa := range m.ServiceAccounts {
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("ServiceAccount %s must not automount its token", sa.Name)
		}
		if sa.Name != pod.ServiceAccountName {
			t.Errorf("ServiceAccount %s is not the pod's (%s)", sa.Name, pod.ServiceAccountName)
		}
	}
	return ds, c, cfg
}

// ---- tests -----------------------------------------------------------------

func TestLint(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"lint", chartDir},
		{"lint", "--strict", chartDir},
		{"lint", "--strict", chartDir, "-f", filepath.Join(chartDir, "ci", "full-values.yaml")},
		{"lint", "--strict", chartDir, "--set", "capture.mode=xdp,redis.existingSecret=r"},
	} {
		if out, err := runHelm(t, args...); err != nil {
			t.Error(err)
		} else if !bytes.Contains(out, []byte("0 chart(s) failed")) {
			t.Errorf("helm %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	m := render(t)
	ds, c, cfg := checkCommon(t, m)

	if len(m.Secrets) != 0 || len(m.ServiceMonitors) != 0 || len(m.ConfigMaps) != 1 {
		t.Errorf("defaults render %d Secrets, %d ServiceMonitors, %d ConfigMaps; want 0, 0, 1 (no dashboard)",
			len(m.Secrets), len(m.ServiceMonitors), len(m.ConfigMaps))
	}
	if len(m.Services) != 1 || m.Services[0].Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("want one headless Service")
	}
	if len(m.ServiceAccounts) != 1 {
		t.Errorf("want one ServiceAccount, got %d", len(m.ServiceAccounts))
	}
	if got := capsOf(c); !slices.Equal(got, autoCaps) {
		t.Errorf("auto capabilities = %v, want %v", got, autoCaps)
	}
	if ds.Spec.Template.Spec.NodeSelector["node-role/cache"] != "true" {
		t.Errorf("default nodeSelector = %v, want node-role/cache=true", ds.Spec.Template.Spec.NodeSelector)
	}
	if c.Image != "ghcr.io/hotsniff/hotsniff:"+chartAppVersion(t) {
		t.Errorf("image = %q", c.Image)
	}
	if !slices.Equal(c.Args, []string{"run", "--config", configPath}) {
		t.Errorf("args = %q", c.Args)
	}
	for _, e := range c.Env {
		if e.Name == "HOTSNIFF_REDIS_URL" {
			t.Error("no Redis URL configured, yet HOTSNIFF_REDIS_URL is set")
		}
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Error("a memory limit is expected by default")
	}
	if !c.Resources.Limits.Cpu().IsZero() {
		t.Error("no CPU limit by default: throttling overflows the capture ring")
	}

	want := map[string]any{
		"capture":  "auto",
		"port":     []any{"redis=6379", "memcache=11211", "tair=5191"},
		"hot-qps":  1000,
		"detector": "default",
		"channel":  "hotsniff:hotkeys",
		"listen":   ":9464",
		// auto without interfaces may capture at the host's cgroup root.
		"cgroup-path": "/host/sys/fs/cgroup",
	}
	if fmt.Sprint(cfg) != fmt.Sprint(want) {
		t.Errorf("config = %v\nwant     %v", cfg, want)
	}
}

func TestFullValues(t *testing.T) {
	t.Parallel()
	m := render(t, "-f", filepath.Join(chartDir, "ci", "full-values.yaml"))
	ds, c, cfg := checkCommon(t, m)
	pod := ds.Spec.Template.Spec

	if got, want := capsOf(c), []string{"NET_RAW", "SYS_RESOURCE"}; !slices.Equal(got, want) {
		t.Errorf("afpacket + extraCapabilities = %v, want %v", got, want)
	}
	if c.Image != "registry.example.com/sre/hotsniff:1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image = %q %q", c.Image, c.ImagePullPolicy)
	}
	if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets = %v", pod.ImagePullSecrets)
	}
	if !slices.Equal(c.Args, []string{"run", "--config", configPath, "--output", "jsonl"}) {
		t.Errorf("args = %q", c.Args)
	}
	if pod.PriorityClassName != "system-node-critical" || pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 45 {
		t.Errorf("priorityClassName %q, grace %v", pod.PriorityClassName, pod.TerminationGracePeriodSeconds)
	}
	if len(pod.Tolerations) != 2 || pod.Tolerations[0].Key != "dedicated" || pod.Tolerations[1].TolerationSeconds == nil {
		t.Errorf("tolerations = %+v", pod.Tolerations)
	}
	if pod.Affinity == nil || pod.Affinity.NodeAffinity == nil {
		t.Error("affinity missing")
	}
	if _, ok := pod.NodeSelector["node-role/cache"]; ok || pod.NodeSelector["workload"] != "redis" {
		t.Errorf("nodeSelector = %v, want the default key removed and workload=redis", pod.NodeSelector)
	}
	if ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String() != "10%" {
		t.Errorf("maxUnavailable = %v", ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable)
	}
	ann := ds.Spec.Template.Annotations
	if ann["example.com/scrape"] != "true" || ann["checksum/config"] == "" || ann["checksum/secret"] == "" {
		t.Errorf("pod annotations = %v", ann)
	}
	if ds.Spec.Template.Labels["team"] != "sre" {
		t.Errorf("pod labels = %v", ds.Spec.Template.Labels)
	}
	if c.LivenessProbe.PeriodSeconds != 15 || c.ReadinessProbe.FailureThreshold != 2 {
		t.Errorf("probe timings not taken from values")
	}

	// The Redis URL comes from the Secret the chart created.
	url := envFromSecret(t, c, "HOTSNIFF_REDIS_URL")
	var secret *corev1.Secret
	for _, s := range m.Secrets {
		if s.Name == url.Name {
			secret = s
		}
	}
	if secret == nil {
		t.Fatalf("HOTSNIFF_REDIS_URL refers to Secret %q, which is not rendered", url.Name)
	}
	if got := string(secret.Data[url.Key]); got != "redis://hotsniff:s3cret@redis-pubsub.cache.svc:6379/0" {
		t.Errorf("Secret %s[%s] = %q", secret.Name, url.Key, got)
	}
	for _, cm := range m.ConfigMaps {
		for k, v := range cm.Data {
			if strings.Contains(v, "s3cret") {
				t.Errorf("password leaked into ConfigMap %s key %s", cm.Name, k)
			}
		}
	}

	// Config file: every value reaches it under the flag name.
	want := map[string]any{
		"capture":    "afpacket",
		"iface":      []any{"eth0", "bond0"},
		"ring-size":  67108864,
		"max-cpu":    0.05,
		"reply-copy": 1024,
		"port":       []any{"redis=6379", "redis=6380", "memcache=11211", "tair=5191"},
		"hot-qps":    2500,
		"detector":   "default",
		"channel":    "sre:hotkeys",
		"listen":     ":19464",
		"rules": []any{
			map[string]any{"pattern": "session:*", "hot_qps": 5000, "proto": "redis"},
			map[string]any{"pattern": "cfg:*:flag", "hot_qps": 200},
		},
		"ignore":    []any{"health*", "lock:*"},
		"ttl":       "60s",
		"max-flows": 200000,
	}
	if fmt.Sprint(cfg) != fmt.Sprint(want) {
		t.Errorf("config = %v\nwant     %v", cfg, want)
	}

	// Service, ServiceMonitor and dashboard.
	if len(m.Services) != 1 || m.Services[0].Spec.ClusterIP == corev1.ClusterIPNone ||
		m.Services[0].Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("want one ClusterIP Service with the annotations")
	}
	if len(m.ServiceMonitors) != 1 {
		t.Fatalf("want one ServiceMonitor, got %d", len(m.ServiceMonitors))
	}
	sm := m.ServiceMonitors[0]
	if sm.Namespace != "monitoring" || sm.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor %s/%s labels %v", sm.Namespace, sm.Name, sm.Labels)
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor namespaceSelector = %v", sm.Spec.NamespaceSelector.MatchNames)
	}
	smSel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || !smSel.Matches(labels.Set(m.Services[0].Labels)) {
		t.Errorf("ServiceMonitor selector does not match the Service labels")
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("want one endpoint")
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != m.Services[0].Spec.Ports[0].Name || ep.Path != "/metrics" || ep.Interval != "15s" || !ep.HonorLabels {
		t.Errorf("endpoint = %+v", ep)
	}
	if len(ep.Relabelings) != 2 || ep.Relabelings[0].TargetLabel != "instance" ||
		!slices.Equal(ep.Relabelings[0].SourceLabels, []string{"__meta_kubernetes_pod_node_name"}) {
		t.Errorf("relabelings = %+v, want instance=node name first", ep.Relabelings)
	}
	if len(ep.MetricRelabelings) != 1 || ep.MetricRelabelings[0].Action != "drop" {
		t.Errorf("metricRelabelings = %+v", ep.MetricRelabelings)
	}

	dash := m.configMap(t, "hotsniff-full-dashboard")
	if dash.Namespace != "monitoring" || dash.Labels["grafana_dashboard"] != "1" || dash.Annotations["grafana_folder"] != "Caches" {
		t.Errorf("dashboard ConfigMap %s/%s labels %v annotations %v", dash.Namespace, dash.Name, dash.Labels, dash.Annotations)
	}
	file, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "hotsniff.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := dash.Data["hotsniff.json"]; got != strings.TrimRight(string(file), "\n") {
		t.Error("dashboard ConfigMap does not hold dashboards/hotsniff.json")
	}
	if !json.Valid([]byte(dash.Data["hotsniff.json"])) {
		t.Error("dashboard in the ConfigMap is not valid JSON")
	}

	if len(m.ServiceAccounts) != 1 || m.ServiceAccounts[0].Name != "hotsniff-sa" ||
		m.ServiceAccounts[0].Annotations["example.com/owner"] != "sre" {
		t.Errorf("ServiceAccount not rendered from values")
	}
}

func envFromSecret(t *testing.T, c *corev1.Container, name string) *corev1.SecretKeySelector {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Fatalf("%s must come from a Secret: %+v", name, e)
			}
			ref := e.ValueFrom.SecretKeyRef
			if ref.Optional != nil && *ref.Optional {
				t.Errorf("%s must not be optional", name)
			}
			return ref
		}
	}
	t.Fatalf("no env %s", name)
	return nil
}

func TestCapabilitiesPerMode(t *testing.T) {
	t.Parallel()
	for mode, want := range map[string][]string{
		"xdp":      ebpfCaps,
		"tc":       ebpfCaps,
		"cgroup":   ebpfCaps,
		"afpacket": afpacketCaps,
		"auto":     autoCaps,
	} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			m := render(t, "--set", "capture.mode="+mode)
			_, c, cfg := checkCommon(t, m)
			if got := capsOf(c); !slices.Equal(got, want) {
				t.Errorf("capabilities = %v, want exactly %v", got, want)
			}
			if cfg["capture"] != mode {
				t.Errorf("config capture = %v", cfg["capture"])
			}
		})
	}
}

func TestExistingSecret(t *testing.T) {
	t.Parallel()
	m := render(t, "--set", "redis.existingSecret=cache-redis,redis.existingSecretKey=url,redis.url=redis://ignored:6379")
	_, c, _ := checkCommon(t, m)
	ref := envFromSecret(t, c, "HOTSNIFF_REDIS_URL")
	if ref.Name != "cache-redis" || ref.Key != "url" {
		t.Errorf("secretKeyRef = %s/%s, want cache-redis/url", ref.Name, ref.Key)
	}
	if len(m.Secrets) != 0 {
		t.Errorf("an existing Secret is named, yet the chart creates %d", len(m.Secrets))
	}
}

func TestPrivilegedOptIn(t *testing.T) {
	t.Parallel()
	m := render(t, "--set", "securityContext.privileged=true")
	c := hotsniffContainer(t, m.daemonSet(t))
	// The API server rejects privileged with allowPrivilegeEscalation false.
	if !*c.SecurityContext.Privileged || !*c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("privileged=true must render privileged and allowPrivilegeEscalation true")
	}
}

// TestReplyCopy: capture.replyCopy reaches the config file as reply-copy
// when set, 0 included (copy no reply payload is a setting, not "unset"),
// and the real binary accepts it; left null, hotsniff's default applies.
func TestReplyCopy(t *testing.T) {
	t.Parallel()
	for set, want := range map[string]any{"": nil, "capture.replyCopy=0": 0, "capture.replyCopy=512": 512} {
		var args []string
		if set != "" {
			args = []string{"--set", set}
		}
		_, _, cfg := checkCommon(t, render(t, args...))
		got, ok := cfg["reply-copy"]
		if want == nil && ok || want != nil && got != want {
			t.Errorf("--set %q: config reply-copy = %v (present %v), want %v", set, got, ok, want)
		}
	}
}

// TestSchemaRejects checks values.schema.json stops bad values before they
// reach a cluster.
func TestSchemaRejects(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"mode":            {"--set", "capture.mode=pcap"},
		"port format":     {"--set", "ports[0]=redis:6379"},
		"unknown proto":   {"--set", "ports[0]=mysql=3306"},
		"unknown key":     {"--set", "captureMode=xdp"},
		"typo in nested":  {"--set", "detection.hotQps=5"},
		"chart-owned":     {"--set", "extraConfig.listen=:1"},
		"cap prefix":      {"--set", "securityContext.extraCapabilities={CAP_BPF}"},
		"hot-qps zero":    {"--set", "detection.hotQPS=0"},
		"redis url":       {"--set", "redis.url=http://x"},
		"rule field":      {"--set", "detection.rules[0].pattern=a,detection.rules[0].hotQPS=5"},
		"max unavail":     {"--set", "updateStrategy.maxUnavailable=0"},
		"reply copy":      {"--set", "capture.replyCopy=-1"},
		"reply copy str":  {"--set-string", "capture.replyCopy=4k"},
		"reply via extra": {"--set", "extraConfig.reply-copy=0"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := runHelm(t, append([]string{"template", release, chartDir}, args...)...)
			if err == nil {
				t.Fatalf("helm template %v succeeded; want a schema error", args)
			}
			if !strings.Contains(err.Error(), "schema") && !strings.Contains(err.Error(), "capture.mode") {
				t.Errorf("error does not come from the schema: %v", err)
			}
		})
	}
}

// ---- tests without helm ----------------------------------------------------

func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.AppVersion
}

// TestDashboardCopies: the chart ships the same dashboard as docs/.
func TestDashboardCopies(t *testing.T) {
	docs, err := os.ReadFile(filepath.Join("..", "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "hotsniff.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(docs, chart) {
		t.Fatal("docs/grafana-dashboard.json and helm/hotsniff/dashboards/hotsniff.json differ: copy one onto the other")
	}
}

// TestDashboard checks the dashboard's wiring: the datasource and node
// variables, unique panel ids, and a panel for every metric.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr       string         `json:"expr"`
		Datasource map[string]any `json:"datasource"`
	}
	type panel struct {
		ID         int            `json:"id"`
		Type       string         `json:"type"`
		Title      string         `json:"title"`
		Datasource map[string]any `json:"datasource"`
		Targets    []target       `json:"targets"`
	}
	var d struct {
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" {
		t.Error("dashboard needs a fixed uid")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["instance"] != "query" {
		t.Errorf("variables = %v, want datasource (datasource) and instance (query)", vars)
	}
	ids := map[int]bool{}
	var exprs strings.Builder
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("duplicate panel id %d", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q does not use ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q query ignores the node variable: %s", p.Title, q.Expr)
			}
			if q.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q query does not use ${datasource}", p.Title)
			}
			exprs.WriteString(q.Expr + "\n")
		}
	}
	for _, metric := range []string{
		"hotsniff_packets_total", "hotsniff_capture_dropped_total", "hotsniff_requests_total",
		"hotsniff_keys_total", "hotsniff_decode_errors_total", "hotsniff_stream_gaps_total",
		"hotsniff_hot_keys", "hotsniff_published_total", "hotsniff_publish_errors_total",
		"hotsniff_stream_flows", "hotsniff_stream_buffered_bytes", "hotsniff_stream_lost_bytes_total",
		"hotsniff_publish_queue_dropped_total", "hotsniff_publish_lag_seconds",
		"hotsniff_detection_latency_seconds_bucket", "hotsniff_capture_truncated_bytes_total",
		"hotsniff_capture_sample_rate", "hotsniff_cpu_share", "hotsniff_cpu_budget",
		"hotsniff_capture_sampled_out_total", "hotsniff_capture_sample_kernel_steps_total",
		"hotsniff_absorbed_hits_total", "hotsniff_absorbed_reports_total", "hotsniff_absorbed_rejected_total",
		"hotsniff_publish_messages_total", "hotsniff_publish_budget_overflow_total",
		"hotsniff_reply_bytes_total", "hotsniff_reply_unpaired_bytes_total",
		"hotsniff_reply_pairing_dropped_total", "hotsniff_reply_pairing_resets_total", "hotsniff_reply_pairing_held_bytes",
	} {
		if !strings.Contains(exprs.String(), metric+"{") {
			t.Errorf("no panel queries %s", metric)
		}
	}
	if !strings.Contains(exprs.String(), `hotsniff_published_total{instance=~"$instance", type="invalidate"}`) {
		t.Error("no panel shows invalidations")
	}
}

// TestReadmeDocumentsValues: every leaf of values.yaml is in the chart
// README's values table.
func TestReadmeDocumentsValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 && !opaque[prefix] {
			for k, x := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), x)
			}
			return
		}
		if !bytes.Contains(readme, []byte("| `"+prefix+"` |")) {
			t.Errorf("values key %s is not in the README values table", prefix)
		}
	}
	walk("", values)
}

// opaque values are documented as a whole, not key by key.
var opaque = map[string]bool{
	"nodeSelector": true, "resources": true, "podSecurityContext": true, "dashboard.labels": true,
}

// TestRenderedConfigAccepted hands the config file the chart renders, with
// default and with full values, to the real binary's `run --config-check`:
// a value the chart writes under a key or in a form hotsniff does not
// accept would otherwise only show as a crash-looping DaemonSet.
func TestRenderedConfigAccepted(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hotsniff")
	build := exec.Command("go", "build", "-o", bin, "./cmd/hotsniff")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hotsniff: %v: %s", err, out)
	}
	for name, args := range map[string][]string{
		"defaults": nil,
		"full":     {"-f", filepath.Join(chartDir, "ci", "full-values.yaml")},
	} {
		t.Run(name, func(t *testing.T) {
			m := render(t, args...)
			var body string
			for _, c := range m.ConfigMaps {
				if v, ok := c.Data["config.yaml"]; ok {
					body = v
				}
			}
			if body == "" {
				t.Fatal("no config.yaml rendered")
			}
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "run", "--config", path, "--config-check").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "config ok") {
				t.Fatalf("hotsniff rejects the chart's config: %v\n%s\n--- config.yaml\n%s", err, out, body)
			}
		})
	}
}

// TestWebConfig: with webConfig.existingSecret the Secret is mounted
// read-only where the config's web-config points, the probes move to the
// loopback health listener, the ServiceMonitor scrapes with TLS and basic
// auth, and the real binary accepts the rendered config with a web
// configuration at that place.
func TestWebConfig(t *testing.T) {
	m := render(t, "--set", "webConfig.existingSecret=hs-web,webConfig.healthPort=9477,serviceMonitor.enabled=true,serviceMonitor.scheme=https",
		"--set", "serviceMonitor.tlsConfig.ca.secret.name=hs-web,serviceMonitor.tlsConfig.ca.secret.key=ca.crt,serviceMonitor.tlsConfig.serverName=hotsniff",
		"--set", "serviceMonitor.basicAuth.username.name=hs-scrape,serviceMonitor.basicAuth.username.key=username,serviceMonitor.basicAuth.password.name=hs-scrape,serviceMonitor.basicAuth.password.key=password")
	ds, c, cfg := checkCommon(t, m)
	if cfg["web-config"] != "/etc/hotsniff-web/web-config.yml" || cfg["health-listen"] != "127.0.0.1:9477" {
		t.Errorf("config web-config %v, health-listen %v", cfg["web-config"], cfg["health-listen"])
	}
	var mount *corev1.VolumeMount
	for k := range c.VolumeMounts {
		if c.VolumeMounts[k].MountPath == "/etc/hotsniff-web" {
			mount = &c.VolumeMounts[k]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("/etc/hotsniff-web not mounted read-only: %+v", c.VolumeMounts)
	}
	// No mount inside another: the runtime cannot make a mount point in
	// a read-only ConfigMap volume.
	for _, x := range c.VolumeMounts {
		for _, y := range c.VolumeMounts {
			if strings.HasPrefix(x.MountPath, strings.TrimSuffix(y.MountPath, "/")+"/") {
				t.Errorf("%s is mounted inside %s", x.MountPath, y.MountPath)
			}
		}
	}
	found := false
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name {
			found = v.Secret != nil && v.Secret.SecretName == "hs-web" && v.Secret.DefaultMode != nil && *v.Secret.DefaultMode == 0o400
		}
	}
	if !found {
		t.Errorf("volume %s is not Secret hs-web with mode 0400", mount.Name)
	}
	if len(m.ServiceMonitors) != 1 {
		t.Fatalf("%d ServiceMonitors", len(m.ServiceMonitors))
	}
	ep := m.ServiceMonitors[0].Spec.Endpoints[0]
	if ep.Scheme != "https" || fmt.Sprint(ep.TLSConfig["serverName"]) != "hotsniff" || ep.BasicAuth["password"] == nil {
		t.Errorf("ServiceMonitor endpoint scheme %q tlsConfig %v basicAuth %v", ep.Scheme, ep.TLSConfig, ep.BasicAuth)
	}
	// Without a web configuration: plain probes on the metrics port, no
	// mount, scheme http.
	m = render(t, "--set", "serviceMonitor.enabled=true")
	_, c, cfg = checkCommon(t, m)
	if _, ok := cfg["web-config"]; ok {
		t.Error("web-config rendered without webConfig.existingSecret")
	}
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == "/etc/hotsniff-web" {
			t.Error("web config mounted without webConfig.existingSecret")
		}
	}
	if ep := m.ServiceMonitors[0].Spec.Endpoints[0]; ep.Scheme != "http" || ep.TLSConfig != nil || ep.BasicAuth != nil {
		t.Errorf("default ServiceMonitor endpoint %+v", ep)
	}

	// The binary takes the rendered config, with a web configuration
	// where the Secret would be mounted.
	var body string
	for _, cm := range render(t, "--set", "webConfig.existingSecret=hs-web").ConfigMaps {
		if v, ok := cm.Data["config.yaml"]; ok {
			body = v
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "web-config.yml"), []byte("basic_auth_users:\n  sre: $2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(body, "/etc/hotsniff-web/", dir+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.Command("go", "run", "./cmd/hotsniff", "run", "--config", path, "--config-check")
	run.Dir = ".."
	if out, err := run.CombinedOutput(); err != nil || !strings.Contains(string(out), "config ok") {
		t.Fatalf("hotsniff rejects the chart's config: %v\n%s\n--- config.yaml\n%s", err, out, body)
	}
}

// TestCgroupMount: the host's cgroup hierarchy is mounted, read-only, and
// passed as cgroup-path exactly when the mode may capture at the cgroup
// root (cgroup; auto without interfaces), and the capabilities are eBPF's.
func TestCgroupMount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		args  []string
		mount bool
	}{
		{"cgroup", []string{"--set", "capture.mode=cgroup"}, true},
		{"auto", nil, true},
		{"auto with interfaces", []string{"--set", "capture.interfaces={eth0,cali*}"}, false},
		{"tc", []string{"--set", "capture.mode=tc"}, false},
		{"cgroup without mount", []string{"--set", "capture.mode=cgroup", "--set", "capture.cgroupHostPath="}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, tc.args...)
			ds, c, cfg := checkCommon(t, m)
			var vol bool
			for _, v := range ds.Spec.Template.Spec.Volumes {
				if v.HostPath != nil {
					vol = v.HostPath.Path == "/sys/fs/cgroup"
				}
			}
			var mnt bool
			for _, vm := range c.VolumeMounts {
				if vm.MountPath == "/host/sys/fs/cgroup" {
					mnt = vm.ReadOnly
				}
			}
			_, path := cfg["cgroup-path"]
			if vol != tc.mount || mnt != tc.mount || path != tc.mount {
				t.Errorf("hostPath volume %v, read-only mount %v, cgroup-path %v; want all %v", vol, mnt, path, tc.mount)
			}
		})
	}
}
