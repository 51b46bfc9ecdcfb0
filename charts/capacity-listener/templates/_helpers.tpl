{{/*
ARC's name for a scale set's listener (pod, ServiceAccount, Role, RoleBinding):
"<scale set>-<hash>-listener", hash = the first 8 characters of rand.SafeEncodeString of
the decimal FNV-1a (32 bit) of "<namespace>@<runnerGroup>@<githubConfigUrl>", the URL with
one trailing "/" removed as ARC's chart writes it. The same formula as listener/rbac.py
(`ghalistener rbac`); tests/chart/test_chart.py checks the two agree on generated inputs.

Sprig has neither FNV nor bit operations, so the hash is done with integer arithmetic:
- the UTF-8 bytes of the input come from printf "%x" (two hex digits per byte), so
  non-ASCII input hashes exactly like Go's []byte(string);
- XOR only touches the low 8 bits of the 32-bit state: those are rebuilt bit by bit;
- state * prime < 2^57 fits sprig's int64 before the mod 2^32.
SafeEncodeString only sees decimal digits here; '0'..'9' map to "456789bcdf".
Argument: a dict with name, namespace, runnerGroup, githubConfigUrl.
*/}}
{{- define "capacity-listener.listenerName" -}}
{{- $hexValue := dict "0" 0 "1" 1 "2" 2 "3" 3 "4" 4 "5" 5 "6" 6 "7" 7 "8" 8 "9" 9 "a" 10 "b" 11 "c" 12 "d" 13 "e" 14 "f" 15 -}}
{{- $url := trimSuffix "/" (toString .githubConfigUrl) -}}
{{- $hex := printf "%x" (printf "%s@%s@%s" .namespace (toString (.runnerGroup | default "")) $url) -}}
{{- $state := 2166136261 -}}
{{- range $i := until (int (div (len $hex) 2)) -}}
{{- $hi := get $hexValue (substr (int (mul 2 $i)) (int (add (mul 2 $i) 1)) $hex) -}}
{{- $lo := get $hexValue (substr (int (add (mul 2 $i) 1)) (int (add (mul 2 $i) 2)) $hex) -}}
{{- $byte := add (mul $hi 16) $lo -}}
{{- $low := mod $state 256 -}}
{{- $xor := 0 -}}
{{- range $bit := list 1 2 4 8 16 32 64 128 -}}
{{- if ne (mod (div $low $bit) 2) (mod (div $byte $bit) 2) -}}
{{- $xor = add $xor $bit -}}
{{- end -}}
{{- end -}}
{{- $state = mod (mul (add (sub $state $low) $xor) 16777619) 4294967296 -}}
{{- end -}}
{{- $encoded := "" -}}
{{- range $digit := splitList "" (printf "%d" $state) -}}
{{- $encoded = printf "%s%s" $encoded (substr (atoi $digit) (int (add1 (atoi $digit))) "456789bcdf") -}}
{{- end -}}
{{- printf "%s-%s-listener" .name (trunc 8 $encoded) -}}
{{- end -}}

{{/* The controller namespace: where ARC runs the listener pods (this release's). */}}
{{- define "capacity-listener.controllerNamespace" -}}
{{- .Release.Namespace -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "capacity-listener.labels" -}}
app.kubernetes.io/name: capacity-listener
app.kubernetes.io/part-of: gha-runner-scale-set
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The scale sets' runner namespaces, each once, sorted. */}}
{{- define "capacity-listener.runnerNamespaces" -}}
{{- $namespaces := list -}}
{{- range $name, $set := .Values.scaleSets -}}
{{- $namespaces = append $namespaces $set.namespace -}}
{{- end -}}
{{- $namespaces | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* "true" when a scale set's listener reads Karpenter's NodePools: its capacity is on and
capacity.nodepools.enabled is not set to false (the listener's default is on). Argument: the
scale set's capacity dict. */}}
{{- define "capacity-listener.readsNodePools" -}}
{{- $pools := .nodepools | default dict -}}
{{- if and .enabled (or (not (hasKey $pools "enabled")) $pools.enabled) -}}true{{- end -}}
{{- end -}}

{{/* "true" when a ClusterRole is needed: forced in rbac, or asked for by a scale set's
settings. Argument: dict with root and which ("nodeChecks" or "nodePools"). */}}
{{- define "capacity-listener.needs" -}}
{{- $root := .root -}}
{{- $need := get $root.Values.rbac .which -}}
{{- range $name, $set := $root.Values.scaleSets -}}
{{- $capacity := $set.capacity | default dict -}}
{{- if and (eq $.which "nodeChecks") $capacity.node_checks -}}{{- $need = true -}}{{- end -}}
{{- if and (eq $.which "nodePools") (include "capacity-listener.readsNodePools" $capacity) -}}{{- $need = true -}}{{- end -}}
{{- end -}}
{{- if $need -}}true{{- end -}}
{{- end -}}

{{/* The listener image reference: <registry>/<repository>:<tag> (no registry: the
repository alone; no tag: the chart's appVersion, the release the chart came with). */}}
{{- define "capacity-listener.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}{{ end -}}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
