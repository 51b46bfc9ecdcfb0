import json, sys
from tests.support.bench_agreement import *
from capacity.whatif import simulate as S
doc=json.load(open(sys.argv[1])); seed=int(sys.argv[2]); variant=sys.argv[3]
c=config_from(doc['config'])
t0 = c.spec.start - c.warmup
orig = S._Run.reconcile
def rec(self, now):
    orig(self, now)
    d = S.policy.resolve_demand(self.hud, now, self.params(0)).queued
    print(f"{now-t0:7.1f} c{self.index} pairs={len(self.pairs)} run={sum(p.running for p in self.pairs.values())} nodes={len(self.nodes)} jobs={self.running_jobs} demand={d} q={self.queue.queued()}")
S._Run.reconcile = rec
o = replay(c, variant, seed)
print(o.describe())
