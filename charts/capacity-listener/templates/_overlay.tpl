{{/*
The values overlay for ARC's gha-runner-scale-set chart, for one scale set: the only copy.
configmaps.yaml writes it to the ConfigMap `<scale set>-arc-values` (key values.yaml), NOTES.txt
prints the command that fetches it (`ghalistener overlay`, listener/overlay.py, merges it into
a team's own values by the rules its docstring gives), and deploy/helm/values-capacity-*.yaml
are this template rendered for ci/example-values.yaml (deploy/gen_overlays.py;
tests/chart/test_overlays.py fails when they differ). So the ConfigMap names it mounts are the ones this chart creates, and
the listener's settings (metrics, resources, securityContext) cannot drift between copies.
Argument: a dict with root (the chart's context), name (the scale set) and set (its values).
*/}}
{{- define "capacity-listener.overlay" -}}
{{- $root := .root -}}
{{- $name := .name -}}
{{- $set := .set -}}
{{- $controller := include "capacity-listener.controllerNamespace" $root -}}
{{- $hud := (($set.capacity | default dict).hud | default dict).enabled -}}
{{- $runner := $set.runnerPod | default dict -}}
# Values overlay for ARC's `gha-runner-scale-set` chart: scale set {{ $name }}, whose listener
# is the capacity-aware listener. Written by the capacity-listener chart (release
# {{ $root.Release.Name }}, namespace {{ $controller }}). With values of your own for ARC's chart
# (runner image, env, volumes, sidecars), merge it into them by container name instead of
# passing both to Helm (Helm replaces lists): one static file, e.g. for a GitOps repository:
#
#   ghalistener overlay --values my-values.yaml --scale-set {{ $name }} \
#     --overlay values-{{ $name }}.yaml > values-{{ $name }}.merged.yaml
#
# Without values of your own, install ARC's scale set with this file as it is:
#
#   helm upgrade --install {{ $name }} \
#     oci://ghcr.io/actions/actions-runner-controller-charts/gha-runner-scale-set \
#     --namespace {{ $set.namespace }} --values values-{{ $name }}.yaml \
#     --set githubConfigSecret=<your secret>
#
# Three changes from a stock kubernetes-mode scale set, nothing else:
#   1. listenerTemplate: the capacity-aware image for the container named `listener`, plus its
#      settings (ConfigMap capacity-listener-{{ $name }}, controller namespace).
#   2. template: runner pods get priorityClassName arc-runner (priority 0).
#   3. the runner-container hooks get a workflow pod template (ConfigMap
#      workflow-pod-template-{{ $name }}, runner namespace) that gives workflow pods
#      arc-workflow (20).
# Remove `listenerTemplate` to go back to ARC's own listener (deploy/README.md, "Roll back").
# Keep githubConfigUrl and runnerGroup as they are: the listener account the chart binds is
# computed from them.

githubConfigUrl: {{ $set.githubConfigUrl | quote }}
{{- with $set.runnerGroup }}
runnerGroup: {{ . | quote }}
{{- end }}
{{- if hasKey $set "minRunners" }}
minRunners: {{ $set.minRunners }}
{{- end }}
{{- if hasKey $set "maxRunners" }}
maxRunners: {{ $set.maxRunners }}
{{- end }}

# The capacity monitor relies on kubernetes mode: each job runs in a separate workflow pod
# (`<runner-pod>-workflow`), and that pod is what the workflow placeholders reserve room for.
# No storageClassName: the cluster's default StorageClass (set
# scaleSets.{{ $name }}.workVolumeClaim.storageClassName in the capacity-listener chart to pick one).
containerMode:
  type: kubernetes
  kubernetesModeWorkVolumeClaim:
    {{- toYaml ($set.workVolumeClaim | default (dict "accessModes" (list "ReadWriteOnce") "resources" (dict "requests" (dict "storage" "10Gi")))) | nindent 4 }}

