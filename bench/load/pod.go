package load

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// podValue returns value i of put --val-kind pod: a Kubernetes Pod as the
// API server's JSON encoding writes it (a Deployment's replica, with its
// managed fields and status), cut to n bytes, or repeated until it has n.
// The parts that differ from pod to pod in a real cluster are random here:
// uids, the ReplicaSet hash, container and image digests, the pod IP and
// the timestamps. It stands for values that compress the way real
// objects do, for comparing storage footprints; etcd's benchmark writes
// random bytes, which no engine can compress.
func podValue(rng *rand.Rand, i, n int) []byte {
	hex := func(k int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, k)
		for j := range b {
			b[j] = digits[rng.IntN(16)]
		}
		return string(b)
	}
	uid := func() string { return hex(8) + "-" + hex(4) + "-" + hex(4) + "-" + hex(4) + "-" + hex(12) }
	ts := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(30*24*3600)) * time.Second).Format(time.RFC3339)
	hash := hex(10)
	app := fmt.Sprintf("svc-%d", i%97)
	name := fmt.Sprintf("%s-%s-%s", app, hash, hex(5))
	doc := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"generateName":"%s-%s-","namespace":"team-%d","uid":%q,"resourceVersion":"%d","creationTimestamp":%q,"labels":{"app":%q,"pod-template-hash":%q,"tier":"backend"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"%s-%s","uid":%q,"controller":true,"blockOwnerDeletion":true}],"managedFields":[{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":%q,"fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:tier":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"%s\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}},{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":%q,"fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:podIPs":{},"f:startTime":{}}},"subresource":"status"}]},"spec":{"volumes":[{"name":"kube-api-access-%s","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}}],"defaultMode":420}}],"containers":[{"name":"app","image":"registry.example.com/%s:1.%d.%d","ports":[{"name":"http","containerPort":8080,"protocol":"TCP"}],"env":[{"name":"APP_NAME","value":%q},{"name":"LOG_LEVEL","value":"info"},{"name":"POD_NAME","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.name"}}}],"resources":{"limits":{"cpu":"500m","memory":"256Mi"},"requests":{"cpu":"100m","memory":"128Mi"}},"volumeMounts":[{"name":"kube-api-access-%s","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default","nodeName":"node-%d","securityContext":{},"schedulerName":"default-scheduler","tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},"status":{"phase":"Running","conditions":[{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":%q},{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":%q},{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":%q},{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":%q}],"hostIP":"10.0.%d.%d","podIP":"10.244.%d.%d","podIPs":[{"ip":"10.244.%d.%d"}],"startTime":%q,"containerStatuses":[{"name":"app","state":{"running":{"startedAt":%q}},"lastState":{},"ready":true,"restartCount":0,"image":"registry.example.com/%s:1.%d.%d","imageID":"registry.example.com/%s@sha256:%s","containerID":"containerd://%s","started":true}],"qosClass":"Burstable"}}`,
		name, app, hash, i%13, uid(), 100000+i, ts, app, hash, app, hash, uid(), ts, uid(), ts,
		hex(5), app, i%7, i%11, app, hex(5), i%50,
		ts, ts, ts, ts, rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256), ts, ts,
		app, i%7, i%11, app, hex(64), hex(64))
	out := make([]byte, 0, n)
	for len(out) < n {
		out = append(out, doc[:min(len(doc), n-len(out))]...)
	}
	return out
}
