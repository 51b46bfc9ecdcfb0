// Karpenter with its kwok cloud provider, wired like upstream's kwok/main.go, except that the
// cloud provider is wrapped so tests can take capacity away at run time.
//
// The stock kwok provider marks every offering available and never fails a launch, so a
// NodePool whose instance type the cloud cannot supply cannot be modelled with it. Ours reads
// a small JSON file (KARPENTER_CAPACITY_FILE) on every call, so a test changes the cloud's
// answer by rewriting the file, without restarting Karpenter:
//
//	{"unavailable": ["type-a"], "insufficientCapacity": ["type-b"],
//	 "launchDelay": {"low": 30, "high": 90, "seed": 7}}
//
// "unavailable": every offering of the type is reported unavailable, so Karpenter's
// scheduler does not consider the type at all (what a provider's offering cache does after
// it learnt a type is sold out). "insufficientCapacity": the type still looks available, but
// a launch that can only use it fails with Karpenter's insufficient-capacity error (what a
// cloud answers at launch time); a launch that may also use other types uses those. A missing
// or empty file means full capacity; an unreadable one is logged and treated as empty.
//
// "insufficientCapacityTTL" (seconds, default 0): after a launch is refused for a type, the
// type is reported unavailable for that long, as a real provider's cache of offerings that
// ran out does (AWS's keeps them 3 minutes), also after the capacity is back. Without it
// Karpenter retries a refused type on every provisioning pass: a loop of NodeClaims created
// and deleted that no cloud shows. Set back to 0, what was remembered is forgotten.
//
// "launchDelay": every launch that gets capacity takes a delay drawn uniformly from
// [low, high] seconds before its Node registers (a real cloud's launch and boot time is not
// a constant). The kwok NodeClass has one registration delay for every node; this gives each
// node its own. The draws come from a generator seeded with "seed" (re-seeded when the seed
// changes), so a run's sequence of delays is repeatable; which node gets which draw depends
// on the order in which the nodes are created. Insufficient-capacity errors return at once,
// as a cloud's do.
//
// The delay is spent after Create has returned, between the launch and the Node, as on a
// real cloud: the instance exists (the NodeClaim has its providerID) at once and boots for
// the delay. Spent inside Create instead, every NodeClaim stays unlaunched for the delay, and
// Karpenter does not provision while a NodeClaim is unlaunched ("cluster is waiting on sync"):
// launches would go in rounds, each waiting for the slowest launch of the round before.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
)

const capacityFileEnv = "KARPENTER_CAPACITY_FILE"

type launchDelay struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	Seed int64   `json:"seed"`
}

type capacityFile struct {
	Unavailable          []string     `json:"unavailable"`
	InsufficientCapacity []string     `json:"insufficientCapacity"`
	InsufficientTTL      float64      `json:"insufficientCapacityTTL"`
	LaunchDelay          *launchDelay `json:"launchDelay"`
}

// constrained wraps a cloud provider and applies the capacity file to it.
type constrained struct {
	cloudprovider.CloudProvider
	path string

	mu      sync.Mutex
	lastErr string
	rng     *rand.Rand
	seed    int64
	refused map[string]time.Time // type -> until when it is reported unavailable
}

