// Package realistic makes the pods and nodes the benchmarks use: what
// Spark 4's driver and Flink's native Kubernetes resource manager create,
// and the status a kubelet then writes. Pods are created with spec.nodeName
// set (the scheduler's binding, folded into the create) and then get their
// full status with a status update, as from a kubelet. Shared by the
// side-by-side benchmark (test/bench) and the cache's Go benchmarks.
package realistic

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Spark's labels on its pods, and its version.
const (
	SparkAppLabel      = "spark-app-selector"
	SparkRoleLabel     = "spark-role"
	SparkInactiveLabel = "spark-exec-inactive"
	SparkVersion       = "4.0.0"
)

// SparkExecutorSelector is the selector Spark 4's driver lists and watches
// its executors with (ExecutorPodsWatchSnapshotSource,
// ExecutorPodsPollingSnapshotSource).
func SparkExecutorSelector(appID string) string {
	return SparkAppLabel + "=" + appID + "," + SparkRoleLabel + "=executor," + SparkInactiveLabel + "!=true"
}

// FlinkTaskManagerSelector is the selector Flink's KubernetesResourceManager
// lists and watches its task managers with.
func FlinkTaskManagerSelector(cluster string) string {
	return "type=flink-native-kubernetes,app=" + cluster + ",component=taskmanager"
}

func qty(s string) resource.Quantity { return resource.MustParse(s) }

func kubeAPIAccessVolume(name string) corev1.Volume {
	exp := int64(3607)
	mode := int32(420)
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: &mode,
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &exp, Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}}
}

func defaultTolerations() []corev1.Toleration {
	s := int64(300)
	return []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s},
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

// NodeName is the name of node i, as on EC2.
func NodeName(i int) string { return fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", (i/250)%250, i%250+1) }

// SparkAppID is a Spark application id as Spark makes it (spark-<32 hex>).
func SparkAppID(a int) string { return fmt.Sprintf("spark-%032x", uint64(a)*0x9e3779b97f4a7c15+1) }

// SparkDriverPod is the driver pod spark-submit creates for app a.
func SparkDriverPod(ns string, a int, node string) *corev1.Pod {
	p := SparkExecutorPod(ns, a, "", "", 0, node)
	p.Name = fmt.Sprintf("spark-pi-%x-driver", a)
	p.Labels[SparkRoleLabel] = "driver"
	delete(p.Labels, "spark-exec-id")
	delete(p.Labels, "spark-exec-resourceprofile-id")
	p.OwnerReferences = nil
	p.Spec.Containers[0].Name = "spark-kubernetes-driver"
	p.Spec.Containers[0].Args = []string{"driver", "--properties-file", "/opt/spark/conf/spark.properties", "--class", "org.apache.spark.examples.SparkPi", "local:///opt/spark/examples/jars/spark-examples_2.13-4.0.0.jar", "100000"}
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "driver-rpc-port", ContainerPort: 7078, Protocol: corev1.ProtocolTCP},
		{Name: "blockmanager", ContainerPort: 7079, Protocol: corev1.ProtocolTCP}, {Name: "spark-ui", ContainerPort: 4040, Protocol: corev1.ProtocolTCP}}
	p.Spec.Hostname = ""
	return p
}

