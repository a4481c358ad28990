package main

// The realistic pods and nodes live in package realistic, shared with the
// cache's Go benchmarks.

import "github.com/index-apiserver/index-apiserver/test/realistic"

const (
	sparkInactiveLabel = realistic.SparkInactiveLabel
)

var (
	sparkExecutorSelector    = realistic.SparkExecutorSelector
	flinkTaskManagerSelector = realistic.FlinkTaskManagerSelector
	nodeName                 = realistic.NodeName
	sparkAppID               = realistic.SparkAppID
	sparkDriverPod           = realistic.SparkDriverPod
	sparkExecutorPod         = realistic.SparkExecutorPod
	flinkTaskManagerPod      = realistic.FlinkTaskManagerPod
	flinkCluster             = realistic.FlinkCluster
	runningStatus            = realistic.RunningStatus
	statusPatch              = realistic.StatusPatch
	realisticNode            = realistic.Node
	nodeStatusPatch          = realistic.NodeStatusPatch
)
