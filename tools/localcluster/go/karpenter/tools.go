//go:build tools

// Keeps upstream's own kwok main in the module graph, so the stock binary can be built from
// these pins too (`go build sigs.k8s.io/karpenter/kwok`) to compare against ours.
package main

import _ "sigs.k8s.io/karpenter/kwok"