// SparkExecutorPod is executor id of app a as Spark 4's
// BasicExecutorFeatureStep (+ local dirs, mounted conf) builds it, owned by
// the driver pod.
func SparkExecutorPod(ns string, a int, driverName, driverUID string, id int, node string) *corev1.Pod {
	app := SparkAppID(a)
	name := fmt.Sprintf("spark-pi-%x-exec-%d", a, id)
	t, f := true, false
	grace := int64(30)
	mode := int32(420)
	driverURL := fmt.Sprintf("spark://CoarseGrainedScheduler@spark-pi-%x-driver-svc.%s.svc:7078", a, ns)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{
				SparkAppLabel: app, "spark-app-name": "spark-pi", "spark-exec-id": strconv.Itoa(id),
				"spark-exec-resourceprofile-id": "0", SparkRoleLabel: "executor", "spark-version": SparkVersion,
			},
			Annotations: map[string]string{"spark-app-name": "spark-pi"},
		},
		Spec: corev1.PodSpec{
			Hostname:      name,
			RestartPolicy: corev1.RestartPolicyNever,
			NodeName:      node,
			Containers: []corev1.Container{{
				Name:            "spark-kubernetes-executor",
				Image:           "apache/spark:" + SparkVersion,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            []string{"executor"},
				Ports:           []corev1.ContainerPort{{Name: "blockmanager", ContainerPort: 7079, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{
					{Name: "SPARK_USER", Value: "spark"},
					{Name: "SPARK_DRIVER_URL", Value: driverURL},
					{Name: "SPARK_EXECUTOR_CORES", Value: "1"},
					{Name: "SPARK_EXECUTOR_MEMORY", Value: "1024m"},
					{Name: "SPARK_APPLICATION_ID", Value: app},
					{Name: "SPARK_CONF_DIR", Value: "/opt/spark/conf"},
					{Name: "SPARK_EXECUTOR_ID", Value: strconv.Itoa(id)},
					{Name: "SPARK_RESOURCE_PROFILE_ID", Value: "0"},
					fieldEnv("SPARK_EXECUTOR_POD_IP", "status.podIP"),
					fieldEnv("SPARK_EXECUTOR_POD_NAME", "metadata.name"),
					{Name: "SPARK_JAVA_OPT_0", Value: "-Djava.net.preferIPv6Addresses=false"},
					{Name: "SPARK_JAVA_OPT_1", Value: "-XX:+IgnoreUnrecognizedVMOptions"},
					{Name: "SPARK_JAVA_OPT_2", Value: "--add-opens=java.base/java.lang=ALL-UNNAMED"},
					{Name: "SPARK_JAVA_OPT_3", Value: "--add-opens=java.base/java.nio=ALL-UNNAMED"},
					{Name: "SPARK_JAVA_OPT_4", Value: "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED"},
					{Name: "SPARK_JAVA_OPT_5", Value: "-Dspark.driver.port=7078"},
					{Name: "SPARK_JAVA_OPT_6", Value: "-Dspark.driver.blockManager.port=7079"},
					{Name: "SPARK_LOCAL_DIRS", Value: "/var/data/spark-" + fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", a, id, a%4096, id%4096, a*7919+id)},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: qty("1"), corev1.ResourceMemory: qty("1408Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: qty("1408Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "spark-local-dir-1", MountPath: "/var/data/spark-local"},
					{Name: "spark-conf-volume-exec", MountPath: "/opt/spark/conf"},
					{Name: "kube-api-access-" + fmt.Sprintf("%05x", id), MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
				},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: []corev1.Volume{
				{Name: "spark-local-dir-1", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "spark-conf-volume-exec", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("spark-exec-%x-conf-map", a)},
					Items:                []corev1.KeyToPath{{Key: "spark-env.sh", Path: "spark-env.sh", Mode: &mode}}, DefaultMode: &mode}}},
				kubeAPIAccessVolume("kube-api-access-" + fmt.Sprintf("%05x", id)),
			},
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            "spark",
			SchedulerName:                 "default-scheduler",
			EnableServiceLinks:            &t,
			AutomountServiceAccountToken:  &f,
			Tolerations:                   defaultTolerations(),
			SecurityContext:               &corev1.PodSecurityContext{},
		},
	}
	if driverUID != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: driverName, UID: types.UID(driverUID), Controller: &t}}
	}
	return p
}

