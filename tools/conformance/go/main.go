// Command reference runs the upstream listener loop the way ARC 0.14.2's ghalistener wires it:
// scaleset.Client (auth chain, retries, User-Agent) + MessageSessionClient (session, poll, ack,
// acquire) + listener.Listener (message order, 202 path), with a scaler that reports every
// call as one JSON object POSTed to $CONFORMANCE_RECORD_URL instead of patching Kubernetes.
//
// It reads the same config.json (LISTENER_CONFIG_PATH) the listener under test reads, and
// ends like ghalistener: "Application returned an error: ..." and exit 1 for every error,
// including the context cancellation a SIGTERM causes; the session is deleted on the way out.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/actions/scaleset"
	"github.com/actions/scaleset/listener"
	"github.com/google/uuid"
	"golang.org/x/net/http/httpproxy"
)

// config is the part of ARC's config.json this reference needs (snake_case keys, as the
// controller writes them).
type config struct {
	ConfigureURL            string `json:"configure_url"`
	GitHubAppID             string `json:"github_app_id"`
	GitHubAppInstallationID int64  `json:"github_app_installation_id"`
	GitHubAppPrivateKey     string `json:"github_app_private_key"`
	GitHubToken             string `json:"github_token"`
	MaxRunners              int    `json:"max_runners"`
	MinRunners              int    `json:"min_runners"`
	RunnerScaleSetID        int    `json:"runner_scale_set_id"`
}

// ARC's release the reference stands in for; ARC puts its own build stamps here.
const (
	arcVersion   = "0.14.2"
	arcCommitSHA = "9bb16ae4"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	path, ok := os.LookupEnv("LISTENER_CONFIG_PATH")
	if !ok {
		fmt.Fprintf(os.Stderr, "Error: LISTENER_CONFIG_PATH environment variable is not set\n")
		os.Exit(1)
	}
	cfg, err := readConfig(path)
	if err != nil {
		log.Printf("Failed to read config: %v", err)
		os.Exit(1)
	}
	if err := run(ctx, cfg); err != nil {
		log.Printf("Application returned an error: %v", err)
		os.Exit(1)
	}
}

func readConfig(path string) (*config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("failed to decode config: %w", err)
	}
	return &cfg, nil
}

func run(ctx context.Context, cfg *config) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hostname, err := os.Hostname()
	if err != nil {
		hostname = uuid.NewString()
	}

	info := scaleset.SystemInfo{
		System:     "actions-runner-controller",
		Version:    arcVersion,
		CommitSHA:  arcCommitSHA,
		ScaleSetID: cfg.RunnerScaleSetID,
		Subsystem:  "ghalistener",
	}
	proxy := httpproxy.FromEnvironment().ProxyFunc()
	options := []scaleset.HTTPOption{
		scaleset.WithLogger(logger),
		scaleset.WithProxy(func(req *http.Request) (*url.URL, error) { return proxy(req.URL) }),
	}
	var client *scaleset.Client
	if cfg.GitHubToken != "" {
		client, err = scaleset.NewClientWithPersonalAccessToken(
			scaleset.NewClientWithPersonalAccessTokenConfig{
				GitHubConfigURL:     cfg.ConfigureURL,
				PersonalAccessToken: cfg.GitHubToken,
				SystemInfo:          info,
			}, options...)
	} else {
		client, err = scaleset.NewClientWithGitHubApp(
			scaleset.ClientWithGitHubAppConfig{
				GitHubConfigURL: cfg.ConfigureURL,
				GitHubAppAuth: scaleset.GitHubAppAuth{
					ClientID:       cfg.GitHubAppID,
					InstallationID: cfg.GitHubAppInstallationID,
					PrivateKey:     cfg.GitHubAppPrivateKey,
				},
				SystemInfo: info,
			}, options...)
	}
	if err != nil {
		return fmt.Errorf("failed to create actions client: %w", err)
	}

	sessionClient, err := client.MessageSessionClient(ctx, cfg.RunnerScaleSetID, hostname)
	if err != nil {
		return fmt.Errorf("failed to create actions message session client: %w", err)
	}
	defer func() {
		if err := sessionClient.Close(context.Background()); err != nil {
			logger.Error("Failed to close session client", "error", err)
		}
	}()

	l, err := listener.New(sessionClient, listener.Config{
		ScaleSetID: cfg.RunnerScaleSetID,
		MaxRunners: cfg.MaxRunners,
		Logger:     logger.With("component", "listener"),
	})
	if err != nil {
		return fmt.Errorf("failed to create new listener: %w", err)
	}
	rec := &recordingScaler{
		url:        os.Getenv("CONFORMANCE_RECORD_URL"),
		minRunners: cfg.MinRunners,
		maxRunners: cfg.MaxRunners,
	}
	return l.Run(ctx, rec)
}

// recordingScaler reports each call; the desired count it returns is ARC's target,
// min(min_runners + assigned jobs, max_runners).
type recordingScaler struct {
	url        string
	minRunners int
	maxRunners int
}

func (s *recordingScaler) HandleDesiredRunnerCount(ctx context.Context, count int) (int, error) {
	target := min(s.minRunners+count, s.maxRunners)
	return target, s.record(ctx, map[string]any{"call": "desired", "count": count, "target": target})
}

func (s *recordingScaler) HandleJobStarted(ctx context.Context, job *scaleset.JobStarted) error {
	// The fields ARC's scaler writes to the EphemeralRunner status, omitempty as in its type.
	status := map[string]any{}
	put := func(key string, value any, zero bool) {
		if !zero {
			status[key] = value
		}
	}
	put("jobDisplayName", job.JobDisplayName, job.JobDisplayName == "")
	put("jobId", job.JobID, job.JobID == "")
	repo := fmt.Sprintf("%s/%s", job.OwnerName, job.RepositoryName)
	put("jobRepositoryName", repo, false)
	put("jobRequestId", job.RunnerRequestID, job.RunnerRequestID == 0)
	put("jobWorkflowRef", job.JobWorkflowRef, job.JobWorkflowRef == "")
	put("workflowRunId", job.WorkflowRunID, job.WorkflowRunID == 0)
	return s.record(ctx, map[string]any{
		"call": "job_started", "runner": job.RunnerName, "status": status,
	})
}

func (s *recordingScaler) HandleJobCompleted(ctx context.Context, job *scaleset.JobCompleted) error {
	return s.record(ctx, map[string]any{
		"call": "job_completed", "runner": job.RunnerName, "result": job.Result,
	})
}

func (s *recordingScaler) record(ctx context.Context, event map[string]any) error {
	if s.url == "" {
		return nil
	}
	body, err := json.Marshal(event)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("record scaler call: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return errors.New("record scaler call: " + resp.Status)
	}
	return nil
}