## The listener pod (created by the ARC controller in the CONTROLLER namespace,
## {{ $controller }}). ARC merges the container named `listener` into its own listener
## container: image/command replace ARC's, env/ports/volumeMounts are appended, resources,
## probes and securityContext replace ARC's. Pod-level volumes are appended;
## imagePullSecrets replace the controller's.
listenerTemplate:
  spec:
    # ARC copies this field from the template even when it is unset, which leaves the
    # listener pod at Kubernetes' default 30 s. The shutdown (placeholder clean-up, then the
    # session DELETE) is sized to LISTENER_SHUTDOWN_GRACE below: keep the two equal.
    terminationGracePeriodSeconds: 60
    {{- with $root.Values.imagePullSecrets }}
    imagePullSecrets:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    containers:
      - name: listener
        # The image built from this repository's Dockerfile. It has /ghalistener, ARC's
        # default command, so `command` is not needed.
        image: {{ include "capacity-listener.image" $root }}
        env:
          # Capacity settings for this scale set: a YAML file (the chart's
          # scaleSets.{{ $name }}.capacity, mounted from a ConfigMap below). Any field can also be
          # set or overridden with an environment variable: CAPACITY_<FIELD>, nested fields
          # joined by "__", e.g. CAPACITY_PROACTIVE_CAPACITY=2 or CAPACITY_HUD__ENABLED=false.
          - name: CAPACITY_CONFIG_FILE
            value: /etc/capacity-listener/capacity.yaml
          {{- if $hud }}
          # The HUD API token (Secret in the controller namespace, created by you). Read only
          # from the environment; never logged.
          - name: HUD_API_TOKEN
            valueFrom:
              secretKeyRef:
                name: {{ $root.Values.hud.secretName }}
                key: {{ $root.Values.hud.secretKey }}
          {{- end }}
          # /healthz and /readyz for the probes below.
          - name: LISTENER_PROBE_ADDR
            value: ":8081"
          # How long to retry a 409 "session already exists" (the previous pod's session
          # expires) before giving up. Seconds.
          - name: LISTENER_SESSION_CONFLICT_TIMEOUT
            value: "600"
          # The ARC release this scale set runs (the gha-runner-scale-set chart version); sent
          # as "version" in the User-Agent. The capacity-listener chart's `arcVersion`.
          - name: LISTENER_ARC_VERSION
            value: {{ $root.Values.arcVersion | quote }}
          # The pod's terminationGracePeriodSeconds (above): the shutdown fits inside it.
          - name: LISTENER_SHUTDOWN_GRACE
            value: "60"
        ports:
          - name: probes
            containerPort: 8081
            protocol: TCP
        volumeMounts:
          - name: capacity-config
            mountPath: /etc/capacity-listener
            readOnly: true
        # Measured goal: < 128 MiB RSS with 1,000 pairs. The limit leaves room for bursts of
        # watch events; there is no per-node informer to grow with the cluster.
        resources:
          requests:
            cpu: 50m
            memory: 128Mi
          limits:
            memory: 256Mi
        # Start-up includes the GitHub auth chain and, after a restart, up to
        # LISTENER_SESSION_CONFLICT_TIMEOUT of 409 retries: give it 11 minutes before liveness
        # counts.
        startupProbe:
          httpGet:
            path: /healthz
            port: probes
          periodSeconds: 10
          failureThreshold: 66
        livenessProbe:
          httpGet:
            path: /healthz
            port: probes
          periodSeconds: 10
          timeoutSeconds: 3
          failureThreshold: 6
        # Ready = a recent successful long poll (and reconcile pass when capacity is on).
        readinessProbe:
          httpGet:
            path: /readyz
            port: probes
          periodSeconds: 10
          timeoutSeconds: 3
          failureThreshold: 3
        securityContext:
          runAsNonRoot: true
          runAsUser: 65532
          runAsGroup: 65532
          readOnlyRootFilesystem: true
          allowPrivilegeEscalation: false
          capabilities:
            drop: ["ALL"]
          seccompProfile:
            type: RuntimeDefault
    volumes:
      # Created by the capacity-listener chart in the CONTROLLER namespace ({{ $controller }}),
      # where the listener pod runs.
      - name: capacity-config
        configMap:
          name: capacity-listener-{{ $name }}

## Metrics: leave `listenerMetrics` unset: ARC's default metric set is exported, and the
## capacity metrics (gha_capacity_*, gha_available_jobs, gha_acquired_jobs) are always
## exported, even when an allow-list is given. The listener serves them only when the
## CONTROLLER chart (gha-runner-scale-set-controller) sets `metrics.listenerAddr` (e.g.
## ":8080") and `metrics.listenerEndpoint` ("/metrics"); ARC then adds a port named `metrics`
## to the listener pod. The capacity-listener chart's `monitoring.podMonitor.enabled` scrapes
## that port and labels the series with this scale set's name (`scale_set`) for the alerts.

## The runner pods (priority 0). Their requests are what each runner placeholder reserves.
template:
  metadata:
    annotations:
      # Karpenter consolidation evicts a lone runner pod whose node it can empty, killing the
      # job. The runner PodDisruptionBudget (the chart's) already stops that; the annotation
      # does too where the budget is not installed.
      karpenter.sh/do-not-disrupt: "true"
  spec:
    priorityClassName: arc-runner
    {{- with $runner.nodeSelector }}
    # The runner placeholders copy this selector (unless capacity.node_selector is set).
    nodeSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $runner.tolerations }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    containers:
      - name: runner
        # ARC's stock runner, for a scale set without values of its own: the merge keeps your
        # runner container's image, command, args and resources (and nodeSelector and
        # tolerations above) and adds only the env and volumeMounts below.
        image: ghcr.io/actions/actions-runner:latest
        command: ["/home/runner/run.sh"]
        env:
          # The chart adds the other kubernetes-mode variables itself; this one points the
          # runner-container hooks at the workflow pod template mounted below.
          - name: ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE
            value: /home/runner/pod-templates/workflow.yaml
        {{- /* The runner pod must ask for what its placeholder holds, or it fits beside the
               placeholder instead of taking its room: the placeholders' default size when
               runnerPod.resources is not given. */}}
        resources:
          {{- toYaml ($runner.resources | default (dict "requests" (dict "cpu" "750m" "memory" "512Mi") "limits" (dict "memory" "512Mi"))) | nindent 10 }}
        volumeMounts:
          - name: workflow-pod-template
            mountPath: /home/runner/pod-templates
            readOnly: true
    volumes:
      # Created by the capacity-listener chart in the runner namespace ({{ $set.namespace }}).
      - name: workflow-pod-template
        configMap:
          name: workflow-pod-template-{{ $name }}
{{- end -}}

{{/* The one-line command that fetches a scale set's overlay. Argument: dict root, name. */}}
{{- define "capacity-listener.overlayCommand" -}}
kubectl get configmap {{ .name }}-arc-values -n {{ include "capacity-listener.controllerNamespace" .root }} -o jsonpath='{.data.values\.yaml}' > values-{{ .name }}.yaml
{{- end -}}
