package anyresource

import (
	"bufio"
	"context"
	"io"
	"time"

	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
)

// PackInterval is how often RunPacker looks at its cache.
const PackInterval = 10 * time.Second

// RunPacker keeps a cache's held bytes packed in key order (listwrite.go)
// between whole LISTs, so that a LIST finds its items lying as it writes
// them instead of moving them itself: the first ones after a load, and the
// neighbours of what changed since. Every interval, once the cache has
// synced, and when it changed since the last pass (or that pass stopped at
// maxMoveBytes), it does what a whole LIST does, writing nowhere. It
// returns when ctx ends.
func RunPacker(ctx context.Context, cache *indexcache.Cache, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var packedAt uint64
	more := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rv := cache.ResourceVersion()
		if !cache.HasSynced() || (rv == packedAt && !more) {
			continue
		}
		err := encoded.WriteChunked(io.Discard, func(bw *bufio.Writer) error {
			var err error
			more, err = writeItems(bw, io.Discard, cache.All(), true)
			return err
		})
		if err != nil {
			klog.ErrorS(err, "Packing held bytes", "resourceVersion", rv)
			continue
		}
		packedAt = rv
	}
}
