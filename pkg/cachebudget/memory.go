package cachebudget

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// The default bytes budget is a share of the memory the server may use.
//
// Why an eighth: the caches the budget counts grow the server's RSS by
// 3.0–3.6 times the bytes it counts (kube-apiserver's JSON as held; the rest
// is indexes, the event window, decoded metadata, Go's heap headroom), and
// its live heap by 1.9–2.2 times (CRD runs of 2026-11-26 19:00 to 2026-11-27
// 00:52 on 2 CPUs, docs/benchmarks.md, "Budgets that fit the pod" in
// docs/deploy.md). A full budget then takes at most 45% of the memory limit,
// leaving the rest to what no budget counts: pods and nodes (11.6–16.2 KiB
// of RSS per realistic pod), open watches (75–90 KiB of RSS each), requests
// in flight (a whole LIST moves up to 64 MiB into packs) and the process
// itself (86–103 MiB). A quarter would let a full budget reach 75–90% of
// the limit before any pod: an out-of-memory kill, not a refusal.
const (
	// ShareDenominator: --max-cache-bytes defaults to the memory limit
	// divided by it, rounded down to a MiB.
	ShareDenominator = 8
	// FallbackMaxBytes is the default when the server has no memory limit
	// at all (no cgroup limit, no GOMEMLIMIT).
	FallbackMaxBytes = 256 << 20
	// GoLimitPercent: without GOMEMLIMIT, Go's memory limit is set to this
	// share of the cgroup's limit, so that the garbage collector works
	// harder before the kernel kills the process; the rest is for memory
	// Go does not count (and RSS it has not yet given back).
	GoLimitPercent = 90
)

// noLimit: a cgroup limit this large is no limit (cgroup v1 writes
// 9223372036854771712 for "unlimited").
const noLimit = 1 << 60

// Memory is what the server may use: its cgroup's memory limit and Go's
// memory limit (GOMEMLIMIT), each 0 when there is none.
type Memory struct {
	Cgroup int64
	// CgroupFile is the file Cgroup was read from; empty when none was
	// found or none set a limit.
	CgroupFile string
	// GoLimit is Go's memory limit as the runtime read it from GOMEMLIMIT
	// (before SetGoLimit changes it).
	GoLimit int64
}

// ReadMemory reads the cgroup's memory limit under root (the file system's
// root, "/" but in tests) and Go's memory limit where GOMEMLIMIT sets it
// (not one SetGoLimit set: reading again gives the same answer). A cgroup
// that cannot be read is no limit, with the error for the log.
func ReadMemory(root string) (Memory, error) {
	limit, file, err := CgroupMemoryLimit(root)
	m := Memory{Cgroup: limit, CgroupFile: file}
	if os.Getenv("GOMEMLIMIT") != "" {
		m.GoLimit = GoMemoryLimit()
	}
	return m, err
}

// GoMemoryLimit is Go's memory limit now; 0 when unset (math.MaxInt64).
func GoMemoryLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return l
	}
	return 0
}

// Limit is the memory the server may use: the smaller of the cgroup's
// limit and GOMEMLIMIT, 0 when neither is set.
func (m Memory) Limit() int64 {
	switch {
	case m.Cgroup > 0 && m.GoLimit > 0:
		return min(m.Cgroup, m.GoLimit)
	case m.Cgroup > 0:
		return m.Cgroup
	default:
		return max(m.GoLimit, 0)
	}
}

// Source says where Limit comes from, for the log.
func (m Memory) Source() string {
	switch l := m.Limit(); {
	case l == 0:
		return "none"
	case m.GoLimit > 0 && l == m.GoLimit:
		return "GOMEMLIMIT"
	default:
		return "cgroup " + m.CgroupFile
	}
}

// MaxBytes is --max-cache-bytes' default: Limit()/ShareDenominator rounded
// down to a MiB (unrounded below 8 MiB), or FallbackMaxBytes without a
// limit.
func (m Memory) MaxBytes() int64 {
	l := m.Limit()
	if l <= 0 {
		return FallbackMaxBytes
	}
	share := l / ShareDenominator
	if r := share &^ (1<<20 - 1); r > 0 {
		return r
	}
	return share
}