// FlinkTaskManagerPod is task manager i of Flink cluster c as Flink's
// KubernetesTaskManagerFactory builds it, owned by the JobManager
// Deployment.
func FlinkTaskManagerPod(ns string, c int, jmUID string, i int, node string) *corev1.Pod {
	cluster := FlinkCluster(c)
	name := fmt.Sprintf("%s-taskmanager-1-%d", cluster, i+1)
	t := true
	grace := int64(30)
	mode := int32(420)
	memOpts := "-Xmx536870902 -Xms536870902 -XX:MaxDirectMemorySize=268435458 -XX:MaxMetaspaceSize=268435456"
	dyn := "-D taskmanager.memory.network.min=134217730b -D taskmanager.cpu.cores=1.0 -D taskmanager.memory.task.off-heap.size=0b " +
		"-D taskmanager.memory.jvm-metaspace.size=268435456b -D external-resources=none -D taskmanager.memory.jvm-overhead.min=201326592b " +
		"-D taskmanager.memory.framework.off-heap.size=134217728b -D taskmanager.memory.network.max=134217730b " +
		"-D taskmanager.memory.framework.heap.size=134217728b -D taskmanager.memory.managed.size=536870920b " +
		"-D taskmanager.memory.task.heap.size=402653174b -D taskmanager.numberOfTaskSlots=2 -D taskmanager.memory.jvm-overhead.max=201326592b"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{"app": cluster, "component": "taskmanager", "type": "flink-native-kubernetes"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: cluster, UID: types.UID(jmUID),
				Controller: &t, BlockOwnerDeletion: &t}},
		},
		Spec: corev1.PodSpec{
			Hostname:      name,
			RestartPolicy: corev1.RestartPolicyNever,
			NodeName:      node,
			Containers: []corev1.Container{{
				Name:            "flink-main-container",
				Image:           "flink:1.20.1-scala_2.12-java17",
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/docker-entrypoint.sh"},
				Args:            []string{"bash", "-c", "kubernetes-taskmanager.sh -Dtaskmanager.resource-id=" + name + " " + dyn},
				Ports:           []corev1.ContainerPort{{Name: "rpc", ContainerPort: 6122, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{
					{Name: "FLINK_TM_JVM_MEM_OPTS", Value: memOpts},
					fieldEnv("_POD_IP_ADDRESS", "status.podIP"),
					fieldEnv("_POD_NODE_ID", "spec.nodeName"),
					{Name: "ENABLE_BUILT_IN_PLUGINS", Value: "flink-s3-fs-presto-1.20.1.jar"},
					{Name: "FLINK_ENV_JAVA_OPTS", Value: "-XX:+UseG1GC -XX:MaxGCPauseMillis=200"},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: qty("1"), corev1.ResourceMemory: qty("1728Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: qty("1"), corev1.ResourceMemory: qty("1728Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "flink-config-volume", MountPath: "/opt/flink/conf"},
					{Name: "kube-api-access-" + fmt.Sprintf("%05x", i), MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
				},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(6122)}},
					InitialDelaySeconds: 30, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
			}},
			Volumes: []corev1.Volume{
				{Name: "flink-config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "flink-config-" + cluster},
					Items:                []corev1.KeyToPath{{Key: "log4j-console.properties", Path: "log4j-console.properties"}, {Key: "config.yaml", Path: "config.yaml"}},
					DefaultMode:          &mode}}},
				kubeAPIAccessVolume("kube-api-access-" + fmt.Sprintf("%05x", i)),
			},
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            "flink",
			SchedulerName:                 "default-scheduler",
			EnableServiceLinks:            &t,
			Tolerations:                   defaultTolerations(),
			SecurityContext:               &corev1.PodSecurityContext{},
		},
	}
	return p
}

// FlinkCluster is the name of Flink cluster c.
func FlinkCluster(c int) string { return fmt.Sprintf("flink-job-%d", c) }

// RunningStatus is the status a kubelet writes for a started pod: Running,
// the five conditions, the container's status, IPs and QoS class. gen varies
// the probe/condition times so that each status write changes the object.
func RunningStatus(p *corev1.Pod, podIdx int, gen int) corev1.PodStatus {
	start := metav1.NewTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	now := metav1.NewTime(start.Add(time.Duration(gen+1) * time.Second))
	ip := fmt.Sprintf("10.%d.%d.%d", 64+(podIdx>>16)%64, (podIdx>>8)%256, podIdx%256)
	c := p.Spec.Containers[0]
	cond := func(t corev1.PodConditionType, when metav1.Time) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastProbeTime: metav1.Time{}, LastTransitionTime: when}
	}
	ready := true
	started := true
	qos := corev1.PodQOSBurstable
	if p.Spec.Containers[0].Resources.Limits.Cpu().Cmp(qty("1")) == 0 {
		qos = corev1.PodQOSGuaranteed
	}
	return corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, start), cond(corev1.PodInitialized, start),
			cond(corev1.PodReady, now), cond(corev1.ContainersReady, now), cond(corev1.PodScheduled, start),
		},
		HostIP:    fmt.Sprintf("10.0.%d.%d", (podIdx/250)%250, podIdx%250+1),
		HostIPs:   []corev1.HostIP{{IP: fmt.Sprintf("10.0.%d.%d", (podIdx/250)%250, podIdx%250+1)}},
		PodIP:     ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		StartTime: &start,
		QOSClass:  qos,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:               c.Name,
			State:              corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}},
			Ready:              ready,
			RestartCount:       0,
			Image:              "docker.io/" + c.Image,
			ImageID:            "docker.io/" + c.Image + "@sha256:" + fmt.Sprintf("%064x", len(c.Image)*7919),
			ContainerID:        "containerd://" + fmt.Sprintf("%064x", uint64(podIdx)*0x9e3779b97f4a7c15+uint64(gen)),
			Started:            &started,
			AllocatedResources: c.Resources.Requests,
			Resources:          &c.Resources,
			VolumeMounts: func() []corev1.VolumeMountStatus {
				var v []corev1.VolumeMountStatus
				for _, m := range c.VolumeMounts {
					ro := m.ReadOnly
					v = append(v, corev1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: ro,
						RecursiveReadOnly: func() *corev1.RecursiveReadOnlyMode { d := corev1.RecursiveReadOnlyDisabled; return &d }()})
				}
				return v
			}(),
			User: &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 185, GID: 185, SupplementalGroups: []int64{185}}},
		}},
	}
}

