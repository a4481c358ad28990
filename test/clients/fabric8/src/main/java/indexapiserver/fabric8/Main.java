package indexapiserver.fabric8;

import io.fabric8.kubernetes.api.model.ConfigMap;
import io.fabric8.kubernetes.api.model.ConfigMapBuilder;
import io.fabric8.kubernetes.api.model.HasMetadata;
import io.fabric8.kubernetes.api.model.Pod;
import io.fabric8.kubernetes.api.model.PodBuilder;
import io.fabric8.kubernetes.api.model.PodList;
import io.fabric8.kubernetes.api.model.coordination.v1.Lease;
import io.fabric8.kubernetes.client.Config;
import io.fabric8.kubernetes.client.ConfigBuilder;
import io.fabric8.kubernetes.client.KubernetesClient;
import io.fabric8.kubernetes.client.KubernetesClientBuilder;
import io.fabric8.kubernetes.client.Watch;
import io.fabric8.kubernetes.client.Watcher;
import io.fabric8.kubernetes.client.WatcherException;
import io.fabric8.kubernetes.client.dsl.FilterWatchListDeletable;
import io.fabric8.kubernetes.client.dsl.PodResource;
import io.fabric8.kubernetes.client.extended.leaderelection.LeaderCallbacks;
import io.fabric8.kubernetes.client.extended.leaderelection.LeaderElectionConfigBuilder;
import io.fabric8.kubernetes.client.extended.leaderelection.LeaderElectorBuilder;
import io.fabric8.kubernetes.client.extended.leaderelection.resourcelock.LeaseLock;
import io.fabric8.kubernetes.client.informers.ResourceEventHandler;
import io.fabric8.kubernetes.client.informers.SharedIndexInformer;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import java.util.stream.Collectors;

/**
 * Does, with fabric8 as Spark's and Flink's Kubernetes code configures and uses it, what a Spark
 * driver's executor-pod snapshot sources and Flink's Fabric8FlinkKubeClient do, with one client
 * per server URL and watch transport at once, and prints what each client saw as JSON. The Go test
 * (test/e2e/fabric8_test.go) compares every client with the one pointed at kube-apiserver.
 *
 * <p>Arguments: {@code --namespace NS --run ID --ca FILE --token-file FILE} and one or more
 * {@code --target NAME=URL=KUBECONFIG}; the first target is the oracle (kube-apiserver's root).
 * Spark's clients are built from the URL, CA and token files (SparkKubernetesClientFactory's way
 * with spark.kubernetes.authenticate.*.caCertFile and oauthTokenFile), Flink's from the kubeconfig
 * (kubernetes.config.file). Each target runs twice: watches over WebSocket
 * (fabric8's default) and over chunked HTTP (Config.onlyHttpWatches).
 */
public final class Main {
  static final Duration WAIT = Duration.ofSeconds(90);

  /** What one client saw. Lists are in order; item lists are sorted. */
  static final class Seen {
    public String name;
    public List<String> sparkWatch = new CopyOnWriteArrayList<>();
    public int sparkPolls;
    public List<String> sparkPollErrors = new CopyOnWriteArrayList<>();
    public List<String> sparkFinal = new ArrayList<>();
    public List<String> flinkList = new ArrayList<>();
    public List<String> flinkWatch = new CopyOnWriteArrayList<>();
    public List<String> flinkFinal = new ArrayList<>();
    public List<String> haInformer = new CopyOnWriteArrayList<>();
    public List<String> haFinal = new ArrayList<>();
    public List<String> leader = new CopyOnWriteArrayList<>();
    public String leaseHolderAfterRelease;
    public List<String> errors = new CopyOnWriteArrayList<>();

    /** JSON by hand: the client's own Jackson is not on the compile classpath of every version. */
    String toJson() {
      Map<String, Object> f = new LinkedHashMap<>();
      f.put("name", name);
      f.put("sparkWatch", sparkWatch);
      f.put("sparkPolls", sparkPolls);
      f.put("sparkPollErrors", sparkPollErrors);
      f.put("sparkFinal", sparkFinal);
      f.put("flinkList", flinkList);
      f.put("flinkWatch", flinkWatch);
      f.put("flinkFinal", flinkFinal);
      f.put("haInformer", haInformer);
      f.put("haFinal", haFinal);
      f.put("leader", leader);
      f.put("leaseHolderAfterRelease", leaseHolderAfterRelease);
      f.put("errors", errors);
      return f.entrySet().stream()
          .map(e -> quote(e.getKey()) + ": " + value(e.getValue()))
          .collect(Collectors.joining(",\n  ", "{\n  ", "\n}"));
    }

