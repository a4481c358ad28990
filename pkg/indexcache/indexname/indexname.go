// Package indexname spells the names of the cache's indexes as metrics,
// IndexPolicy status and index advice show them: label:<key> for a label
// key, field:<path> for a field path. It is its own package so that the
// cache, its advice tracker and the policy controller share one spelling
// without importing each other.
package indexname

import "strings"

const (
	labelPrefix = "label:"
	fieldPrefix = "field:"
)

// Label is the name of the index of a label key.
func Label(key string) string { return labelPrefix + key }

// Field is the name of the index of a field path.
func Field(path string) string { return fieldPrefix + path }

// Parse splits a name made by Label or Field into its kind and key.
func Parse(name string) (label bool, key string, ok bool) {
	if k, found := strings.CutPrefix(name, labelPrefix); found {
		return true, k, true
	}
	if p, found := strings.CutPrefix(name, fieldPrefix); found {
		return false, p, true
	}
	return false, "", false
}
