package cachebudget

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path relative to root: content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		f := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
)

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    map[string]string
		want     int64
		wantFile string // suffix
	}{
		{
			name: "v2 in its own cgroup namespace: the mount's root",
			files: map[string]string{
				"proc/self/cgroup":                 "0::/\n",
				"sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
				"sys/fs/cgroup/memory.max":         "1073741824\n",
			},
			want: gi, wantFile: "sys/fs/cgroup/memory.max",
		},
		{
			name: "v2 unlimited",
			files: map[string]string{
				"proc/self/cgroup":                 "0::/\n",
				"sys/fs/cgroup/cgroup.controllers": "memory\n",
				"sys/fs/cgroup/memory.max":         "max\n",
			},
		},
		{
			name: "v2 without a cgroup namespace: the process's path, and a parent's smaller limit binds",
			files: map[string]string{
				"proc/self/cgroup":                              "0::/kubepods/pod1/c1\n",
				"sys/fs/cgroup/cgroup.controllers":              "memory\n",
				"sys/fs/cgroup/kubepods/memory.max":             "max\n",
				"sys/fs/cgroup/kubepods/pod1/memory.max":        "536870912\n",
				"sys/fs/cgroup/kubepods/pod1/c1/memory.max":     "1073741824\n",
				"sys/fs/cgroup/kubepods/pod1/c2/memory.max":     "1000\n",
				"sys/fs/cgroup/kubepods/pod1/c1/memory.current": "1000\n",
			},
			want: 512 * mi, wantFile: "sys/fs/cgroup/kubepods/pod1/memory.max",
		},
		{
			name: "v2, the path from /proc/self/cgroup not mounted here: the mount's root",
			files: map[string]string{
				"proc/self/cgroup":                 "0::/elsewhere\n",
				"sys/fs/cgroup/cgroup.controllers": "memory\n",
				"sys/fs/cgroup/memory.max":         "2147483648",
			},
			want: 2 * gi, wantFile: "sys/fs/cgroup/memory.max",
		},
		{
			name: "v1, the container's cgroup as the mount's root",
			files: map[string]string{
				"proc/self/cgroup":                           "12:memory:/kubepods/burstable/pod1/abc\n11:cpu,cpuacct:/kubepods\n0::/\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "805306368\n",
				"sys/fs/cgroup/memory/memory.stat":           "cache 0\nhierarchical_memory_limit 805306368\n",
			},
			want: 768 * mi, wantFile: "sys/fs/cgroup/memory/memory.limit_in_bytes",
		},
		{
			name: "v1 unlimited (the page counter's maximum)",
			files: map[string]string{
				"proc/self/cgroup":                                           "4:memory:/process_api/f65\n0::/\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":                 "9223372036854771712\n",
				"sys/fs/cgroup/memory/process_api/f65/memory.limit_in_bytes": "9223372036854771712\n",
				"sys/fs/cgroup/memory/process_api/f65/memory.stat":           "hierarchical_memory_limit 9223372036854771712\n",
				"sys/fs/cgroup/unified/cgroup.controllers":                   "",
			},
		},
		{
			name: "v1, a parent's limit from hierarchical_memory_limit",
			files: map[string]string{
				"proc/self/cgroup":                               "4:memory:/a/b\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":     "9223372036854771712\n",
				"sys/fs/cgroup/memory/a/b/memory.limit_in_bytes": "9223372036854771712\n",
				"sys/fs/cgroup/memory/a/b/memory.stat":           "rss 1\nhierarchical_memory_limit 268435456\n",
			},
			want: 256 * mi, wantFile: "memory.stat hierarchical_memory_limit",
		},
		{
			name:  "no cgroup file system",
			files: map[string]string{"proc/self/cgroup": "0::/\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.files)
			got, file, err := CgroupMemoryLimit(root)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || !strings.HasSuffix(filepath.ToSlash(file), tc.wantFile) || (tc.want == 0) != (file == "") {
				t.Fatalf("got %d from %q, want %d from …%s", got, file, tc.want, tc.wantFile)
			}
		})
	}
}

