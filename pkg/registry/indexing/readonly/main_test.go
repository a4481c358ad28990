package readonly

import (
	"os"
	"testing"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// The binary turns ShardedListAndWatch on by default (pkg/cmd/server); so do the tests.
func TestMain(m *testing.M) {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.ShardedListAndWatch): true}); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
