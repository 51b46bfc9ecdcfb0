"""Tools beside the product: the demo, the benchmarks, the local cluster, the conformance
reference build and the fakes they stand on (tools/README.md). Never shipped in the image."""
