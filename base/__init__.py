"""The layer below both packages: the Kubernetes client, backoff, task and metrics-page
helpers. It imports neither ``listener`` nor ``capacity``."""