// refuse remembers that launches of these types were refused, for the file's TTL.
func (c *constrained) refuse(types []string, ttl float64) {
	if ttl <= 0 || len(types) == 0 {
		return
	}
	until := time.Now().Add(time.Duration(ttl * float64(time.Second)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = map[string]time.Time{}
	}
	for _, t := range types {
		c.refused[t] = until
	}
}

// stillRefused lists the types refused within their TTL.
func (c *constrained) stillRefused() []string {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for t, until := range c.refused {
		if now.Before(until) {
			out = append(out, t)
		}
	}
	return out
}

// delay draws the next launch delay (zero without a "launchDelay").
func (c *constrained) delay(spec *launchDelay) time.Duration {
	if spec == nil || spec.High <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rng == nil || c.seed != spec.Seed {
		c.rng = rand.New(rand.NewSource(spec.Seed))
		c.seed = spec.Seed
	}
	low := max(spec.Low, 0)
	seconds := low + c.rng.Float64()*max(spec.High-low, 0)
	return time.Duration(seconds * float64(time.Second))
}

// bootingNodes is the kube client the kwok provider registers its Nodes with: it holds each
// new Node back for a launch delay. The provider creates a launched NodeClaim's Node from a
// goroutine of its own after Create has returned, so the wait delays the Node, not Create.
type bootingNodes struct {
	client.Client
	cloud *constrained

	mu     sync.Mutex
	waited map[string]bool // Nodes already held back: the provider retries a failed create
}

func (b *bootingNodes) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if node, ok := obj.(*corev1.Node); ok && b.first(node.Name) {
		if wait := b.cloud.delay(b.cloud.read(ctx).LaunchDelay); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return b.Client.Create(ctx, obj, opts...)
}

func (b *bootingNodes) first(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waited[name] {
		return false
	}
	b.waited[name] = true
	return true
}

func (c *constrained) read(ctx context.Context) capacityFile {
	var out capacityFile
	if c.path == "" {
		return out
	}
	data, err := os.ReadFile(c.path)
	if err == nil && len(data) > 0 {
		err = json.Unmarshal(data, &out)
	} else if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	// Log a bad file once per distinct error, not on every scheduling pass.
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != c.lastErr {
		c.lastErr = msg
		if err != nil {
			log.FromContext(ctx).Error(err, "ignoring unreadable capacity file", "path", c.path)
		}
	}
	if err != nil {
		return capacityFile{}
	}
	return out
}

func (c *constrained) GetInstanceTypes(ctx context.Context, np *v1.NodePool) ([]*cloudprovider.InstanceType, error) {
	its, err := c.CloudProvider.GetInstanceTypes(ctx, np)
	if err != nil {
		return nil, err
	}
	file := c.read(ctx)
	gone := file.Unavailable
	if file.InsufficientTTL > 0 { // a TTL set back to 0 forgets what was remembered
		gone = append(slices.Clone(gone), c.stillRefused()...)
	}
	if len(gone) == 0 {
		return its, nil
	}
	out := make([]*cloudprovider.InstanceType, 0, len(its))
	for _, it := range its {
		if slices.Contains(gone, it.Name) {
			// A copy: the provider's own list is shared and must keep its offerings.
			it = it.DeepCopy()
			for _, of := range it.Offerings {
				of.Available = false
			}
		}
		out = append(out, it)
	}
	return out, nil
}

func (c *constrained) Create(ctx context.Context, nc *v1.NodeClaim) (*v1.NodeClaim, error) {
	file := c.read(ctx)
	ice := file.InsufficientCapacity
	if len(ice) == 0 {
		return c.CloudProvider.Create(ctx, nc)
	}
	nc = nc.DeepCopy()
	for i, req := range nc.Spec.Requirements {
		if req.Key != corev1.LabelInstanceTypeStable {
			continue
		}
		left := slices.DeleteFunc(slices.Clone(req.Values), func(t string) bool {
			return slices.Contains(ice, t)
		})
		c.refuse(slices.DeleteFunc(slices.Clone(req.Values), func(t string) bool {
			return !slices.Contains(ice, t)
		}), file.InsufficientTTL)
		if len(left) == 0 {
			return nil, cloudprovider.NewInsufficientCapacityError(
				fmt.Errorf("no capacity for instance types %v", req.Values))
		}
		nc.Spec.Requirements[i].Values = left
	}
	return c.CloudProvider.Create(ctx, nc)
}

func main() {
	ctx, op := newOperator()
	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed constructing instance types")
	}

	undecorated := &constrained{path: os.Getenv(capacityFileEnv)}
	nodes := &bootingNodes{Client: op.GetClient(), cloud: undecorated, waited: map[string]bool{}}
	undecorated.CloudProvider = kwok.NewCloudProvider(ctx, nodes, instanceTypes)
	cloudProvider := overlay.Decorate(undecorated, op.GetClient(), op.InstanceTypeStore)
	clusterState := state.NewCluster(op.Clock, op.GetClient(), cloudProvider)
	op.
		WithControllers(ctx, controllers.NewControllers(
			ctx,
			op.Manager,
			op.Clock,
			op.GetClient(),
			op.EventRecorder,
			cloudProvider,
			undecorated,
			clusterState,
			op.InstanceTypeStore,
		)...).Start(ctx)
}
