// The pause program of the test cluster's pod sandbox image (see ../README.md).
module agentgate.test/kubernetes-pause

go 1.24.0