func TestCgroupMemoryLimitUnreadable(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/self/cgroup":                 "0::/\n",
		"sys/fs/cgroup/cgroup.controllers": "memory\n",
		"sys/fs/cgroup/memory.max":         "lots\n",
	})
	if got, _, err := CgroupMemoryLimit(root); got != 0 || err == nil {
		t.Fatalf("a garbled memory.max: %d, %v", got, err)
	}
}

// TestMaxBytesFormula: --max-cache-bytes' default is an eighth of the
// smaller of the cgroup's limit and GOMEMLIMIT, 256Mi with neither; the
// issue's two pods: 100,000 CRD objects (383 MB as held) fit the budget of
// an 8 GiB pod and not that of a 1 GiB one.
func TestMaxBytesFormula(t *testing.T) {
	for _, tc := range []struct {
		m    Memory
		want int64
	}{
		{Memory{}, 256 * mi},
		{Memory{Cgroup: 8 * gi}, gi},
		{Memory{Cgroup: gi}, 128 * mi},
		{Memory{Cgroup: 512 * mi}, 64 * mi},
		{Memory{Cgroup: 1000 * mi}, 125 * mi},
		{Memory{Cgroup: 1001 * mi}, 125 * mi}, // rounded down to a MiB
		{Memory{GoLimit: 64 * mi}, 8 * mi},
		{Memory{Cgroup: 8 * gi, GoLimit: 2 * gi}, 256 * mi},
		{Memory{Cgroup: gi, GoLimit: 2 * gi}, 128 * mi},
		{Memory{Cgroup: 4 << 20}, 512 << 10}, // below 8 MiB: not rounded
	} {
		if got := tc.m.MaxBytes(); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.m, Bytes(got), Bytes(tc.want))
		}
	}
	const crd = 383_000_000
	if b := (Memory{Cgroup: 8 * gi}).MaxBytes(); b < crd {
		t.Errorf("8Gi: %s does not hold the CRD", Bytes(b))
	}
	if b := (Memory{Cgroup: gi}).MaxBytes(); b >= crd {
		t.Errorf("1Gi: %s would admit the CRD", Bytes(b))
	}
	if s := (Memory{Cgroup: gi, CgroupFile: "/sys/fs/cgroup/memory.max", GoLimit: 2 * gi}).Source(); s != "cgroup /sys/fs/cgroup/memory.max" {
		t.Errorf("source %q", s)
	}
	if s := (Memory{Cgroup: 2 * gi, GoLimit: gi}).Source(); s != "GOMEMLIMIT" {
		t.Errorf("source %q", s)
	}
}

func TestGoLimitFor(t *testing.T) {
	if got := (Memory{Cgroup: gi}).GoLimitFor(""); got != 921*mi {
		t.Errorf("no GOMEMLIMIT: %d", got)
	}
	if got := (Memory{Cgroup: gi}).GoLimitFor("off"); got != 0 {
		t.Errorf("GOMEMLIMIT=off: %d", got)
	}
	if got := (Memory{Cgroup: gi, GoLimit: 900 * mi}).GoLimitFor("900MiB"); got != 0 {
		t.Errorf("GOMEMLIMIT set: %d", got)
	}
	if got := (Memory{}).GoLimitFor(""); got != 0 {
		t.Errorf("no cgroup limit: %d", got)
	}
}

// TestReadMemoryHere reads this machine's limits: whatever they are, no
// error (a machine without cgroups has no limit).
func TestReadMemoryHere(t *testing.T) {
	m, err := ReadMemory("/")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup limit %d (%s), GOMEMLIMIT %d: --max-cache-bytes would default to %s", m.Cgroup, m.CgroupFile, m.GoLimit, Bytes(m.MaxBytes()))
}
