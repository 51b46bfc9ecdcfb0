"""The names tests/support/bench_outcomes.py and tests/support/demo_karpenter.py import from
this path, re-exported from the modules that own them now. Import from those modules in new
code:

* tests/support/control_plane.py: the control plane for one run (``local_control_plane``);
* tests/support/listener_process.py: the listener subprocess (``ListenerProcess``, its
  config.json, ``metric_value``);
* tests/support/e2e_site.py: a scenario's Stage (fakes, client) and Sites (namespace, node
  pools, runner stand-in, listener);
* tests/support/stats.py: ``percentile``.
"""

from tests.support.control_plane import local_control_plane as local_control_plane
from tests.support.e2e_site import Pool as Pool
from tests.support.e2e_site import Site as Site
from tests.support.e2e_site import SiteSpec as SiteSpec
from tests.support.e2e_site import Stage as Stage
from tests.support.listener_process import metric_value as metric_value
from tests.support.stats import percentile as percentile
