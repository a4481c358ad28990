// Package history holds a cache's recent past, bounded by count and age: the
// window of the latest events (for watch replay and for rebuilding past
// states) and the retained past states themselves (for continue tokens and
// exact reads). It is apart from the cache because it is only bookkeeping of
// what to keep and for how long; how an event or a state is made, and the
// lock that guards the window, are the cache's.
package history
