package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Raw HTTP clients of the servers: LIST decoding and URL helpers.

type listMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
	Annotations     map[string]string `json:"annotations"`
	// DeletionTimestamp is set on the update a graceful DELETE makes first.
	DeletionTimestamp string `json:"deletionTimestamp"`
}

type listItem struct {
	Metadata listMeta `json:"metadata"`
	// Status, undecoded (a Status answer's is a string): -mode crd's status
	// patches write their sequence number and send time into it (stampOf).
	Status json.RawMessage `json:"status"`
}

type listResp struct {
	Metadata struct {
		ResourceVersion    string `json:"resourceVersion"`
		RemainingItemCount *int64 `json:"remainingItemCount"`
	} `json:"metadata"`
	Items     []listItem `json:"items"`
	Remaining int64      `json:"-"`
}

func doList(ctx context.Context, c *http.Client, url string) (*listResp, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	var l listResp
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, err
	}
	if l.Metadata.RemainingItemCount != nil {
		l.Remaining = *l.Metadata.RemainingItemCount
	}
	return &l, nil
}

// doGet reads one object (its body read and dropped).
func doGet(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// watchListQuery makes a label LIST's URL a consistent WatchList: what an
// informer starts with (client-go's WatchListClient).
const watchListQuery = "&watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"

// doWatchListStart opens a WatchList and reads it up to its initial-events-end
// bookmark, then closes it: the initial events it had.
func doWatchListStart(ctx context.Context, c *http.Client, url string) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	dec := json.NewDecoder(resp.Body)
	for n := 0; ; {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return n, fmt.Errorf("WatchList %s ended before its initial-events-end bookmark: %w", url, err)
		}
		switch {
		case ev.Type == "ADDED":
			n++
		case ev.Type == "BOOKMARK" && ev.Object.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true":
			return n, nil
		case ev.Type == "ERROR":
			return n, fmt.Errorf("WatchList %s: an ERROR event", url)
		}
	}
}

func urlQueryEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// rawSize is the size of the JSON body at url (0 on error).
func rawSize(ctx context.Context, c *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0
	}
	return len(b)
}
