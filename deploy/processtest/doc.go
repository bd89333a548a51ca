// Package processtest runs the latch binary as the StatefulSet in deploy/k8s runs it: each
// "pod" is a real process started with exactly the container args the manifests render,
// with the pod's DNS names mapped to loopback addresses (pod i at 127.0.0.(20+i), the
// Services at 127.0.0.19, proxied to ready pods like a Service's endpoints). It has tests
// only.
package processtest
