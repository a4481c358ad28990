// Command hello is a tiny program for building a multi-platform image quickly
// (test/image TestMultiPlatform): cross-compiling index-apiserver would take
// minutes.
package main

import "fmt"

func main() { fmt.Println("hello") }
