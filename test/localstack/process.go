package localstack

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one server of the stack, started in its own session (so it
// outlives `localstack up`), logging to <dir>/logs/<name>.log, its PID in
// <dir>/pids/<name>.pid and how it was started in <dir>/pids/<name>.json.
type Process struct {
	Name    string
	PID     int
	Binary  string
	Args    []string
	LogPath string

	pidFile string
	// done is closed when this process (started by us) has exited and was
	// reaped; nil for a process adopted from a PID file.
	done chan struct{}
}

// processSpec is how a process was started, kept to decide whether a live
// process can be reused by a later Up.
type processSpec struct {
	Binary        string   `json:"binary"`
	Args          []string `json:"args"`
	BinaryModTime int64    `json:"binaryModTime"`
	BinarySize    int64    `json:"binarySize"`
	BinarySHA256  string   `json:"binarySHA256"`
}

// sameAs reports whether a process started as old runs what spec would start.
// `go build -o` rewrites an unchanged binary, so a changed modification time
// is checked against the content's hash.
func (spec *processSpec) sameAs(old processSpec) bool {
	if old.Binary != spec.Binary || !slices.Equal(old.Args, spec.Args) || old.BinarySize != spec.BinarySize {
		return false
	}
	if old.BinaryModTime == spec.BinaryModTime {
		spec.BinarySHA256 = old.BinarySHA256
		return true
	}
	sum, err := fileSHA256(spec.Binary)
	if err != nil {
		return false
	}
	spec.BinarySHA256 = sum
	return sum == old.BinarySHA256
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeSpec(pidFile string, spec processSpec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(strings.TrimSuffix(pidFile, ".pid")+".json", b, 0o644)
}

func (s *Stack) pidFile(name string) string {
	return filepath.Join(s.Dir, "pids", name+".pid")
}

// startProcess starts binary with args as process name, unless a live process
// started the same way (same binary file and arguments) is already recorded
// under that name; that one is adopted. A live process started differently
// is stopped first.
func (s *Stack) startProcess(name, binary string, args []string) (*Process, bool, error) {
	binary, err := filepath.Abs(binary)
	if err != nil {
		return nil, false, err
	}
	fi, err := os.Stat(binary)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	spec := processSpec{Binary: binary, Args: args, BinaryModTime: fi.ModTime().UnixNano(), BinarySize: fi.Size()}
	if p := s.adopt(name); p != nil {
		old, err := readSpec(p.pidFile)
		if err == nil && spec.sameAs(old) {
			s.logf("%s already running (pid %d)", name, p.PID)
			_ = writeSpec(p.pidFile, spec) // remember the new modification time
			s.mu.Lock()
			s.procs[name] = p
			s.mu.Unlock()
			return p, true, nil
		}
		s.logf("%s (pid %d) was started differently or its binary changed: restarting it", name, p.PID)
		if err := p.Stop(); err != nil {
			return nil, false, err
		}
	}
	for _, d := range []string{"logs", "pids"} {
		if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o755); err != nil {
			return nil, false, err
		}
	}
	p := &Process{
		Name:    name,
		Binary:  binary,
		Args:    args,
		LogPath: filepath.Join(s.Dir, "logs", name+".log"),
		pidFile: s.pidFile(name),
		done:    make(chan struct{}),
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, false, err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "==== %s: %s %s\n", time.Now().Format(time.RFC3339), binary, strings.Join(args, " "))
	cmd := exec.Command(binary, args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if s.DieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, false, fmt.Errorf("starting %s: %w", name, err)
	}
	p.PID = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	if spec.BinarySHA256 == "" {
		spec.BinarySHA256, _ = fileSHA256(binary)
	}
	if err := errors.Join(
		os.WriteFile(p.pidFile, []byte(strconv.Itoa(p.PID)+"\n"), 0o644),
		writeSpec(p.pidFile, spec),
	); err != nil {
		_ = p.Stop()
		return nil, false, err
	}
	s.mu.Lock()
	s.procs[name] = p
	s.mu.Unlock()
	return p, false, nil
}

// adopt returns the live process recorded under name in the PID files, or nil.
func (s *Stack) adopt(name string) *Process {
	return adoptPIDFile(s.pidFile(name))
}

func adoptPIDFile(pidFile string) *Process {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return nil
	}
	spec, err := readSpec(pidFile)
	if err != nil {
		return nil
	}
	p := &Process{
		Name:    strings.TrimSuffix(filepath.Base(pidFile), ".pid"),
		PID:     pid,
		Binary:  spec.Binary,
		Args:    spec.Args,
		LogPath: filepath.Join(filepath.Dir(filepath.Dir(pidFile)), "logs", strings.TrimSuffix(filepath.Base(pidFile), ".pid")+".log"),
		pidFile: pidFile,
	}
	if !p.Alive() {
		return nil
	}
	return p
}

func readSpec(pidFile string) (processSpec, error) {
	var spec processSpec
	b, err := os.ReadFile(strings.TrimSuffix(pidFile, ".pid") + ".json")
	if err != nil {
		return spec, err
	}
	return spec, json.Unmarshal(b, &spec)
}

// Alive reports whether the process is running. For a process adopted from a
// PID file it also checks that the PID still runs the recorded binary, so a
// reused PID is never mistaken for (or signalled as) one of ours.
func (p *Process) Alive() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	if err := syscall.Kill(p.PID, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	if exe == p.Binary {
		return true
	}
	// /proc/PID/exe is the resolved path: a binary started through a
	// symlink (a worktree linking _output/bin to another's) is still ours.
	resolved, err := filepath.EvalSymlinks(p.Binary)
	return err == nil && exe == resolved
}

// StopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
// kube-apiserver needs about 7 s to shut down.
var StopGrace = 20 * time.Second

// Stop sends SIGTERM to the process, waits up to StopGrace for it to exit,
// then sends SIGKILL. It removes the PID file. Stopping a process that has
// already exited is not an error.
func (p *Process) Stop() error {
	return p.stop(syscall.SIGTERM, StopGrace)
}

// Kill sends SIGKILL at once (a crash, for fault tests).
func (p *Process) Kill() error {
	return p.stop(syscall.SIGKILL, 0)
}

func (p *Process) stop(sig syscall.Signal, grace time.Duration) error {
	defer func() {
		_ = os.Remove(p.pidFile)
		_ = os.Remove(strings.TrimSuffix(p.pidFile, ".pid") + ".json")
	}()
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s (pid %d): %w", p.Name, p.PID, err)
	}
	if p.wait(grace) {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s (pid %d): %w", p.Name, p.PID, err)
	}
	if !p.wait(10 * time.Second) {
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.PID)
	}
	return nil
}

// wait waits up to d for the process to exit.
func (p *Process) wait(d time.Duration) bool {
	if p.done != nil {
		select {
		case <-p.done:
			return true
		case <-time.After(d):
			return false
		}
	}
	deadline := time.Now().Add(d)
	for {
		if !p.Alive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Exited returns a channel closed when a process started by this Stack has
// exited (nil for an adopted one).
func (p *Process) Exited() <-chan struct{} { return p.done }

// LogTail returns the last n bytes of the process's log.
func (p *Process) LogTail(n int64) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}