// GoLimitFor is the Go memory limit to set when GOMEMLIMIT is unset:
// GoLimitPercent of the cgroup's limit, rounded down to a MiB; 0 (leave it) without a cgroup
// limit or with GOMEMLIMIT set.
func (m Memory) GoLimitFor(gomemlimitEnv string) int64 {
	if gomemlimitEnv != "" || m.Cgroup <= 0 {
		return 0
	}
	l := m.Cgroup / 100 * GoLimitPercent
	if r := l &^ (1<<20 - 1); r > 0 {
		return r
	}
	return l
}

// SetGoLimit sets Go's memory limit to GoLimitFor(os.Getenv("GOMEMLIMIT"))
// when that is not 0, and returns what it set (0: nothing). GOMEMLIMIT=off
// keeps Go without a limit.
func (m Memory) SetGoLimit() int64 {
	l := m.GoLimitFor(os.Getenv("GOMEMLIMIT"))
	if l > 0 {
		debug.SetMemoryLimit(l)
	}
	return l
}

// CgroupMemoryLimit reads the memory limit of the process's cgroup under
// root: cgroup v2's memory.max (the smallest along the path up to the
// mount, since a parent's limit binds its children), or cgroup v1's
// memory.limit_in_bytes and memory.stat's hierarchical_memory_limit. The
// process's cgroup is its line in /proc/self/cgroup; where that path does
// not exist under the mount (a container sees its own cgroup as the
// mount's root) the mount's root is read. "max", or a value of 2^60 bytes
// or more, is no limit: 0, with file empty.
func CgroupMemoryLimit(root string) (limit int64, file string, err error) {
	mount := filepath.Join(root, "sys", "fs", "cgroup")
	v1, v2 := readSelfCgroup(filepath.Join(root, "proc", "self", "cgroup"))
	v1mount := filepath.Join(mount, "memory")
	if exists(filepath.Join(v1mount, "memory.limit_in_bytes")) {
		return v1Limit(v1mount, v1)
	}
	if exists(filepath.Join(mount, "cgroup.controllers")) || exists(filepath.Join(mount, "memory.max")) {
		return v2Limit(mount, v2)
	}
	return 0, "", nil
}

// readSelfCgroup returns the process's memory cgroup path in cgroup v1 and
// its cgroup v2 path ("/" when not found).
func readSelfCgroup(file string) (v1, v2 string) {
	v1, v2 = "/", "/"
	b, err := os.ReadFile(file)
	if err != nil {
		return v1, v2
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	return path.Clean("/" + v1), path.Clean("/" + v2)
}

// dirOf is mount/p when that directory exists, else mount.
func dirOf(mount, p string) string {
	if d := filepath.Join(mount, filepath.FromSlash(p)); p != "/" && exists(d) {
		return d
	}
	return mount
}

func v2Limit(mount, p string) (int64, string, error) {
	var best int64
	var bestFile string
	var errs []error
	for d := dirOf(mount, p); ; d = filepath.Dir(d) {
		f := filepath.Join(d, "memory.max")
		if l, err := readLimit(f); err != nil {
			errs = append(errs, err)
		} else if l > 0 && (best == 0 || l < best) {
			best, bestFile = l, f
		}
		if d == mount || len(d) <= len(mount) {
			break
		}
	}
	return best, bestFile, errors.Join(errs...)
}

func v1Limit(mount, p string) (int64, string, error) {
	d := dirOf(mount, p)
	f := filepath.Join(d, "memory.limit_in_bytes")
	limit, err := readLimit(f)
	file := ""
	if limit > 0 {
		file = f
	}
	// A parent's limit shows in memory.stat (use_hierarchy, the default).
	stat := filepath.Join(d, "memory.stat")
	if h, serr := readStat(stat, "hierarchical_memory_limit"); serr != nil {
		err = errors.Join(err, serr)
	} else if h > 0 && h < noLimit && (limit == 0 || h < limit) {
		limit, file = h, stat+" hierarchical_memory_limit"
	}
	return limit, file, err
}

// readLimit reads a limit file: 0 for "max", a huge value or no file.
func readLimit(f string) (int64, error) {
	b, err := os.ReadFile(f)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" || s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", f, err)
	}
	if v >= noLimit || v == 0 {
		return 0, nil
	}
	return int64(v), nil
}

func readStat(f, key string) (int64, error) {
	b, err := os.ReadFile(f)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", f, key, err)
		}
		if n >= noLimit {
			return 0, nil
		}
		return int64(n), nil
	}
	return 0, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
