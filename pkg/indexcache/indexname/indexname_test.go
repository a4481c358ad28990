package indexname

import "testing"

func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name  string
		label bool
		key   string
	}{
		{Label("spark-app-selector"), true, "spark-app-selector"},
		{Label("example.com/field:odd"), true, "example.com/field:odd"},
		{Field("spec.nodeName"), false, "spec.nodeName"},
	} {
		label, key, ok := Parse(c.name)
		if !ok || label != c.label || key != c.key {
			t.Errorf("Parse(%q) = %v %q %v, want %v %q", c.name, label, key, ok, c.label, c.key)
		}
	}
	if c := Label("app"); c != "label:app" {
		t.Errorf("Label: %q", c)
	}
	if c := Field("spec.nodeName"); c != "field:spec.nodeName" {
		t.Errorf("Field: %q", c)
	}
	if _, _, ok := Parse("app"); ok {
		t.Errorf("a name without a kind parsed")
	}
}
