package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary be the wire floor process too, as the bench
// binary is (startWireFloor re-executes its own binary).
func TestMain(m *testing.M) {
	if os.Getenv(wireFloorEnv) != "" {
		if err := serveWireFloor(); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWireFloorServesWhatItHolds: the floor process answers a GET with
// exactly the body it was given, gzip-compressed for a client that accepts it
// only above k8s.io/apiserver's threshold, as the servers it stands beside.
func TestWireFloorServesWhatItHolds(t *testing.T) {
	f, err := startWireFloor()
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()
	ctx := context.Background()
	item := `{"kind":"Pod","metadata":{"name":"p"}}`
	items := strings.Repeat(item+",", 3*gzipThreshold/len(item))
	big := []byte(`{"kind":"PodList","items":[` + items + item + `]}`)
	small := []byte(`{"kind":"PodList","items":[]}`)
	for _, c := range []struct {
		name           string
		body           []byte
		gz, compressed bool
	}{
		{"big", big, false, false},
		{"big", big, true, true},
		{"small", small, true, false},
	} {
		if err := f.put(ctx, "/pods-"+c.name, "application/json", c.body); err != nil {
			t.Fatal(err)
		}
		_, wire, compressed, got, err := fullList(ctx, f.client, f.url+"/pods-"+c.name, "json", c.gz, true)
		if err != nil {
			t.Fatalf("%s gzip=%v: %v", c.name, c.gz, err)
		}
		if compressed != c.compressed {
			t.Errorf("%s gzip=%v: compressed=%v, want %v", c.name, c.gz, compressed, c.compressed)
		}
		if !bytes.Equal(got, c.body) {
			t.Errorf("%s gzip=%v: got %d bytes, want the %d put", c.name, c.gz, len(got), len(c.body))
		}
		if !c.compressed && wire != int64(len(c.body)) {
			t.Errorf("%s: %d bytes on the wire, want %d", c.name, wire, len(c.body))
		}
	}
	if _, _, _, _, err := fullList(ctx, f.client, f.url+"/pods-none", "json", false, true); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("GET of a body never put: %v, want 404", err)
	}
}
