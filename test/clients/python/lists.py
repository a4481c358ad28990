"""Reads the pods of one namespace the ways the official Python client does.

Usage: lists.py KUBECONFIG NAMESPACE [gzip]

With gzip the client sends Accept-Encoding: gzip on every request (it does
not by default). Prints one JSON object: the pods a LIST returned, the
Content-Encoding of a LIST's answer, and what a WatchList (sendInitialEvents)
delivered before its initial-events-end bookmark (or the error it met).
"""

import json
import sys

from kubernetes import client, config, watch


def main():
    kubeconfig, namespace = sys.argv[1], sys.argv[2]
    gz = len(sys.argv) > 3 and sys.argv[3] == "gzip"
    api_client = config.new_client_from_config(config_file=kubeconfig)
    if gz:
        api_client.set_default_header("Accept-Encoding", "gzip")
    v1 = client.CoreV1Api(api_client)
    out = {}

    pods = v1.list_namespaced_pod(namespace)
    out["list"] = sorted(p.metadata.name for p in pods.items)

    raw = v1.list_namespaced_pod(namespace, _preload_content=False)
    out["listContentEncoding"] = raw.headers.get("Content-Encoding", "")
    raw.release_conn()

    added, synced = [], False
    w = watch.Watch()
    try:
        for ev in w.stream(v1.list_namespaced_pod, namespace, send_initial_events=True,
                           resource_version_match="NotOlderThan", allow_watch_bookmarks=True,
                           timeout_seconds=30):
            if ev["type"] == "ADDED":
                added.append(ev["object"].metadata.name)
            elif ev["type"] == "BOOKMARK":
                ann = (ev["raw_object"].get("metadata") or {}).get("annotations") or {}
                if ann.get("k8s.io/initial-events-end") == "true":
                    synced = True
                    w.stop()
    except Exception as e:  # reported, compared with kube-apiserver's
        out["watchListError"] = type(e).__name__
    out["watchListAdded"] = sorted(added)
    out["watchListSynced"] = synced
    print(json.dumps(out))


if __name__ == "__main__":
    main()
