package localstack

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// UpForTest runs Up for one test in a new directory RepoRoot/_output/e2e/<prefix>*
// (cfg.Dir is replaced), with DieWithParent and the test's log (unless
// cfg.Logf is set). The stack is stopped when the test ends and its directory
// removed, unless the test failed: then the test's log says where the stack's
// logs are. A stack that does not come up fails the test.
func UpForTest(ctx context.Context, t testing.TB, prefix string, cfg Config) *Stack {
	t.Helper()
	if cfg.RepoRoot == "" {
		root, err := FindRepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		cfg.RepoRoot = root
	}
	base := filepath.Join(cfg.RepoRoot, "_output", "e2e")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dir = dir
	cfg.DieWithParent = true
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	s, err := Up(ctx, cfg)
	if s != nil {
		t.Cleanup(func() {
			if err := s.Stop(); err != nil {
				t.Errorf("stopping the stack: %v", err)
			}
			if !t.Failed() {
				_ = os.RemoveAll(dir)
			} else {
				t.Logf("logs of the stack are in %s/logs", dir)
			}
		})
	}
	if err != nil {
		t.Fatalf("starting the local stack in %s: %v", dir, err)
	}
	return s
}
