package server

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
)

// TestBudgetFlagsDeriveFromTheMemoryLimit: without --max-cache-bytes the
// budget is an eighth of the cgroup's memory limit (read under CgroupRoot),
// and Go's memory limit is set to 90% of it; a given flag wins, 0 included.
func TestBudgetFlagsDeriveFromTheMemoryLimit(t *testing.T) {
	if cachebudget.GoMemoryLimit() != 0 || os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set for the test process")
	}
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	root := t.TempDir()
	for f, content := range map[string]string{
		"proc/self/cgroup":                 "0::/\n",
		"sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
		"sys/fs/cgroup/memory.max":         "2147483648\n",
	} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	parseOnly := func(args ...string) BudgetOptions {
		t.Helper()
		o := NewOptions().Budget
		o.CgroupRoot = root
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return o
	}
	parse := func(args ...string) BudgetOptions {
		t.Helper()
		o := parseOnly(args...)
		if errs := o.Validate(); len(errs) > 0 {
			t.Fatal(errs)
		}
		return o
	}

	o := parse()
	if b := o.Budget(); b.MaxBytes != 256<<20 || b.MaxResources != DefaultMaxCachedResources {
		t.Fatalf("2Gi limit: %+v, want 256Mi", b)
	}
	if got := cachebudget.GoMemoryLimit(); got != 1843<<20 {
		t.Fatalf("Go's memory limit %d, want 90%% of 2Gi", got)
	}
	debug.SetMemoryLimit(math.MaxInt64)

	o = parse("--max-cache-bytes=3Gi")
	t.Setenv("GOMEMLIMIT", "1Gi") // as if the runtime had read it: it is not read again
	debug.SetMemoryLimit(1 << 30)
	if b := o.Budget(); b.MaxBytes != 3<<30 {
		t.Fatalf("given: %+v", b)
	}
	o = parse("--max-cache-bytes=0")
	if b := o.Budget(); b.MaxBytes != 0 {
		t.Fatalf("0 given (no budget): %+v", b)
	}
	// GOMEMLIMIT smaller than the cgroup's limit: an eighth of it, and Go's
	// limit is left as GOMEMLIMIT set it.
	o = parse()
	if b := o.Budget(); b.MaxBytes != 128<<20 || cachebudget.GoMemoryLimit() != 1<<30 {
		t.Fatalf("GOMEMLIMIT=1Gi: %+v, Go's limit %d", b, cachebudget.GoMemoryLimit())
	}
	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(math.MaxInt64)
	o = parse()
	o.CgroupRoot = t.TempDir() // no cgroup at all
	if b := o.Budget(); b.MaxBytes != cachebudget.FallbackMaxBytes || cachebudget.GoMemoryLimit() != 0 {
		t.Fatalf("no limit: %+v, Go's limit %d", b, cachebudget.GoMemoryLimit())
	}

	fs := pflag.NewFlagSet("help", pflag.ContinueOnError)
	(&BudgetOptions{}).AddFlags(fs)
	usage := fs.FlagUsages()
	for _, want := range []string{"Default: 1/8 of the memory the server may use", "GOMEMLIMIT", "256Mi when neither is set", "90% of the cgroup's limit"} {
		if !strings.Contains(usage, want) {
			t.Errorf("--help lacks %q:\n%s", want, usage)
		}
	}
	own := usage[strings.Index(usage, "--max-cache-bytes "):]
	own = own[:strings.Index(own, "--max-cached-resources")]
	if strings.Contains(own, "(default ") {
		t.Errorf("--max-cache-bytes prints a fixed default:\n%s", own)
	}
	o = parseOnly("--max-cache-bytes=-1")
	if errs := o.Validate(); len(errs) == 0 {
		t.Error("a negative --max-cache-bytes passed validation")
	}
}
