package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// docBlock is a fenced block of docs/indexpolicy.md's worked example,
// marked by an HTML comment `<!-- docexample: name -->` on the line before.
type docBlock struct {
	name, lang, text string
}

// docExampleBlock matches a marked block: sh blocks are pasted as they are,
// console blocks are `$ command` lines each followed by what it prints,
// text blocks are a line the server writes.
var docExampleBlock = regexp.MustCompile("(?s)<!-- docexample: ([a-z-]+) -->\n```([a-z]+)\n(.*?)\n```\n")

// The example's walk-through, in the order a reader pastes it, and the
// blocks that show what the server writes in other states (its section on
// read access).
var (
	docExampleWalk   = []string{"shell", "crd", "rbac", "policy", "ready", "objects", "status", "stats", "informer-read", "metrics", "kubectl-reads", "cleanup"}
	docExampleStates = []string{"pregrant", "nocrd", "notestablished"}
)

func docExampleBlocks(doc string) (map[string]docBlock, []string, error) {
	blocks := map[string]docBlock{}
	var order []string
	for _, m := range docExampleBlock.FindAllStringSubmatch(doc, -1) {
		b := docBlock{name: m[1], lang: m[2], text: m[3]}
		if _, dup := blocks[b.name]; dup {
			return nil, nil, fmt.Errorf("block %q marked twice", b.name)
		}
		blocks[b.name] = b
		order = append(order, b.name)
	}
	return blocks, order, nil
}

// consoleStep is one `$ command` of a console block and the lines it prints.
type consoleStep struct {
	cmd  string
	want []string
}

func consoleSteps(b docBlock) ([]consoleStep, error) {
	var steps []consoleStep
	for _, line := range strings.Split(b.text, "\n") {
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			steps = append(steps, consoleStep{cmd: cmd})
			continue
		}
		if len(steps) == 0 {
			return nil, fmt.Errorf("block %s: output before the first $ command: %q", b.name, line)
		}
		steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("block %s has no $ command", b.name)
	}
	return steps, nil
}

// heredoc is the document a sh block feeds kubectl apply (<<'EOF' … EOF).
func heredoc(b docBlock) (string, error) {
	_, rest, ok := strings.Cut(b.text, "<<'EOF'\n")
	if !ok {
		return "", fmt.Errorf("block %s has no <<'EOF' document", b.name)
	}
	body, _, ok := strings.Cut(rest, "\nEOF")
	if !ok {
		return "", fmt.Errorf("block %s: its document does not end with EOF", b.name)
	}
	return body, nil
}

// age is the AGE column kubectl prints last (7s, 40s, 2m5s, 3h), the one
// part of a table that differs from run to run.
var age = regexp.MustCompile(`(?m)(\s)\d+[smhd](\d+[smh])?$`)

func normalizeOutput(lines []string) string {
	return age.ReplaceAllString(strings.Join(lines, "\n"), "${1}<age>")
}

// docShell runs sh blocks and console commands of the example in a
// directory laid out as the repository after `make up`: _output/local is
// the e2e stack's directory, _output/bin the stack's binaries (kubectl).
type docShell struct {
	t       *testing.T
	dir     string
	prelude string // the shell block: KUBECONFIG and PATH
	port    string // the e2e stack's index-apiserver, for make up's 127.0.0.1:6444
}

