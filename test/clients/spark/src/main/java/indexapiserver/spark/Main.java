package indexapiserver.spark;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;

/**
 * A real Spark driver in client mode (SparkContext, spark-kubernetes' scheduler backend) against
 * spark.master=k8s://URL, as a user starts one from a notebook or spark-shell. It asks for
 * --executors executors and then takes its target from stdin, one command a line:
 *
 *   total N   SparkContext.requestTotalExecutors(N): the allocator creates or drops pod requests
 *   stop      SparkContext.stop(): the backend deletes its executor pods and ConfigMap
 *
 * It prints "app ID" once the context is up, and "ok COMMAND" after each command, so the test
 * (test/e2e/spark_test.go) knows the labels to look for and when the driver has the command.
 * Every Spark setting is a --conf KEY=VALUE argument; the test passes them all, so they are in
 * one place there.
 */
public final class Main {
  public static void main(String[] args) throws Exception {
    Map<String, String> settings = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      if (!args[i].equals("--conf") || i + 1 == args.length) {
        throw new IllegalArgumentException("usage: Main (--conf KEY=VALUE)...");
      }
      String kv = args[++i];
      int eq = kv.indexOf('=');
      settings.put(kv.substring(0, eq), kv.substring(eq + 1));
    }
    SparkConf conf = new SparkConf(false);
    settings.forEach(conf::set);
    SparkContext sc = new SparkContext(conf);
    System.out.println("app " + sc.applicationId());
    System.out.flush();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String[] f = line.trim().split("\\s+");
      switch (f[0]) {
        case "total" -> {
          boolean accepted = sc.requestTotalExecutors(Integer.parseInt(f[1]), 0,
              scala.collection.immutable.Map$.MODULE$.empty());
          System.out.println((accepted ? "ok " : "refused ") + line.trim());
        }
        case "stop" -> {
          sc.stop();
          System.out.println("ok stop");
          System.out.flush();
          return;
        }
        default -> System.out.println("unknown " + line.trim());
      }
      System.out.flush();
    }
    sc.stop();
  }
}
