package main

// Our own construction of Karpenter's operator. Upstream's operator.NewOperator binds its
// metrics and health endpoints to ":<port>", i.e. every interface, and has no option for the
// address; the local control plane keeps every server on loopback. So the controller manager
// is built here with loopback addresses and otherwise the settings Karpenter itself uses
// (options from flags/environment, its logger, client QPS, the field indexes its controllers
// look up, the readiness checks), and handed to operator.Operator, whose fields are public.

import (
	"context"
	"fmt"
	"net/http"

	"github.com/awslabs/operatorpkg/serrors"
	"github.com/go-logr/zapr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeoverlay"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
)

const bindHost = "127.0.0.1"

func must(err error, what string) {
	if err != nil {
		panic(fmt.Sprintf("%s: %v", what, err))
	}
}

func newOperator() (context.Context, *operator.Operator) {
	ctx := injection.WithOptionsOrDie(context.Background(), options.Injectables...)
	opts := options.FromContext(ctx)

	logger := serrors.NewLogger(zapr.NewLogger(logging.NewLogger(ctx, "controller")))
	log.SetLogger(logger)
	klog.SetLogger(logger)

	config := ctrl.GetConfigOrDie()
	config.QPS = float32(opts.KubeClientQPS)
	config.Burst = opts.KubeClientBurst
	config.UserAgent = "karpenter/localcluster"

	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Logger:                        logging.IgnoreDebugEvents(logger),
		LeaderElection:                !opts.DisableLeaderElection,
		LeaderElectionID:              opts.LeaderElectionName,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       server.Options{BindAddress: fmt.Sprintf("%s:%d", bindHost, opts.MetricsPort)},
		HealthProbeBindAddress:        fmt.Sprintf("%s:%d", bindHost, opts.HealthProbePort),
		BaseContext: func() context.Context {
			return injection.WithOptionsOrDie(log.IntoContext(context.Background(), logger), options.Injectables...)
		},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Field: fields.SelectorFromSet(fields.Set{"metadata.namespace": "kube-node-lease"})},
		}},
	})
	must(err, "creating the controller manager")

	// The field indexes Karpenter's controllers list by (the same set its own operator
	// registers; a missing one fails those lists with "Index with name field:... does not
	// exist"). The CRDs are installed before Karpenter starts, so every index must work.
	idx := mgr.GetFieldIndexer()
	index := func(obj client.Object, field string, value func(client.Object) string) {
		must(idx.IndexField(ctx, obj, field, func(o client.Object) []string {
			return []string{value(o)}
		}), "index "+field)
	}
	index(&corev1.Pod{}, "spec.nodeName", func(o client.Object) string {
		return o.(*corev1.Pod).Spec.NodeName
	})
	index(&corev1.Node{}, "spec.providerID", func(o client.Object) string {
		return o.(*corev1.Node).Spec.ProviderID
	})
	index(&storagev1.VolumeAttachment{}, "spec.nodeName", func(o client.Object) string {
		return o.(*storagev1.VolumeAttachment).Spec.NodeName
	})
	index(&v1.NodeClaim{}, "status.providerID", func(o client.Object) string {
		return o.(*v1.NodeClaim).Status.ProviderID
	})
	nodeClaimRef := func(o client.Object) *v1.NodeClassReference { return o.(*v1.NodeClaim).Spec.NodeClassRef }
	nodePoolRef := func(o client.Object) *v1.NodeClassReference {
		return o.(*v1.NodePool).Spec.Template.Spec.NodeClassRef
	}
	for field, part := range map[string]func(*v1.NodeClassReference) string{
		"group": func(r *v1.NodeClassReference) string { return r.Group },
		"kind":  func(r *v1.NodeClassReference) string { return r.Kind },
		"name":  func(r *v1.NodeClassReference) string { return r.Name },
	} {
		index(&v1.NodeClaim{}, "spec.nodeClassRef."+field, func(o client.Object) string {
			return part(nodeClaimRef(o))
		})
		index(&v1.NodePool{}, "spec.template.spec.nodeClassRef."+field, func(o client.Object) string {
			return part(nodePoolRef(o))
		})
	}

	must(mgr.AddReadyzCheck("manager", func(req *http.Request) error {
		if mgr.GetCache().WaitForCacheSync(req.Context()) {
			return nil
		}
		return fmt.Errorf("caches not synced")
	}), "readyz check")
	must(mgr.AddHealthzCheck("healthz", healthz.Ping), "healthz check")

	return ctx, &operator.Operator{
		Manager:             mgr,
		KubernetesInterface: kubernetes.NewForConfigOrDie(config),
		EventRecorder:       events.NewRecorder(mgr.GetEventRecorderFor("karpenter")),
		Clock:               clock.RealClock{},
		InstanceTypeStore:   nodeoverlay.NewInstanceTypeStore(),
	}
}
