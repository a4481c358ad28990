package cachebudget

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAdmitCountsResources(t *testing.T) {
	b := Budget{MaxResources: 2}
	running := []Usage{{Resource: "configmaps"}}
	if err := b.Admit(running, Candidate{Resource: "jobs.batch"}); err != nil {
		t.Fatalf("the second resource: %v", err)
	}
	running = append(running, Usage{Resource: "jobs.batch"})
	err := b.Admit(running, Candidate{Resource: "widgets.example.com"})
	var ex *Exceeded
	if !errors.As(err, &ex) || ex.Reason() != "OverBudget" || !strings.Contains(err.Error(), "--max-cached-resources=2") ||
		!strings.Contains(err.Error(), "widgets.example.com") {
		t.Fatalf("the third resource: %v", err)
	}
	if err := (Budget{}).Admit(running, Candidate{Resource: "x", Estimate: 1 << 40}); err != nil {
		t.Fatalf("no budget: %v", err)
	}
}

func TestAdmitCountsBytes(t *testing.T) {
	b := Budget{MaxBytes: 1000}
	running := []Usage{{Resource: "configmaps", Bytes: 600}}
	if err := b.Admit(running, Candidate{Resource: "a", Estimate: 400, Objects: 4}); err != nil {
		t.Fatalf("exactly the budget: %v", err)
	}
	err := b.Admit(running, Candidate{Resource: "a", Estimate: 401, Objects: 4})
	if err == nil || !strings.Contains(err.Error(), "4 objects") || !strings.Contains(err.Error(), "--max-cache-bytes=") {
		t.Fatalf("over by one byte: %v", err)
	}
	// A paged estimate that stopped past the room says it is at least that.
	err = b.Admit(running, Candidate{Resource: "a", Estimate: 401, Objects: 2, AtLeast: true})
	if err == nil || !strings.Contains(err.Error(), "at least 401 (2 objects read in pages") {
		t.Fatalf("a paged estimate past the room: %v", err)
	}
	// ...and is refused even where the room has grown since.
	if err := b.Admit(nil, Candidate{Resource: "a", Estimate: 401, Objects: 2, AtLeast: true}); err == nil {
		t.Fatal("a paged estimate that stopped at the room admitted")
	}
	// A resource stopped for the budget comes back only when what it held fits.
	err = b.Admit(running, Candidate{Resource: "a", Estimate: 10, Passed: 500})
	if err == nil || !strings.Contains(err.Error(), "when the caches passed the budget") {
		t.Fatalf("a stopped resource: %v", err)
	}
	if err := b.Admit(running[:0], Candidate{Resource: "a", Estimate: 10, Passed: 500}); err != nil {
		t.Fatalf("a stopped resource that fits again: %v", err)
	}
}

func TestOverStopsTheNewestFirst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := Budget{MaxBytes: 1000}
	running := []Usage{
		{Resource: "old", Bytes: 700, Started: t0},
		{Resource: "mid", Bytes: 200, Started: t0.Add(time.Minute)},
		{Resource: "new", Bytes: 50, Started: t0.Add(2 * time.Minute)},
	}
	if got := b.Over(running); len(got) != 0 {
		t.Fatalf("within the budget: %v", got)
	}
	running[0].Bytes = 800 // 1050 now: stopping "new" is enough
	got := b.Over(running)
	if len(got) != 1 || got["new"] == nil {
		t.Fatalf("over by 50: %v", got)
	}
	running[0].Bytes = 1200 // only the old one left is still too much: all go
	got = b.Over(running)
	if len(got) != 3 {
		t.Fatalf("one cache alone over the budget: %v", got)
	}
	if !strings.Contains(got["old"].Error(), "was stopped") {
		t.Fatalf("message: %v", got["old"])
	}
	if got := (Budget{}).Over(running); got != nil {
		t.Fatalf("no budget: %v", got)
	}
}