func (s *docShell) run(ctx context.Context, script string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	// make up's index-apiserver listens on 6444 (INDEX_APISERVER_PORT);
	// the e2e stack's on a free port.
	script = strings.ReplaceAll(script, "127.0.0.1:6444", s.port)
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", s.prelude+"\n"+script)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "HOME="+s.dir) // kubectl's discovery cache
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// sh runs a sh block as pasted; it must succeed.
func (s *docShell) sh(ctx context.Context, b docBlock) {
	s.t.Helper()
	out, errOut, err := s.run(ctx, b.text)
	if err != nil {
		s.t.Fatalf("block %s: %v\n%s%s", b.name, err, out, errOut)
	}
	s.t.Logf("block %s:\n%s", b.name, out)
}

// console runs each command of a console block once and compares what it
// prints with the block.
func (s *docShell) console(ctx context.Context, b docBlock) {
	s.t.Helper()
	steps, err := consoleSteps(b)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, st := range steps {
		got, errOut, err := s.run(ctx, st.cmd)
		if err != nil {
			s.t.Errorf("block %s: $ %s: %v\n%s%s", b.name, st.cmd, err, got, errOut)
			continue
		}
		if g, w := normalizeOutput(strings.Split(strings.TrimSuffix(got, "\n"), "\n")), normalizeOutput(st.want); g != w {
			s.t.Errorf("block %s: $ %s\nprints:\n%s\nthe doc shows:\n%s", b.name, st.cmd, got, strings.Join(st.want, "\n"))
		}
	}
}

// until runs cmd until what it prints (passed through keep) is want, for a
// state the server reaches a moment after the step before.
func (s *docShell) until(ctx context.Context, what, cmd string, keep func(string) string, want string) {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var got string
	for {
		out, errOut, err := s.run(ctx, cmd)
		got = keep(strings.TrimSuffix(out, "\n"))
		if err == nil && got == want {
			return
		}
		if err != nil {
			got += "\n" + err.Error() + ": " + errOut
		}
		if time.Now().After(deadline) {
			s.t.Errorf("%s: $ %s\nprints (for 90 s):\n%s\nthe doc shows:\n%s", what, cmd, got, want)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// untilConsole is until for a console block of one command.
func (s *docShell) untilConsole(ctx context.Context, b docBlock) {
	s.t.Helper()
	steps, err := consoleSteps(b)
	if err != nil {
		s.t.Fatal(err)
	}
	if len(steps) != 1 {
		s.t.Fatalf("block %s: %d commands, want 1", b.name, len(steps))
	}
	s.until(ctx, "block "+b.name, steps[0].cmd, func(s string) string { return s }, strings.Join(steps[0].want, "\n"))
}

// TestIndexPolicyDocExample runs docs/indexpolicy.md's worked example
// ("Example, step by step") on the e2e stack, which is `make up`'s
// (test/localstack): its sh blocks as a reader pastes them (kubectl apply of
// the CRD, the grant, the policy and the objects, so they carry what
// kubectl writes, as the doc's status shows), and its console blocks'
// commands, whose output must be what the doc shows (the AGE column aside).
// So the conditions' reasons and messages, the status' statistics after the
// stats interval, the reads through kubeconfig-indexed (names and printer
// columns) and the metrics lines are the server's. It also brings about the
// states the section on read access quotes, before the reader's order: the
// policy written before its CRD exists (nocrd), a CRD not established (a
// second CRD whose kind and list kind conflict with the example's, so it
// never is: notestablished, its name in place of the example's), and the
// CRD without the grant (pregrant); then the grant, and the walk-through
// from there. Every marked block is used, and the walk-through's blocks
// must stand in the order the test pastes them.
func TestIndexPolicyDocExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "indexpolicy.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, order, err := docExampleBlocks(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var walk []string
	for _, name := range order {
		if !slices.Contains(docExampleStates, name) {
			walk = append(walk, name)
		}
	}
	if !slices.Equal(walk, docExampleWalk) {
		t.Fatalf("docs/indexpolicy.md's example has the blocks %v, in this order; the test runs %v (then %v)", order, docExampleWalk, docExampleStates)
	}
	for _, name := range docExampleStates {
		if _, ok := blocks[name]; !ok {
			t.Fatalf("docs/indexpolicy.md has no block marked docexample: %s", name)
		}
	}
	for name, b := range blocks {
		want := "console"
		switch name {
		case "shell", "crd", "rbac", "policy", "objects", "cleanup":
			want = "sh"
		case "notestablished":
			want = "text"
		}
		if b.lang != want {
			t.Fatalf("block %s is ```%s, want ```%s", name, b.lang, want)
		}
	}

	// The CRD's and the policy's names, from the doc.
	var crd, policy struct {
		Metadata struct{ Name string }
		Spec     struct {
			Group string
			Names struct{ Plural, Singular string }
		}
	}
	for _, d := range []struct {
		block string
		into  any
	}{{"crd", &crd}, {"policy", &policy}} {
		doc, err := heredoc(blocks[d.block])
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal([]byte(doc), d.into); err != nil {
			t.Fatalf("block %s: %v", d.block, err)
		}
	}
	if crd.Metadata.Name == "" || policy.Metadata.Name == "" {
		t.Fatalf("the CRD block names %q, the policy block %q", crd.Metadata.Name, policy.Metadata.Name)
	}

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "_output"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"local": stackDir, "bin": filepath.Join(repoRoot, "_output", "bin")} {
		if err := os.Symlink(target, filepath.Join(dir, "_output", link)); err != nil {
			t.Fatal(err)
		}
	}
	sh := &docShell{t: t, dir: dir, prelude: blocks["shell"].text, port: strings.TrimPrefix(indexAPIServerURL, "https://")}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// A CRD in the example's group whose kind and list kind are the
	// example's: its names are not accepted, so it is never established.
	otherPlural := "other" + crd.Spec.Names.Plural
	otherCRD := otherPlural + "." + crd.Spec.Group
	otherPolicy := "docexample-other"
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	policyGVR := schema.GroupVersionResource{Group: "config.indexing.k8s.io", Version: "v1alpha1", Resource: "indexpolicies"}
	removeAll := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, errOut, err := sh.run(ctx, blocks["cleanup"].text); err != nil {
			t.Errorf("block cleanup: %v\n%s%s", err, out, errOut)
		}
		for _, d := range []struct {
			gvr  schema.GroupVersionResource
			name string
		}{{policyGVR, otherPolicy}, {crdGVR, otherCRD}} {
			if err := stack.Dynamic.Resource(d.gvr).Delete(ctx, d.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", d.name, err)
			}
		}
		// A CRD goes once its objects are deleted.
		for _, name := range []string{crd.Metadata.Name, otherCRD} {
			for {
				_, err := stack.Dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					break
				}
				if ctx.Err() != nil {
					t.Errorf("CRD %s still there: %v", name, err)
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	removeAll() // what an earlier run in this stack left
	t.Cleanup(removeAll)

	sh.sh(ctx, blocks["shell"])

	// The policy before its CRD exists.
	sh.sh(ctx, blocks["policy"])
	sh.untilConsole(ctx, blocks["nocrd"])

	// The CRD, not granted yet.
	sh.sh(ctx, blocks["crd"])
	sh.untilConsole(ctx, blocks["pregrant"])

	// A CRD that is not established, named in the doc's line in place of
	// the example's.
	other := &unstructured.Unstructured{}
	doc, _ := heredoc(blocks["crd"])
	if err := yaml.Unmarshal([]byte(doc), &other.Object); err != nil {
		t.Fatal(err)
	}
	other.SetName(otherCRD)
	if err := unstructured.SetNestedField(other.Object, otherPlural, "spec", "names", "plural"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(other.Object, "other"+crd.Spec.Names.Singular, "spec", "names", "singular"); err != nil {
		t.Fatal(err)
	}
	otherJSON, err := other.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := stack.ApplyYAML(ctx, otherJSON); err != nil {
		t.Fatal(err)
	}
	if err := stack.ApplyYAML(ctx, []byte(fmt.Sprintf(`{"apiVersion": "config.indexing.k8s.io/v1alpha1", "kind": "IndexPolicy",
		"metadata": {"name": %q}, "spec": {"resource": %q}}`, otherPolicy, otherCRD))); err != nil {
		t.Fatal(err)
	}
	pregrant, err := consoleSteps(blocks["pregrant"])
	if err != nil {
		t.Fatal(err)
	}
	readyLine := func(out string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "Ready=") {
				return l
			}
		}
		return out
	}
	sh.until(ctx, "block notestablished (CRD "+otherCRD+")",
		strings.ReplaceAll(pregrant[0].cmd, policy.Metadata.Name, otherPolicy), readyLine,
		strings.ReplaceAll(blocks["notestablished"].text, crd.Metadata.Name, otherCRD))
	if t.Failed() {
		return
	}

	// The grant, and the walk-through from there as the doc has it.
	for _, name := range docExampleWalk[2:] {
		switch b := blocks[name]; {
		case name == "cleanup":
		case b.lang == "sh":
			sh.sh(ctx, b)
		default:
			sh.console(ctx, b)
		}
	}
}
