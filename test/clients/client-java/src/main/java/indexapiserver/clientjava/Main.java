package indexapiserver.clientjava;

import com.google.gson.GsonBuilder;
import com.google.gson.reflect.TypeToken;
import io.kubernetes.client.informer.ResourceEventHandler;
import io.kubernetes.client.informer.SharedIndexInformer;
import io.kubernetes.client.informer.SharedInformerFactory;
import io.kubernetes.client.openapi.ApiClient;
import io.kubernetes.client.openapi.apis.CoreV1Api;
import io.kubernetes.client.openapi.models.V1Pod;
import io.kubernetes.client.openapi.models.V1PodList;
import io.kubernetes.client.util.Config;
import io.kubernetes.client.util.Watch;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import okhttp3.OkHttpClient;

/**
 * The official Kubernetes Java client (io.kubernetes:client-java) against kube-apiserver and the
 * cluster proxy: for each kubeconfig, a LIST of a namespace's pods with a label selector, a watch
 * from the list's resourceVersion, and a SharedIndexInformer with the same selector, until the pod
 * named by --end arrives in the watch and the informer.
 *
 * <p>Protocol with test/e2e/officialclients_test.go: prints "ready" once every target has listed
 * and every informer has synced, then one JSON object: per target, the list, the watch's events,
 * the informer's notifications and its store at the end.
 *
 * <p>Usage: {@code --namespace NS --selector SEL --end NAME NAME=KUBECONFIG...}
 */
public final class Main {
  static final Duration WAIT = Duration.ofSeconds(120);

  static final class Seen {
    List<String> list = new ArrayList<>();
    List<String> watch = new CopyOnWriteArrayList<>();
    List<String> informer = new CopyOnWriteArrayList<>();
    List<String> store = new ArrayList<>();
    List<String> errors = new CopyOnWriteArrayList<>();
  }

  public static void main(String[] args) throws Exception {
    String ns = null, selector = null, end = null;
    Map<String, String> targets = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--namespace" -> ns = args[++i];
        case "--selector" -> selector = args[++i];
        case "--end" -> end = args[++i];
        default -> {
          String[] kv = args[i].split("=", 2);
          targets.put(kv[0], kv[1]);
        }
      }
    }
    final String endName = end;
    Map<String, Seen> out = new LinkedHashMap<>();
    List<Thread> watchers = new ArrayList<>();
    List<SharedInformerFactory> factories = new ArrayList<>();
    List<SharedIndexInformer<V1Pod>> informers = new ArrayList<>();
    for (var t : targets.entrySet()) {
      Seen seen = new Seen();
      out.put(t.getKey(), seen);
      ApiClient client = Config.fromConfig(t.getValue());
      // Watches stay open: no read timeout, as the client's docs say for watches.
      OkHttpClient http = client.getHttpClient().newBuilder().readTimeout(0, TimeUnit.SECONDS).build();
      client.setHttpClient(http);
      CoreV1Api api = new CoreV1Api(client);

      V1PodList list = api.listNamespacedPod(ns).labelSelector(selector).execute();
      seen.list = items(list.getItems());
      String rv = list.getMetadata().getResourceVersion();
      final String fns = ns, fsel = selector, fend = end;
      Thread w =
          new Thread(
              () -> {
                try (Watch<V1Pod> watch =
                    Watch.createWatch(
                        client,
                        api.listNamespacedPod(fns)
                            .labelSelector(fsel)
                            .resourceVersion(rv)
                            .watch(true)
                            .buildCall(null),
                        new TypeToken<Watch.Response<V1Pod>>() {}.getType())) {
                  for (Watch.Response<V1Pod> ev : watch) {
                    seen.watch.add(ev.type + " " + name(ev.object) + " " + rev(ev.object));
                    if (fend.equals(name(ev.object))) {
                      return;
                    }
                  }
                  seen.errors.add("watch ended before " + fend);
                } catch (Exception e) {
                  seen.errors.add("watch: " + e);
                }
              });
      w.setDaemon(true);
      w.start();
      watchers.add(w);

      SharedInformerFactory factory = new SharedInformerFactory(client);
      SharedIndexInformer<V1Pod> informer =
          factory.sharedIndexInformerFor(
              params ->
                  api.listNamespacedPod(fns)
                      .labelSelector(fsel)
                      .resourceVersion(params.resourceVersion)
                      .watch(params.watch)
                      .timeoutSeconds(params.timeoutSeconds)
                      .buildCall(null),
              V1Pod.class,
              V1PodList.class);
      informer.addEventHandler(
          new ResourceEventHandler<V1Pod>() {
            @Override
            public void onAdd(V1Pod p) {
              seen.informer.add("ADDED " + name(p) + " " + rev(p));
            }

            @Override
            public void onUpdate(V1Pod old, V1Pod p) {
              seen.informer.add("MODIFIED " + name(p) + " " + rev(p));
            }

            @Override
            public void onDelete(V1Pod p, boolean finalStateUnknown) {
              seen.informer.add((finalStateUnknown ? "DELETED_FINAL_STATE_UNKNOWN " : "DELETED ") + name(p) + " " + rev(p));
            }
          });
      factory.startAllRegisteredInformers();
      factories.add(factory);
      informers.add(informer);
    }
    long deadline = System.nanoTime() + WAIT.toNanos();
    for (SharedIndexInformer<V1Pod> inf : informers) {
      while (!inf.hasSynced() && System.nanoTime() < deadline) {
        Thread.sleep(50);
      }
    }
    System.out.println("ready");
    System.out.flush();

    for (Thread w : watchers) {
      w.join(Math.max(1, (deadline - System.nanoTime()) / 1_000_000));
    }
    int i = 0;
    for (var e : out.entrySet()) {
      Seen seen = e.getValue();
      SharedIndexInformer<V1Pod> inf = informers.get(i++);
      while (seen.informer.stream().noneMatch(s -> s.split(" ")[1].equals(endName))
          && System.nanoTime() < deadline) {
        Thread.sleep(50);
      }
      seen.store = items(inf.getIndexer().list());
      if (watchers.get(i - 1).isAlive()) {
        seen.errors.add("watch saw no event for the end pod in time");
      }
    }
    for (SharedInformerFactory f : factories) {
      f.stopAllRegisteredInformers();
    }
    System.out.println(new GsonBuilder().create().toJson(out));
    System.out.flush();
    System.exit(0);
  }

  static String name(V1Pod p) {
    return p.getMetadata().getName();
  }

  static String rev(V1Pod p) {
    return p.getMetadata().getResourceVersion();
  }

  static List<String> items(List<V1Pod> pods) {
    List<String> out = new ArrayList<>();
    for (V1Pod p : pods) {
      out.add(name(p) + " " + p.getMetadata().getUid() + " " + rev(p));
    }
    Collections.sort(out);
    return out;
  }
}
