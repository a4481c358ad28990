package server

import (
	"testing"
)

// TestGoawayChance: --goaway-chance is kube-apiserver's flag (default 0,
// 0..0.02) and reaches the generic server's config, which then wraps the
// handler chain in WithProbabilisticGoaway.
func TestGoawayChance(t *testing.T) {
	for _, c := range []struct {
		args []string
		want float64
		ok   bool
	}{
		{nil, 0, true},
		{[]string{"--goaway-chance=0.001"}, 0.001, true},
		{[]string{"--goaway-chance=0.02"}, 0.02, true},
		{[]string{"--goaway-chance=0.021"}, 0.021, false},
		{[]string{"--goaway-chance=-0.1"}, -0.1, false},
	} {
		o := NewOptions()
		fss := o.Flags()
		fs := fss.FlagSet("replicas")
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if o.Spread.GoawayChance != c.want {
			t.Errorf("%v: GoawayChance %v, want %v", c.args, o.Spread.GoawayChance, c.want)
		}
		if errs := o.Spread.Validate(); (len(errs) == 0) != c.ok {
			t.Errorf("%v: Validate() = %v, want ok=%v", c.args, errs, c.ok)
		}
	}
}