    static String value(Object v) {
      if (v instanceof List) {
        return ((List<?>) v).stream().map(Seen::value).collect(Collectors.joining(", ", "[", "]"));
      }
      if (v instanceof Integer) {
        return v.toString();
      }
      return v == null ? "null" : quote(v.toString());
    }

    static String quote(String s) {
      StringBuilder b = new StringBuilder("\"");
      for (char c : s.toCharArray()) {
        if (c == '"' || c == '\\') {
          b.append('\\').append(c);
        } else if (c < 0x20) {
          b.append(String.format("\\u%04x", (int) c));
        } else {
          b.append(c);
        }
      }
      return b.append('"').toString();
    }
  }

  /** One client: a URL (and kubeconfig) and a watch transport. */
  static final class Target {
    final String name;
    final KubernetesClient spark;
    final KubernetesClient flink;
    final Seen seen = new Seen();
    Watch sparkWatch;
    Watch flinkWatch;
    SharedIndexInformer<ConfigMap> haInformer;

    Target(String name, KubernetesClient spark, KubernetesClient flink) {
      this.name = name;
      this.spark = spark;
      this.flink = flink;
      seen.name = name;
    }
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> opts = new LinkedHashMap<>();
    List<String[]> targetArgs = new ArrayList<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      if (args[i].equals("--target")) {
        targetArgs.add(args[i + 1].split("=", 3));
      } else {
        opts.put(args[i].substring(2), args[i + 1]);
      }
    }
    watchdog(Duration.ofSeconds(Long.parseLong(opts.getOrDefault("deadline-seconds", "240"))));
    String ns = opts.get("namespace");
    String run = opts.get("run");
    List<Target> targets = new ArrayList<>();
    for (String[] t : targetArgs) {
      for (boolean http : new boolean[] {false, true}) {
        targets.add(
            new Target(
                t[0] + (http ? "-http" : "-websocket"),
                sparkClient(t[1], opts, ns, http),
                flinkClient(t[2], ns, http)));
      }
    }
    try {
      phase("clients built");
      spark(targets, ns, "spark-" + run);
      phase("spark");
      flink(targets, ns, "flink-" + run);
      phase("flink pods and HA ConfigMaps");
      leaderElection(targets, ns, "flink-" + run);
      phase("flink leader election");
    } finally {
      for (Target t : targets) {
        closeQuietly(t);
      }
    }
    System.out.println(
        targets.stream().map(t -> t.seen.toJson()).collect(Collectors.joining(",\n", "[\n", "\n]")));
    System.exit(0);
  }

  static long last = System.nanoTime();

  /** Says on stderr how long each part took. */
  static void phase(String what) {
    long now = System.nanoTime();
    System.err.printf("fabric8 clients: %-30s %5d ms%n", what, (now - last) / 1_000_000);
    last = now;
  }

  /** A hung client must not hang the test: after d, print every thread's stack and exit 3. */
  static void watchdog(Duration d) {
    Thread w =
        new Thread(
            () -> {
              try {
                Thread.sleep(d.toMillis());
              } catch (InterruptedException e) {
                return;
              }
              System.err.println("fabric8 clients: still running after " + d + "; threads:");
              Thread.getAllStackTraces()
                  .forEach(
                      (th, st) -> {
                        System.err.println(th);
                        for (StackTraceElement e : st) {
                          System.err.println("\tat " + e);
                        }
                      });
              System.exit(3);
            },
            "watchdog");
    w.setDaemon(true);
    w.start();
  }

  /** As SparkKubernetesClientFactory: a master URL, a CA file and the token read from its file. */
  static KubernetesClient sparkClient(String url, Map<String, String> opts, String ns, boolean http)
      throws Exception {
    String token = Files.readString(Path.of(opts.get("token-file"))).trim();
    Config cfg =
        new ConfigBuilder(Config.empty())
            .withMasterUrl(url)
            .withCaCertFile(opts.get("ca"))
            .withOauthToken(token)
            .withNamespace(ns)
            .withOnlyHttpWatches(http)
            .build();
    return new KubernetesClientBuilder().withConfig(cfg).build();
  }

  /** As Flink with kubernetes.config.file: the kubeconfig's server carries the prefix. */
  static KubernetesClient flinkClient(String kubeconfig, String ns, boolean http) throws Exception {
    String contents = Files.readString(Path.of(kubeconfig));
    Config cfg = Config.fromKubeconfig(null, contents, new File(kubeconfig).getAbsolutePath());
    cfg.setNamespace(ns);
    cfg.setOnlyHttpWatches(http);
    return new KubernetesClientBuilder().withConfig(cfg).build();
  }

  // ---- Spark: ExecutorPodsWatchSnapshotSource, ExecutorPodsPollingSnapshotSource, the allocator.

  static FilterWatchListDeletable<Pod, PodList, PodResource> sparkExecutors(
      KubernetesClient c, String ns, String app) {
    return c.pods()
        .inNamespace(ns)
        .withLabel("spark-app-selector", app)
        .withLabel("spark-role", "executor")
        .withoutLabel("spark-exec-inactive", "true");
  }

  static Pod executorPod(String ns, String app, String name) {
    return new PodBuilder()
        .withNewMetadata()
        .withNamespace(ns)
        .withName(name)
        .addToLabels("spark-app-selector", app)
        .addToLabels("spark-role", "executor")
        .addToLabels("spark-exec-id", name)
        .endMetadata()
        .withNewSpec()
        .withNodeName("node-1")
        .withRestartPolicy("Never")
        .addNewContainer()
        .withName("spark-kubernetes-executor")
        .withImage("registry.k8s.io/pause:3.10")
        .endContainer()
        .endSpec()
        .build();
  }

  static void spark(List<Target> targets, String ns, String app) throws Exception {
    for (Target t : targets) {
      // No resourceVersion: the watch starts now, as Spark's does.
      t.sparkWatch = sparkExecutors(t.spark, ns, app).watch(recorder(t, t.seen.sparkWatch));
    }
    ScheduledExecutorService poller = Executors.newScheduledThreadPool(2);
    for (Target t : targets) {
      poller.scheduleWithFixedDelay(
          () -> {
            try {
              sparkExecutors(t.spark, ns, app).list();
              t.seen.sparkPolls++;
            } catch (Exception e) {
              t.seen.sparkPollErrors.add(e.toString());
            }
          },
          0,
          1,
          TimeUnit.SECONDS);
    }
    // The driver's writes, each through a different client in turn.
    Rotation w = new Rotation(targets);
    for (int i = 1; i <= 4; i++) {
      w.next().spark.resource(executorPod(ns, app, "exec-" + i)).create();
    }
    Pod driver = executorPod(ns, app, "driver");
    driver.getMetadata().getLabels().put("spark-role", "driver");
    w.next().spark.resource(driver).create();
    // A kubelet's status write, passed through as pods/status.
    running(w.next().spark.pods().inNamespace(ns).withName("exec-1"));
    // Spark marks an executor it gave up on inactive: it leaves the selector (DELETED).
    w.next().spark.pods().inNamespace(ns).withName("exec-2")
        .edit(p -> new PodBuilder(p).editMetadata().addToLabels("spark-exec-inactive", "true").endMetadata().build());
    // The allocator deletes an executor.
    w.next().spark.pods().inNamespace(ns).withName("exec-3").withGracePeriod(0).delete();
    w.next().spark.resource(executorPod(ns, app, "exec-5")).create();
    w.next().spark.resource(executorPod(ns, app, "exec-end")).create();

    awaitAll(targets, t -> t.seen.sparkWatch, "exec-end", "spark watch");
    // At least two polls each after the last write.
    Thread.sleep(2500);
    poller.shutdown();
    poller.awaitTermination(WAIT.toSeconds(), TimeUnit.SECONDS);
    for (Target t : targets) {
      t.sparkWatch.close();
      t.seen.sparkFinal = items(sparkExecutors(t.spark, ns, app).list().getItems());
    }
  }

  static void running(PodResource pod) {
    pod.editStatus(p -> new PodBuilder(p).editOrNewStatus().withPhase("Running").endStatus().build());
  }

  // ---- Flink: Fabric8FlinkKubeClient's task manager pods, HA ConfigMaps and leader election.

  static Map<String, String> taskManagerLabels(String app) {
    Map<String, String> l = new LinkedHashMap<>();
    l.put("type", "flink-native-kubernetes");
    l.put("app", app);
    l.put("component", "taskmanager");
    return l;
  }

  static Map<String, String> haLabels(String app) {
    Map<String, String> l = new LinkedHashMap<>();
    l.put("app", app);
    l.put("configmap-type", "high-availability");
    l.put("type", "flink-native-kubernetes");
    return l;
  }

  static Pod taskManagerPod(String ns, String app, String name) {
    return new PodBuilder()
        .withNewMetadata()
        .withNamespace(ns)
        .withName(name)
        .withLabels(taskManagerLabels(app))
        .endMetadata()
        .withNewSpec()
        .withNodeName("node-2")
        .addNewContainer()
        .withName("flink-main-container")
        .withImage("registry.k8s.io/pause:3.10")
        .endContainer()
        .endSpec()
        .build();
  }

  static ConfigMap haConfigMap(String ns, String app, String name, String value) {
    return new ConfigMapBuilder()
        .withNewMetadata()
        .withNamespace(ns)
        .withName(name)
        .withLabels(haLabels(app))
        .endMetadata()
        .addToData("leader", value)
        .build();
  }

  static void flink(List<Target> targets, String ns, String app) throws Exception {
    Rotation w = new Rotation(targets);
    // A task manager and an HA ConfigMap from before the job manager (re)started.
    w.next().flink.resource(taskManagerPod(ns, app, "tm-0")).create();
    w.next().flink.resource(haConfigMap(ns, app, app + "-cluster-config-map", "a")).create();

    for (Target t : targets) {
      // Recovery lists the task managers, then the resource manager watches them. inform()
      // returns once the informer has listed and watches.
      t.seen.flinkList = items(t.flink.pods().withLabels(taskManagerLabels(app)).list().getItems());
      t.flinkWatch = t.flink.pods().withLabels(taskManagerLabels(app)).watch(recorder(t, t.seen.flinkWatch));
      t.haInformer = t.flink.configMaps().withLabels(haLabels(app)).inform(informerRecorder(t.seen.haInformer), 0);
    }

    for (int i = 1; i <= 3; i++) {
      w.next().flink.resource(taskManagerPod(ns, app, "tm-" + i)).create();
    }
    running(w.next().flink.pods().withName("tm-1"));
    w.next().flink.pods().withName("tm-2").withGracePeriod(0).delete();
    w.next().flink.resource(haConfigMap(ns, app, app + "-jobmanager-leader", "x")).create();
    w.next().flink.configMaps().withName(app + "-cluster-config-map")
        .edit(cm -> new ConfigMapBuilder(cm).addToData("checkpoint-1", "ref").build());
    w.next().flink.configMaps().withName(app + "-jobmanager-leader").delete();
    // Not an HA ConfigMap: no informer sees it.
    w.next().flink.resource(new ConfigMapBuilder().withNewMetadata().withName(app + "-other")
        .addToLabels("app", app).endMetadata().build()).create();
    w.next().flink.resource(haConfigMap(ns, app, app + "-end", "end")).create();
    w.next().flink.resource(taskManagerPod(ns, app, "tm-end")).create();

    awaitAll(targets, t -> t.seen.flinkWatch, "tm-end", "flink task manager watch");
    awaitAll(targets, t -> t.seen.haInformer, app + "-end", "flink HA ConfigMap informer");
    for (Target t : targets) {
      t.flinkWatch.close();
      t.seen.flinkFinal = items(t.flink.pods().withLabels(taskManagerLabels(app)).list().getItems());
      t.seen.haFinal = items(t.haInformer.getStore().list());
      t.haInformer.stop();
    }
  }

  /**
   * Flink's KubernetesLeaderElector: fabric8's LeaderElector on a Lease, each client for its own
   * Lease, until it leads and has renewed; then released on cancel.
   */
  static void leaderElection(List<Target> targets, String ns, String app) throws Exception {
    List<CompletableFuture<?>> running = new ArrayList<>();
    List<CountDownLatch> renewed = new ArrayList<>();
    for (Target t : targets) {
      String lease = app + "-" + t.name + "-leader";
      CountDownLatch led = new CountDownLatch(1);
      renewed.add(led);
      var config =
          new LeaderElectionConfigBuilder()
              .withName(lease)
              .withLock(new LeaseLock(ns, lease, t.name))
              .withLeaseDuration(Duration.ofSeconds(15))
              .withRenewDeadline(Duration.ofSeconds(10))
              .withRetryPeriod(Duration.ofSeconds(1))
              .withReleaseOnCancel(true)
              .withLeaderCallbacks(
                  new LeaderCallbacks(
                      () -> {
                        t.seen.leader.add("started leading");
                        led.countDown();
                      },
                      () -> t.seen.leader.add("stopped leading"),
                      id -> t.seen.leader.add("new leader " + (id.equals(t.name) ? "self" : id))))
              .build();
      running.add(new LeaderElectorBuilder(t.flink, Executors.newSingleThreadExecutor()).withConfig(config).build().start());
    }
    for (int i = 0; i < targets.size(); i++) {
      if (!renewed.get(i).await(WAIT.toSeconds(), TimeUnit.SECONDS)) {
        targets.get(i).seen.errors.add("never became leader of its Lease");
      }
    }
    // Renewals: a few retry periods as leader.
    Thread.sleep(3000);
    for (CompletableFuture<?> f : running) {
      f.cancel(true);
    }
    // Released on cancel (7.x clears holderIdentity); wait for it, but not for ever: then each
    // client reports what its Lease holds, and the test compares that with the oracle's.
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    for (Target t : targets) {
      String lease = app + "-" + t.name + "-leader";
      while (true) {
        Lease l = t.flink.leases().withName(lease).get();
        String holder = l == null ? "<no lease>" : String.valueOf(l.getSpec().getHolderIdentity());
        if (!holder.equals(t.name) || System.nanoTime() > deadline) {
          t.seen.leaseHolderAfterRelease = holder.equals(t.name) ? "self" : holder;
          break;
        }
        Thread.sleep(200);
      }
    }
  }

  // ---- Recording.

  static <T extends HasMetadata> Watcher<T> recorder(Target t, List<String> into) {
    return new Watcher<T>() {
      @Override
      public void eventReceived(Action action, T obj) {
        into.add(event(action.name(), obj));
      }

      @Override
      public void onClose(WatcherException e) {
        t.seen.errors.add("watch closed: " + e);
      }
    };
  }

  static <T extends HasMetadata> ResourceEventHandler<T> informerRecorder(List<String> into) {
    return new ResourceEventHandler<T>() {
      @Override
      public void onAdd(T obj) {
        into.add(event("ADDED", obj));
      }

      @Override
      public void onUpdate(T oldObj, T newObj) {
        into.add(event("MODIFIED", newObj));
      }

      @Override
      public void onDelete(T obj, boolean finalStateUnknown) {
        into.add(event(finalStateUnknown ? "DELETED_FINAL_STATE_UNKNOWN" : "DELETED", obj));
      }
    };
  }

  static String event(String type, HasMetadata obj) {
    return type + " " + obj.getMetadata().getName() + " " + obj.getMetadata().getResourceVersion();
  }

  static List<String> items(List<? extends HasMetadata> objs) {
    List<String> out = new ArrayList<>();
    for (HasMetadata o : objs) {
      var m = o.getMetadata();
      out.add(m.getName() + " " + m.getUid() + " " + m.getResourceVersion());
    }
    Collections.sort(out);
    return out;
  }

  /** Waits until every client's list has an event for name; records a timeout as an error. */
  static void awaitAll(
      List<Target> targets,
      java.util.function.Function<Target, List<String>> list,
      String name,
      String what)
      throws InterruptedException {
    long deadline = System.nanoTime() + WAIT.toNanos();
    for (Target t : targets) {
      Predicate<String> isEnd = e -> e.split(" ")[1].equals(name);
      while (list.apply(t).stream().noneMatch(isEnd)) {
        if (System.nanoTime() > deadline) {
          t.seen.errors.add(what + ": no event for " + name + " within " + WAIT);
          break;
        }
        Thread.sleep(50);
      }
    }
  }

  /** Hands out the clients in turn, so that every entry point carries some of the writes. */
  static final class Rotation {
    final List<Target> targets;
    int i;

    Rotation(List<Target> targets) {
      this.targets = targets;
    }

    Target next() {
      return targets.get(i++ % targets.size());
    }
  }

  static void closeQuietly(Target t) {
    try {
      t.spark.close();
      t.flink.close();
    } catch (Exception e) {
      // closing at exit
    }
  }
}
