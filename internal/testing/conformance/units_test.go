package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hotsniff/hotsniff/internal/testing/netnstest"
)

// TestPythonUnits runs the Python shim's own tests (pytest), so `make test`
// covers them.
func TestPythonUnits(t *testing.T) {
	py := pythonBin()
	if out, err := exec.Command(py, "-c", "import redis, pytest").CombinedOutput(); err != nil {
		netnstest.Skip(t, "%s cannot import redis and pytest (apt-get install python3-redis python3-pytest): %s", py, out)
	}
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Dir = repoDir(t, "python")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+cmd.Dir)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
}

// TestNodeUnits runs the Node shim's own tests (npm test: build, then
// node --test).
func TestNodeUnits(t *testing.T) {
	dir := repoDir(t, "node")
	if _, err := exec.LookPath("npm"); err != nil {
		netnstest.Skip(t, "npm not installed (apt-get install nodejs npm)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		netnstest.Skip(t, "client/node has no node_modules: run `npm ci` there")
	}
	cmd := exec.Command("npm", "test", "--silent")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("npm test: %v", err)
	}
}