// StatusPatch is a kubelet-like status update (strategic merge patch of the
// Ready/ContainersReady conditions' probe time), different on each gen.
func StatusPatch(gen int) []byte {
	t := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC).Add(time.Duration(gen) * time.Second).Format(time.RFC3339)
	return []byte(fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","lastProbeTime":%q},{"type":"ContainersReady","status":"True","lastProbeTime":%q}]}}`, t, t))
}

// Node is a node as a kubelet on a cloud VM registers it.
func Node(i int) *corev1.Node {
	name := NodeName(i)
	zone := []string{"us-east-1a", "us-east-1b", "us-east-1c"}[i%3]
	hb := metav1.NewTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	cond := func(t corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: st, LastHeartbeatTime: hb, LastTransitionTime: hb, Reason: reason, Message: msg}
	}
	res := corev1.ResourceList{corev1.ResourceCPU: qty("16"), corev1.ResourceMemory: qty("64927752Ki"), corev1.ResourcePods: qty("110"),
		corev1.ResourceEphemeralStorage: qty("104845292Ki"), "hugepages-1Gi": qty("0"), "hugepages-2Mi": qty("0")}
	alloc := corev1.ResourceList{corev1.ResourceCPU: qty("15890m"), corev1.ResourceMemory: qty("63910920Ki"), corev1.ResourcePods: qty("110"),
		corev1.ResourceEphemeralStorage: qty("95551679124"), "hugepages-1Gi": qty("0"), "hugepages-2Mi": qty("0")}
	var images []corev1.ContainerImage
	for _, im := range []string{"apache/spark:4.0.0", "flink:1.20.1-scala_2.12-java17", "registry.k8s.io/kube-proxy:v1.37.1", "amazon/aws-node:v1.19.2"} {
		images = append(images, corev1.ContainerImage{Names: []string{"docker.io/" + im + "@sha256:" + fmt.Sprintf("%064x", len(im)), "docker.io/" + im}, SizeBytes: int64(400000000 + len(im))})
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "m6i.4xlarge", "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "us-east-1",
			"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "failure-domain.beta.kubernetes.io/zone": zone,
		}, Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256%64, i%256), ProviderID: "aws:///" + zone + "/i-" + fmt.Sprintf("%017x", i)},
		Status: corev1.NodeStatus{
			Capacity: res, Allocatable: alloc,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.%d.%d", (i/250)%250, i%250+1)}, {Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("ec2%029x", i), BootID: fmt.Sprintf("%032x", i*31),
				KernelVersion: "6.1.115-126.197.amzn2023.x86_64", OSImage: "Amazon Linux 2023.6.20241121", ContainerRuntimeVersion: "containerd://1.7.23",
				KubeletVersion: "v1.37.1", KubeProxyVersion: "", OperatingSystem: "linux", Architecture: "amd64"},
			Images: images,
		},
	}
}

// NodeStatusPatch is a kubelet's periodic status update (heartbeat times).
func NodeStatusPatch(gen int) []byte {
	t := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC).Add(time.Duration(gen) * time.Second).Format(time.RFC3339)
	return []byte(fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":%q}]}}`, t))
}
