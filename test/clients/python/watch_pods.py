"""The official Kubernetes Python client (PyPI `kubernetes`, pinned in requirements.txt) against
kube-apiserver and the cluster proxy: for each kubeconfig, list the pods of a namespace with a
label selector, then watch from the list's resourceVersion (the reflector pattern: list, then
watch), keeping a cache of the pods from those events, until the pod named by --end arrives.

Protocol with test/e2e/officialclients_test.go: prints "ready" once every target has listed (the
watches start from the lists' resourceVersions, so later changes reach them whenever they open),
then, when every watch has seen --end, one JSON object: per target, the list, events and cache.
Usage: watch_pods.py --namespace NS --selector SEL --end NAME NAME=KUBECONFIG...
"""

import argparse
import json
import sys
import threading

from kubernetes import client, config, watch


def item(pod):
    m = pod.metadata
    return f"{m.name} {m.uid} {m.resource_version}"


def run(name, kubeconfig, args, out, opened):
    api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    seen = {"list": [], "watch": [], "cache": [], "errors": []}
    out[name] = seen
    try:
        pods = api.list_namespaced_pod(args.namespace, label_selector=args.selector)
        seen["list"] = sorted(item(p) for p in pods.items)
        cache = {p.metadata.name: p for p in pods.items}
        opened.release()
        listed = True
        w = watch.Watch()
        stream = w.stream(
            api.list_namespaced_pod,
            args.namespace,
            label_selector=args.selector,
            resource_version=pods.metadata.resource_version,
            timeout_seconds=120,
            _request_timeout=150,
        )
        for ev in stream:
            pod = ev["object"]
            seen["watch"].append(f"{ev['type']} {pod.metadata.name} {pod.metadata.resource_version}")
            if ev["type"] == "DELETED":
                cache.pop(pod.metadata.name, None)
            else:
                cache[pod.metadata.name] = pod
            if pod.metadata.name == args.end:
                w.stop()
        seen["cache"] = sorted(item(p) for p in cache.values())
    except Exception as e:  # reported, and the test fails on it
        seen["errors"].append(repr(e))
        if not locals().get("listed"):
            opened.release()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--namespace", required=True)
    p.add_argument("--selector", required=True)
    p.add_argument("--end", required=True)
    p.add_argument("targets", nargs="+")
    args = p.parse_args()
    out = {}
    opened = threading.Semaphore(0)
    threads = []
    for t in args.targets:
        name, kubeconfig = t.split("=", 1)
        th = threading.Thread(target=run, args=(name, kubeconfig, args, out, opened), daemon=True)
        th.start()
        threads.append(th)
    for _ in threads:
        opened.acquire()
    print("ready", flush=True)
    for th in threads:
        th.join(timeout=180)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
