package store

import (
	"github.com/google/btree"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/history"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// What the Cache's tests and benchmarks look at of the store's state; the
// Cache itself does not.

// Tree is the live tree. The caller holds the lock, or writes nothing.
func (s *Store) Tree() *btree.BTreeG[*held.Entry] { return s.tree }

// Window is the event window. The caller holds the lock, or writes nothing.
func (s *Store) Window() *history.Window[*held.Event] { return &s.window }

// Snapshots are the retained snapshots.
func (s *Store) Snapshots() *history.Snapshots[*btree.BTreeG[*held.Entry]] { return s.snapshots }

// LockIngest and UnlockIngest hold the store's writers off.
func (s *Store) LockIngest()   { s.ingestMu.Lock() }
func (s *Store) UnlockIngest() { s.ingestMu.Unlock() }
